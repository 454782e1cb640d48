//! The code of `#[stream]`: `StreamDef` for the struct, its `NAME` constant, and its
//! registration.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::{ItemStruct, LitStr};

use super::{call, duration, krate, variant};
use syn::spanned::Spanned;

use crate::attrs::{OriginAttrs, StreamAttrs};
use crate::value::{Int, PathOrString};

/// The struct's `StreamDef` impl, its `NAME` constant and registration; `None` without a name,
/// subjects (unless a mirror or sources give the stream its messages) or a `crate` path (which
/// validation reported).
pub(crate) fn stream(target: &ItemStruct, attrs: &StreamAttrs) -> Option<TokenStream> {
    let ident = &target.ident;
    let name = attrs.name.as_ref()?;
    let subjects = match &attrs.subjects {
        Some(subjects) => subjects.lits.as_slice(),
        None if attrs.mirror.is_some() || attrs.sources.is_some() => &[],
        None => return None,
    };
    let krate = krate(&attrs.krate)?;
    let builders = builders(attrs);
    let name_const = name_const(target, name);
    let codec = match &attrs.codec {
        Some(codec) => super::handler::codec_type(codec),
        None => quote!(__nats_topology::Json),
    };
    Some(quote! {
        const _: () = {
            use #krate::__private as __nats_topology;
            #name_const
            impl __nats_topology::StreamDef for #ident {
                const DECL: __nats_topology::StreamDecl =
                    __nats_topology::StreamDecl::new(#name, &[#(#subjects),*]) #(#builders)*;
                type Codec = #codec;
            }
            static __NATS_TOPOLOGY_STREAM: __nats_topology::StreamDecl =
                <#ident as __nats_topology::StreamDef>::DECL;
            __nats_topology::inventory::submit! {
                __nats_topology::StreamRegistration { decl: &__NATS_TOPOLOGY_STREAM }
            }
        };
    })
}

/// `impl Orders { pub const NAME: &str = "ORDERS"; }`, as visible as the struct (a `pub`
/// constant on a private struct would be an `unreachable_pub` warning in the user's crate).
fn name_const(target: &ItemStruct, name: &LitStr) -> TokenStream {
    let (ident, vis) = (&target.ident, &target.vis);
    let doc = format!(
        "The stream's name on the server, `{}`: for a client's own JetStream calls \
         (`jetstream.get_stream(..)`, `nats stream info ..`).",
        name.value()
    );
    quote! {
        impl #ident {
            #[doc = #doc]
            #[allow(dead_code)]
            #vis const NAME: &str = #name;
        }
    }
}

/// After errors: the struct as a stream that checks nothing, so that consumers naming it do not
/// add "is not a stream" errors to the real ones (nothing when the `crate` path is itself
/// wrong), and its `NAME` when the name was read, so that uses of `Orders::NAME` add no "no
/// associated item" errors either. It is not registered; the build fails anyway.
pub(crate) fn stream_fallback(target: &ItemStruct, attrs: &StreamAttrs) -> TokenStream {
    let ident = &target.ident;
    let name_const = attrs.name.as_ref().map(|name| name_const(target, name));
    let Some(krate) = super::krate(&attrs.krate) else {
        return quote!(const _: () = { #name_const };);
    };
    quote! {
        const _: () = {
            use #krate::__private as __nats_topology;
            #name_const
            impl __nats_topology::StreamDef for #ident {
                const DECL: __nats_topology::StreamDecl =
                    __nats_topology::StreamDecl::new("", &[">"]);
                type Codec = __nats_topology::Json;
            }
        };
    }
}

/// `.setting(value)` calls, in `StreamDecl`'s field order.
fn builders(attrs: &StreamAttrs) -> [Option<TokenStream>; 18] {
    let number = |n: Option<Int>| n.map(|n| n.value);
    [
        attrs.replicas.map(|n| {
            let value = n.value as u8;
            quote_spanned!(n.span=> .replicas(#value))
        }),
        call("storage", attrs.storage.map(|v| variant("Storage", v))),
        call(
            "retention",
            attrs.retention.map(|v| variant("Retention", v)),
        ),
        call("max_age", attrs.max_age.as_ref().map(|d| duration(d.value))),
        call("max_msgs", number(attrs.max_msgs).map(|n| n as i64)),
        call("max_bytes", number(attrs.max_bytes).map(|n| n as i64)),
        call("max_msg_size", number(attrs.max_msg_size).map(|n| n as i32)),
        call("discard", attrs.discard.map(|v| variant("Discard", v))),
        call(
            "duplicate_window",
            attrs.duplicate_window.as_ref().map(|d| duration(d.value)),
        ),
        call("description", attrs.description.as_ref()),
        attrs.placement.as_ref().map(|p| {
            let cluster = match &p.cluster {
                Some(cluster) => quote!(::core::option::Option::Some(#cluster)),
                None => quote!(::core::option::Option::None),
            };
            let tags = p.tags.iter().flat_map(|t| &t.lits);
            quote!(.placement(__nats_topology::Placement { cluster: #cluster, tags: &[#(#tags),*] }))
        }),
        attrs.mirror.as_ref().map(|mirror| {
            let origin = origin(mirror);
            quote!(.mirror(#origin))
        }),
        attrs.sources.as_ref().map(|(sources, _)| {
            let origins = sources.iter().map(origin);
            quote!(.sources(const { &[#(#origins),*] }))
        }),
        attrs.subject_transform.as_ref().and_then(|t| {
            let (src, dest) = (t.src.as_ref()?, t.dest.as_ref()?);
            Some(quote!(.subject_transform(__nats_topology::SubjectTransform::new(#src, #dest))))
        }),
        attrs.allow_msg_ttl.then(|| quote!(.allow_msg_ttl())),
        attrs.allow_msg_schedules.then(|| quote!(.allow_msg_schedules())),
        attrs.external.then(|| quote!(.external())),
        // The declaring crate's version, stamped on the server (expanded in the user's crate).
        Some(quote!(.version(::core::env!("CARGO_PKG_VERSION")))),
    ]
}

/// An `Origin` value: `Origin::of(&<Path as StreamDef>::DECL)` (spanned at the path, so that
/// "is not a stream" points at it) or `Origin::named("..")`, with what is taken from it.
fn origin(attrs: &OriginAttrs) -> TokenStream {
    let mut tokens = match &attrs.stream {
        Some(PathOrString::Path(path)) => quote_spanned! {path.span()=>
            __nats_topology::Origin::of(&<#path as __nats_topology::StreamDef>::DECL)
        },
        Some(PathOrString::String(name)) => quote!(__nats_topology::Origin::named(#name)),
        // Reported; the build fails anyway.
        None => quote!(__nats_topology::Origin::named("")),
    };
    let options = [
        ("filter", &attrs.filter),
        ("transform", &attrs.transform),
        ("domain", &attrs.domain),
        ("api_prefix", &attrs.api_prefix),
    ];
    for (method, value) in options {
        if let Some(value) = value {
            let method = syn::Ident::new(method, proc_macro2::Span::call_site());
            tokens.extend(quote!(.#method(#value)));
        }
    }
    tokens
}
