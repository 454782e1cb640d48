//! The code of `#[stream]`: `StreamDef` for the struct, and its registration.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::Ident;

use super::{call, duration, krate, variant};
use crate::attrs::StreamAttrs;
use crate::value::{Int, Krate};

/// The struct's `StreamDef` impl and registration; `None` without a name, subjects or a
/// `crate` path (which validation reported).
pub(crate) fn stream(ident: &Ident, attrs: &StreamAttrs) -> Option<TokenStream> {
    let (name, subjects) = (attrs.name.as_ref()?, &attrs.subjects.as_ref()?.lits);
    let krate = krate(&attrs.krate)?;
    let builders = builders(attrs);
    Some(quote! {
        const _: () = {
            use #krate::__private as __nats_topology;
            impl __nats_topology::StreamDef for #ident {
                const DECL: __nats_topology::StreamDecl =
                    __nats_topology::StreamDecl::new(#name, &[#(#subjects),*]) #(#builders)*;
            }
            static __NATS_TOPOLOGY_STREAM: __nats_topology::StreamDecl =
                <#ident as __nats_topology::StreamDef>::DECL;
            __nats_topology::inventory::submit! {
                __nats_topology::StreamRegistration { decl: &__NATS_TOPOLOGY_STREAM }
            }
        };
    })
}

/// After errors: the struct as a stream that checks nothing, so that consumers naming it do not
/// add "is not a stream" errors to the real ones. It is not registered; the build fails anyway.
/// Nothing when the `crate` path is itself wrong.
pub(crate) fn stream_fallback(ident: &Ident, krate: &Krate) -> Option<TokenStream> {
    let krate = super::krate(krate)?;
    Some(quote! {
        const _: () = {
            use #krate::__private as __nats_topology;
            impl __nats_topology::StreamDef for #ident {
                const DECL: __nats_topology::StreamDecl =
                    __nats_topology::StreamDecl::new("", &[">"]);
            }
        };
    })
}

/// `.setting(value)` calls, in `StreamDecl`'s field order.
fn builders(attrs: &StreamAttrs) -> [Option<TokenStream>; 13] {
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
        attrs.external.then(|| quote!(.external())),
        // The declaring crate's version, stamped on the server (expanded in the user's crate).
        Some(quote!(.version(::core::env!("CARGO_PKG_VERSION")))),
    ]
}
