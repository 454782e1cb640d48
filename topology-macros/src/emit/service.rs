//! The code of `#[service]` (`ServiceDef` for the struct, and its registration), `#[endpoint]`
//! and `#[subscription]` (the declaration, the glue that calls the handler, the registration,
//! and the schemas of the request and the reply).

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Ident, LitStr};

use super::{call, duration, handler, krate};
use crate::attrs::{EndpointAttrs, ServiceAttrs, SubscriptionAttrs};
use crate::item::{self, Handler};
use crate::value::{Int, Krate, Pairs};

/// The struct's `ServiceDef` impl and registration; `None` without a name or a `crate` path
/// (which validation reported).
pub(crate) fn service(ident: &Ident, attrs: &ServiceAttrs) -> Option<TokenStream> {
    let name = attrs.name.as_ref()?;
    let krate = krate(&attrs.krate)?;
    // Without a version, the declaring crate's (semver, as cargo requires), expanded in the
    // user's crate.
    let version = match &attrs.version {
        Some(version) => quote!(#version),
        None => quote!(::core::env!("CARGO_PKG_VERSION")),
    };
    let builders = [
        call("description", attrs.description.as_ref()),
        call("queue_group", attrs.queue_group.as_ref()),
        call("metadata", attrs.metadata.as_ref().map(metadata)),
    ];
    Some(quote! {
        const _: () = {
            use #krate::__private as __nats_topology;
            impl __nats_topology::ServiceDef for #ident {
                const DECL: __nats_topology::ServiceDecl =
                    __nats_topology::ServiceDecl::new(#name, #version) #(#builders)*;
            }
            static __NATS_TOPOLOGY_SERVICE: __nats_topology::ServiceDecl =
                <#ident as __nats_topology::ServiceDef>::DECL;
            __nats_topology::inventory::submit! {
                __nats_topology::ServiceRegistration { decl: &__NATS_TOPOLOGY_SERVICE }
            }
        };
    })
}

/// After errors: the struct as a service, unregistered, so that endpoints naming it do not add
/// "is not a service" errors to the real ones. Nothing when the `crate` path is itself wrong.
pub(crate) fn service_fallback(ident: &Ident, krate: &Krate) -> Option<TokenStream> {
    let krate = super::krate(krate)?;
    Some(quote! {
        const _: () = {
            use #krate::__private as __nats_topology;
            impl __nats_topology::ServiceDef for #ident {
                const DECL: __nats_topology::ServiceDecl =
                    __nats_topology::ServiceDecl::new("", "0.0.0");
            }
        };
    })
}

