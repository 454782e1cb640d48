//! The code of `#[kv_bucket]` and `#[object_store]`: the definition trait's impl, the
//! registration, and the typed handle as an associated function of the struct.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::ItemStruct;
use syn::spanned::Spanned;
use topology_core::bucket::BucketKind;

use super::{call, duration, krate, variant};
use crate::attrs::BucketAttrs;
use crate::value::Int;

/// The struct's impls and registration; `None` without a name or a `crate` path (which
/// validation reported).
pub(crate) fn bucket(target: &ItemStruct, attrs: &BucketAttrs) -> Option<TokenStream> {
    let name = attrs.name.as_ref()?;
    let krate = krate(&attrs.krate)?;
    let (ident, vis) = (&target.ident, &target.vis);
    let builders = builders(attrs);
    let (def, new, handle, value) = match attrs.kind {
        BucketKind::KeyValue => {
            let handle = match &attrs.value {
                Some(ty) => {
                    // A value type that is not serde's (or that the codec cannot write) is
                    // reported at the type.
                    let encoded = quote_spanned!(ty.span()=> __nats_topology::Kv::<#ty>::encoded);
                    let codec = value_codec(attrs, ty);
                    let doc = format!(
                        " The typed handle on this key-value bucket, whose values are {}.",
                        attrs.codec.map_or("JSON", |c| c.id.name())
                    );
                    quote! {
                        #[doc = #doc]
                        #[allow(dead_code)]
                        #vis fn kv(
                            source: impl __nats_topology::JetStreamSource,
                        ) -> __nats_topology::Kv<#ty> {
                            #encoded(source, <Self as __nats_topology::KvBucketDef>::DECL, #codec)
                        }
                    }
                }
                None => quote! {
                    /// The handle on this key-value bucket, whose values are raw bytes.
                    #[allow(dead_code)]
                    #vis fn kv(
                        source: impl __nats_topology::JetStreamSource,
                    ) -> __nats_topology::Kv<__nats_topology::Bytes> {
                        __nats_topology::Kv::raw(
                            source,
                            <Self as __nats_topology::KvBucketDef>::DECL,
                        )
                    }
                },
            };
            // How its watches decode its values (`#[kv_watch]`).
            let (value_ty, codec) = match &attrs.value {
                Some(ty) => (quote!(#ty), value_codec(attrs, ty)),
                None => (
                    quote!(__nats_topology::Bytes),
                    quote!(__nats_topology::RawValue),
                ),
            };
            let value = quote! {
                impl __nats_topology::KvBucketValue for #ident {
                    type Value = #value_ty;
                    type Codec = #codec;
                }
            };
            (quote!(KvBucketDef), quote!(kv), handle, value)
        }
        BucketKind::Object => {
            let handle = quote! {
                /// The handle on this object store.
                #[allow(dead_code)]
                #vis fn store(
                    source: impl __nats_topology::JetStreamSource,
                ) -> __nats_topology::ObjectStore {
                    __nats_topology::ObjectStore::new(
                        source,
                        <Self as __nats_topology::ObjectStoreDef>::DECL,
                    )
                }
            };
            (
                quote!(ObjectStoreDef),
                quote!(object),
                handle,
                TokenStream::new(),
            )
        }
    };
    Some(quote! {
        const _: () = {
            use #krate::__private as __nats_topology;
            impl __nats_topology::#def for #ident {
                const DECL: __nats_topology::BucketDecl =
                    __nats_topology::BucketDecl::#new(#name) #(#builders)*;
            }
            impl #ident {
                #handle
            }
            #value
            static __NATS_TOPOLOGY_BUCKET: __nats_topology::BucketDecl =
                <#ident as __nats_topology::#def>::DECL;
            __nats_topology::inventory::submit! {
                __nats_topology::BucketRegistration { decl: &__NATS_TOPOLOGY_BUCKET }
            }
        };
    })
}

/// `.setting(value)` calls, in `BucketDecl`'s field order.
fn builders(attrs: &BucketAttrs) -> [Option<TokenStream>; 9] {
    let number = |n: Option<Int>| n.map(|n| n.value);
    [
        attrs.history.map(|n| {
            let value = n.value as u8;
            quote_spanned!(n.span=> .history(#value))
        }),
        call("ttl", attrs.ttl.as_ref().map(|d| duration(d.value))),
        attrs.replicas.map(|n| {
            let value = n.value as u8;
            quote_spanned!(n.span=> .replicas(#value))
        }),
        call("storage", attrs.storage.map(|v| variant("Storage", v))),
        call(
            "max_value_size",
            number(attrs.max_value_size).map(|n| n as i32),
        ),
        call("max_bytes", number(attrs.max_bytes).map(|n| n as i64)),
        call("description", attrs.description.as_ref()),
        attrs.external.then(|| quote!(.external())),
        // The declaring crate's version, stamped on the server (expanded in the user's crate).
        Some(quote!(.version(::core::env!("CARGO_PKG_VERSION")))),
    ]
}

/// The codec of a key-value bucket's typed values (`value = ty`): the declared one, located at
/// its key, or JSON by default, located at the type (where a type JSON cannot write is
/// reported).
fn value_codec(attrs: &BucketAttrs, ty: &syn::Type) -> TokenStream {
    match &attrs.codec {
        Some(codec) => super::handler::codec_type(codec),
        None => quote_spanned!(ty.span()=> __nats_topology::Json),
    }
}
