//! The code of `#[kv_watch]`: the watch's declaration, the glue that hands the handler the
//! change as a `KvEntry` of the bucket's value type, and the registration.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use topology_core::watch::WatchFrom;

use super::{handler, krate};
use crate::attrs::WatchAttrs;
use crate::item::Handler;

/// The item and its registration as a watch; `None` without a bucket type (reported).
pub(crate) fn watch(
    attrs: &WatchAttrs,
    item: &TokenStream,
    handler: &Handler,
) -> Option<TokenStream> {
    let krate = krate(&attrs.krate)?;
    let bucket = attrs.bucket.as_ref()?;
    let fn_name = handler.name();
    let keys = match &attrs.keys {
        Some(lit) => quote!(#lit),
        None => quote!(">"),
    };
    let from = (attrs.from == Some(WatchFrom::Now))
        .then(|| quote!(.from(__nats_topology::WatchFrom::Now)));
    // A type that is not a `#[kv_bucket]` (an object store, a stream) is reported at its token.
    let decl_of_bucket = quote_spanned! {bucket.span()=>
        &<#bucket as __nats_topology::KvBucketDef>::DECL
    };
    let payload_span = handler.payload.span();
    let payload_ty = &handler.payload;
    let decode = |input: &syn::Ident| quote_spanned!(payload_span=> __nats_topology::decode_kv_watch_arg::<#bucket, #payload_ty>(&#input));
    let glue = handler::glue_decoding(
        &handler::CONSUMER,
        handler,
        quote_spanned!(handler.output_span=> __nats_topology::into_result),
        Some(&decode),
    );
    let states = handler::states(&handler::CONSUMER, handler);
    // The typed handle on the watch's relay, as `#[broadcast]` gives one: a type named like
    // the handler (types and functions live in different namespaces).
    let (ident, vis) = (&handler.ident, &handler.vis);
    let doc = format!(
        "The typed handle on the watch of the `#[kv_watch]` handler [`{ident}`](fn@{ident}): \
         `{ident}::relay(&runtime)` gives the `Relay` it runs as (its consumer's name, whether \
         it runs)."
    );
    Some(quote! {
        #item
        #[doc = #doc]
        #[allow(non_camel_case_types, dead_code)]
        #vis struct #ident {
            _private: (),
        }
        const _: () = {
            use #krate::__private as __nats_topology;
            static __NATS_TOPOLOGY_WATCH: __nats_topology::WatchDecl =
                __nats_topology::WatchDecl::new(
                    ::core::concat!(::core::module_path!(), "::", #fn_name),
                    #decl_of_bucket,
                    #keys,
                )
                #from
                .version(::core::env!("CARGO_PKG_VERSION"));
            #glue
            impl #ident {
                /// The relay this watch runs as in `runtime`: cheap, valid while the runtime
                /// runs.
                ///
                /// # Panics
                ///
                /// If `runtime` was built from a hand-built topology without this watch.
                #[allow(dead_code)]
                #[track_caller]
                pub fn relay(runtime: &__nats_topology::Runtime) -> __nats_topology::Relay {
                    runtime.__relay_of(__NATS_TOPOLOGY_WATCH.handler)
                }
            }
            __nats_topology::inventory::submit! {
                __nats_topology::WatchRegistration {
                    decl: &__NATS_TOPOLOGY_WATCH,
                    handler: __nats_topology_handler,
                    states: #states,
                }
            }
        };
    })
}