/// The item and its registration as an endpoint; `None` without a service, a subject or a
/// `crate` path (which parsing reported).
pub(crate) fn endpoint(
    attrs: &EndpointAttrs,
    item: &TokenStream,
    handler: &Handler,
) -> Option<TokenStream> {
    let krate = krate(&attrs.krate)?;
    let (service, subject) = (attrs.service.as_ref()?, attrs.subject.as_ref()?);
    let fn_name = &handler.name();
    let name = match &attrs.name {
        Some(name) => name.clone(),
        None => LitStr::new(fn_name, handler.ident.span()),
    };
    let builders = [
        call("group", attrs.group.as_ref()),
        call("concurrency", concurrency(attrs.concurrency)),
        call("timeout", attrs.timeout.as_ref().map(|d| duration(d.value))),
        call("metadata", attrs.metadata.as_ref().map(metadata)),
    ];
    // The reply type: read from `Result<T, E>` as written, else (an alias) through the trait
    // that the type checker resolves.
    let output = handler.output.as_ref()?;
    let (reply, raw_reply) = match item::result_ok_type(output) {
        Some(ty) => (quote!(#ty), item::is_raw(ty)),
        None => (
            quote_spanned!(output.span()=> <#output as __nats_topology::EndpointReturn>::Reply),
            false,
        ),
    };
    let finish = if raw_reply { "reply_raw" } else { "reply_json" };
    let glue = handler::glue(
        &handler::ENDPOINT,
        handler,
        finish,
        attrs.codec.as_ref(),
        Some(&reply),
    );
    let codec = handler::codec_call(attrs.codec.as_ref(), handler.raw && raw_reply);
    let states = handler::states(&handler::ENDPOINT, handler);
    let request_schema = (!handler.raw).then(|| {
        handler::schema(
            (&handler.payload, Span::call_site()),
            "PayloadSchemaRegistration",
            "__nats_topology_request_schema",
            fn_name,
        )
    });
    let reply_schema = (!raw_reply).then(|| {
        handler::schema(
            (&reply, output.span()),
            "ReplySchemaRegistration",
            "__nats_topology_reply_schema",
            fn_name,
        )
    });
    let layer = handler::layer(attrs.layer.as_ref(), "IntoEndpointLayer", fn_name);
    let service_item = quote_spanned! {service.span()=>
        const __NATS_TOPOLOGY_SERVICE: &__nats_topology::ServiceDecl =
            &<#service as __nats_topology::ServiceDef>::DECL;
    };
    Some(quote! {
        #item
        const _: () = {
            use #krate::__private as __nats_topology;
            #service_item
            static __NATS_TOPOLOGY_ENDPOINT: __nats_topology::EndpointDecl =
                __nats_topology::EndpointDecl::new(
                    ::core::concat!(::core::module_path!(), "::", #fn_name),
                    __NATS_TOPOLOGY_SERVICE,
                    #name,
                    #subject,
                )
                #(#builders)* #codec;
            #glue
            __nats_topology::inventory::submit! {
                __nats_topology::EndpointRegistration {
                    decl: &__NATS_TOPOLOGY_ENDPOINT,
                    handler: __nats_topology_endpoint,
                    states: #states,
                }
            }
            #request_schema
            #reply_schema
            #layer
        };
    })
}

/// The item and its registration as a core subscription; `None` without a subject, a fanout
/// or a `crate` path (which parsing reported).
pub(crate) fn subscription(
    attrs: &SubscriptionAttrs,
    item: &TokenStream,
    handler: &Handler,
) -> Option<TokenStream> {
    let krate = krate(&attrs.krate)?;
    let subject = attrs.subject.as_ref()?;
    let fn_name = &handler.name();
    let path = quote!(::core::concat!(::core::module_path!(), "::", #fn_name));
    let decl = match (&attrs.group, &attrs.each_instance) {
        (Some(group), None) => {
            quote!(__nats_topology::SubscriptionDecl::group(#path, #subject, #group))
        }
        (None, Some(_)) => {
            quote!(__nats_topology::SubscriptionDecl::each_instance(#path, #subject))
        }
        _ => return None,
    };
    let concurrency = call("concurrency", concurrency(attrs.concurrency));
    let glue = handler::glue(
        &handler::SUBSCRIPTION,
        handler,
        "into_result",
        attrs.codec.as_ref(),
        None,
    );
    let codec = handler::codec_call(attrs.codec.as_ref(), handler.raw);
    let states = handler::states(&handler::SUBSCRIPTION, handler);
    let schema = (!handler.raw).then(|| {
        handler::schema(
            (&handler.payload, Span::call_site()),
            "PayloadSchemaRegistration",
            "__nats_topology_schema",
            fn_name,
        )
    });
    Some(quote! {
        #item
        const _: () = {
            use #krate::__private as __nats_topology;
            static __NATS_TOPOLOGY_SUBSCRIPTION: __nats_topology::SubscriptionDecl =
                #decl #concurrency #codec;
            #glue
            __nats_topology::inventory::submit! {
                __nats_topology::SubscriptionRegistration {
                    decl: &__NATS_TOPOLOGY_SUBSCRIPTION,
                    handler: __nats_topology_subscription,
                    states: #states,
                }
            }
            #schema
        };
    })
}

fn concurrency(n: Option<Int>) -> Option<u32> {
    n.map(|n| n.value as u32)
}

/// `&[("key", "value"), ..]`.
fn metadata(pairs: &Pairs) -> TokenStream {
    let pairs = pairs.pairs.iter().map(|(k, v)| quote!((#k, #v)));
    quote!(&[#(#pairs),*])
}
