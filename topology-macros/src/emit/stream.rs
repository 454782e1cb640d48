//! The code of `#[stream]`: `StreamDef` for the struct, and its registration.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::Ident;

use super::{duration, variant};
use crate::attrs::StreamAttrs;

/// The struct's `StreamDef` impl and registration; `None` without a name or subjects (which
/// validation reported).
pub(crate) fn stream(
    ident: &Ident,
    attrs: &StreamAttrs,
    krate: &TokenStream,
) -> Option<TokenStream> {
    let name = attrs.name.as_ref()?;
    let subjects = &attrs.subjects.as_ref()?.lits;
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
pub(crate) fn stream_fallback(ident: &Ident, krate: &TokenStream) -> TokenStream {
    quote! {
        const _: () = {
            use #krate::__private as __nats_topology;
            impl __nats_topology::StreamDef for #ident {
                const DECL: __nats_topology::StreamDecl =
                    __nats_topology::StreamDecl::new("", &[">"]);
            }
        };
    }
}

/// `.setting(value)` calls, in `StreamDecl`'s field order.
fn builders(attrs: &StreamAttrs) -> Vec<TokenStream> {
    let mut builders = Vec::new();
    if let Some(replicas) = attrs.replicas {
        let n = replicas.value as u8;
        builders.push(quote_spanned!(replicas.span=> .replicas(#n)));
    }
    if let Some(storage) = attrs.storage {
        let v = variant("Storage", storage);
        builders.push(quote!(.storage(#v)));
    }
    if let Some(retention) = attrs.retention {
        let v = variant("Retention", retention);
        builders.push(quote!(.retention(#v)));
    }
    if let Some(max_age) = &attrs.max_age {
        let d = duration(max_age.value);
        builders.push(quote!(.max_age(#d)));
    }
    if let Some(max_msgs) = attrs.max_msgs {
        let n = max_msgs.value as i64;
        builders.push(quote!(.max_msgs(#n)));
    }
    if let Some(max_bytes) = attrs.max_bytes {
        let n = max_bytes.value as i64;
        builders.push(quote!(.max_bytes(#n)));
    }
    if let Some(max_msg_size) = attrs.max_msg_size {
        let n = max_msg_size.value as i32;
        builders.push(quote!(.max_msg_size(#n)));
    }
    if let Some(discard) = attrs.discard {
        let v = variant("Discard", discard);
        builders.push(quote!(.discard(#v)));
    }
    if let Some(window) = &attrs.duplicate_window {
        let d = duration(window.value);
        builders.push(quote!(.duplicate_window(#d)));
    }
    if let Some(description) = &attrs.description {
        builders.push(quote!(.description(#description)));
    }
    if attrs.external {
        builders.push(quote!(.external()));
    }
    builders
}
