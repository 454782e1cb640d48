//! The code of `#[queue_consumer]` and `#[broadcast]`: the consumer's declaration, the glue
//! that calls the handler, the registration, and the `const _` assertions against a stream
//! named by type.

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::LitStr;
use syn::spanned::Spanned;
use topology_core::codec::CodecId;
use topology_core::rules::FitError;

use super::{call, duration, escape_format, handler, krate, path_text, variant};
use crate::attrs::{BroadcastAttrs, ConsumerAttrs, PolicyName, PriorityAttrs, QueueAttrs};
use crate::item::Handler;
use crate::value::{Int, PathOrString};

/// The item and its registration as a queue consumer; `None` without a group (which parsing
/// reported).
pub(crate) fn queue(
    attrs: &QueueAttrs,
    item: &TokenStream,
    handler: &Handler,
) -> Option<TokenStream> {
    let group = attrs.group.as_ref()?;
    let number = |n: Option<Int>| n.map(|n| n.value as i64);
    let builders = [
        call("delivery", attrs.delivery.map(|v| variant("Delivery", v))),
        call("max_deliver", number(attrs.max_deliver)),
        call(
            "ack_wait",
            attrs.ack_wait.as_ref().map(|d| duration(d.value)),
        ),
        (attrs.backoff.as_ref()).map(|_| quote!(.backoff(__NATS_TOPOLOGY_BACKOFF))),
        call("max_ack_pending", number(attrs.max_ack_pending)),
        call("max_waiting", number(attrs.max_waiting)),
        call("dead_letter", attrs.dead_letter.as_ref()),
        call("migrate_from", attrs.migrate_from.as_ref()),
        call(
            "migrate_from_partitions",
            (attrs.migrate_from_partitions).map(|n| n.value as u16),
        ),
        call("description", attrs.description.as_ref()),
        call("ack", attrs.ack.map(|v| variant("AckMode", v))),
        attrs.priority.as_ref().and_then(priority),
        partitioned(attrs),
        attrs.batch.map(|size| {
            let size = size.value as u32;
            let wait = (attrs.batch_wait.as_ref()).map(|d| {
                let d = duration(d.value);
                quote!(.wait(#d))
            });
            quote!(.batch(__nats_topology::BatchDecl::new(#size) #wait))
        }),
    ];
    let support = attrs.backoff.as_ref().map(|backoff| {
        let durations = backoff.durations.iter().map(|d| duration(*d));
        quote! {
            const __NATS_TOPOLOGY_BACKOFF: &[__nats_topology::Duration] = &[#(#durations),*];
        }
    });
    let settings = Settings {
        constructor: quote!(queue),
        decl: quote!(__nats_topology::QueueDecl::new(#group) #(#builders)*),
        support: support.unwrap_or_default(),
        // Read back from the stream only when the consumer reads all of it.
        dead_letter: (attrs.dead_letter.as_ref())
            .filter(|_| attrs.common.filters.lits().is_empty()),
        broadcast: false,
    };
    consumer(&attrs.common, settings, item, handler)
}

/// `.partitioned(n, &[key..])` when both keys were read (and the key's tokens; reported
/// otherwise).
fn partitioned(attrs: &QueueAttrs) -> Option<TokenStream> {
    let partitions = attrs.partitions?.value as u16;
    let key = crate::value::partition_key(&attrs.key.as_ref()?.value()).ok()?;
    Some(quote!(.partitioned(#partitions, &[#(#key),*])))
}

/// `.pinned_client(..)` or `.overflow(..)`; `None` when the policy was not read (reported).
fn priority(attrs: &PriorityAttrs) -> Option<TokenStream> {
    match attrs.policy? {
        PolicyName::PinnedClient => {
            let ttl = duration(attrs.pinned_ttl.as_ref()?.value);
            Some(quote!(.pinned_client(#ttl)))
        }
        PolicyName::Overflow => {
            let number = |n: Option<Int>| n.map(|n| n.value as i64);
            let thresholds = [
                call("min_pending", number(attrs.min_pending)),
                call("min_ack_pending", number(attrs.min_ack_pending)),
            ];
            Some(quote!(.overflow(__nats_topology::Overflow::new() #(#thresholds)*)))
        }
    }
}

/// The item and its registration as a broadcast.
pub(crate) fn broadcast(
    attrs: &BroadcastAttrs,
    item: &TokenStream,
    handler: &Handler,
) -> Option<TokenStream> {
    let deliver = attrs.deliver.map(|deliver| {
        let v = variant("DeliverPolicy", deliver);
        quote!(.deliver(#v))
    });
    let ordered = attrs.ordered.as_ref().map(|_| quote!(.ordered()));
    let settings = Settings {
        constructor: quote!(broadcast),
        decl: quote!(__nats_topology::BroadcastDecl::new() #ordered #deliver),
        support: TokenStream::new(),
        dead_letter: None,
        broadcast: true,
    };
    consumer(&attrs.common, settings, item, handler)
}

/// What differs between the two kinds of consumer.
struct Settings<'a> {
    /// `ConsumerDecl::queue` or `ConsumerDecl::broadcast`.
    constructor: TokenStream,
    /// `QueueDecl::new(..).x(..)` or `BroadcastDecl::new().deliver(..)`.
    decl: TokenStream,
    /// Items the settings refer to (consts for backoff arrays).
    support: TokenStream,
    /// A dead-letter subject to check against the subjects of a stream named by type.
    dead_letter: Option<&'a LitStr>,
    /// Whether to check that a stream named by type can carry a broadcast.
    broadcast: bool,
}

fn consumer(
    attrs: &ConsumerAttrs,
    settings: Settings<'_>,
    item: &TokenStream,
    handler: &Handler,
) -> Option<TokenStream> {
    let attr = attrs.attr;
    let krate = krate(&attrs.krate)?;
    let stream = attrs.stream.as_ref()?;
    let fn_name = &handler.name();
    // The codec the payload is decoded with: the handler's own, else its stream's (a
    // `#[stream]` type's `StreamDef::Codec`), else JSON.
    let codec_ty = match (&attrs.codec, stream) {
        _ if handler.raw => None,
        (Some(codec), _) if codec.id == CodecId::Json => None,
        (Some(codec), _) => Some(handler::codec_type(codec)),
        (None, PathOrString::Path(path)) => {
            Some(quote_spanned!(path.span()=> <#path as __nats_topology::StreamDef>::Codec))
        }
        (None, PathOrString::String(_)) => None,
    };
    let (glue, registration) = match handler.batch_of {
        None => {
            let finish = quote_spanned!(handler.output_span=> __nats_topology::into_result);
            let decode = codec_ty.as_ref().map(|codec_ty| {
                let ty = &handler.payload;
                move |input: &syn::Ident| {
                    quote_spanned!(ty.span()=> __nats_topology::decode_with::<#codec_ty, #ty>(&#input))
                }
            });
            let glue = match &decode {
                Some(decode) => {
                    handler::glue_decoding(&handler::CONSUMER, handler, finish, Some(decode))
                }
                None => handler::glue_decoding(&handler::CONSUMER, handler, finish, None),
            };
            (glue, quote!(ConsumerRegistration))
        }
        Some(_) => (
            handler::batch_glue(handler, codec_ty.as_ref()),
            quote!(BatchConsumerRegistration),
        ),
    };
    let entry = match handler.batch_of {
        None => quote!(__nats_topology_handler),
        Some(_) => quote!(__nats_topology_batch),
    };
    let states = handler::states(&handler::CONSUMER, handler);
    let (handle_type, handle_impl) = match settings.broadcast {
        true => relay_handle(handler),
        false => Default::default(),
    };
    let Settings {
        constructor,
        decl,
        support,
        ..
    } = &settings;
    let subjects = attrs.filters.lits();
    let concurrency = attrs.concurrency.map(|n| {
        let n = n.value as u32;
        quote!(.concurrency(#n))
    });
    let publishes = attrs.publishes.as_ref().map(|list| {
        let lits = &list.lits;
        quote!(.publishes(&[#(#lits),*]))
    });
    // The builder calls both kinds of consumer share: the concurrency and the outputs, if
    // given, and the declaring crate's version, stamped on the server (expanded in the user's
    // crate).
    let codec = match (&attrs.codec, stream) {
        (None, PathOrString::Path(path)) if !handler.raw => quote_spanned!(path.span()=>
            .codec(<<#path as __nats_topology::StreamDef>::Codec as __nats_topology::Codec>::ID)
        ),
        _ => handler::codec_call(attrs.codec.as_ref(), handler.raw),
    };
    let common_builders =
        quote!(#concurrency #publishes #codec .version(::core::env!("CARGO_PKG_VERSION")));

    let mut checks = TokenStream::new();
    let (stream_item, stream_ref) = match stream {
        PathOrString::String(name) => (
            TokenStream::new(),
            quote!(__nats_topology::StreamRef::Named(#name)),
        ),
        PathOrString::Path(path) => {
            let span = path.span();
            let stream_text = path_text(path);
            let stream_item = quote_spanned! {span=>
                const __NATS_TOPOLOGY_STREAM: &__nats_topology::StreamDecl =
                    &<#path as __nats_topology::StreamDef>::DECL;
            };
            for lit in subjects {
                let message = format!(
                    "`#[{attr}]` filter {:?} is not covered by the subjects of stream `{stream_text}` (for a mirror or a stream with sources: by the subjects of the streams it takes from, within their `filter`), so it would never receive a message; add a subject that covers it to the stream's `subjects` (for a mirror or sources: to the origin's, or widen their `filter`), or change the filter",
                    lit.value()
                );
                checks.extend(assertion(
                    lit.span(),
                    quote!(__nats_topology::delivers(#lit, __NATS_TOPOLOGY_STREAM, &[])),
                    &message,
                ));
            }
            if settings.broadcast {
                let message = format!(
                    "`#[broadcast]` on stream `{stream_text}`, whose retention is `workqueue`: {}",
                    FitError::BroadcastOnWorkQueue.message()
                );
                checks.extend(assertion(
                    span,
                    quote!(__nats_topology::allows_broadcast(
                        __NATS_TOPOLOGY_STREAM.retention
                    )),
                    &message,
                ));
            }
            if let Some(lit) = settings.dead_letter {
                let message = format!(
                    "`#[{attr}]` key `dead_letter`: {:?} is covered by the subjects of stream `{stream_text}`, and this consumer reads the whole stream, so its dead letters would be delivered to it again, forever; publish dead letters to a subject outside the stream, or give the consumer `subjects` that do not match it",
                    lit.value(),
                );
                checks.extend(assertion(
                    lit.span(),
                    quote!(!__nats_topology::dead_letter_loops(#lit, &[], __NATS_TOPOLOGY_STREAM.subjects)),
                    &message,
                ));
            }
            (
                stream_item,
                quote!(__nats_topology::StreamRef::Declared(__NATS_TOPOLOGY_STREAM)),
            )
        }
    };

    let schema = payload_schema(handler, fn_name);
    let layer = handler::layer(
        attrs.layer.as_ref(),
        match handler.batch_of {
            None => "IntoHandlerLayer",
            Some(_) => "IntoBatchLayer",
        },
        fn_name,
    );
    Some(quote! {
        #item
        #handle_type
        const _: () = {
            use #krate::__private as __nats_topology;
            #stream_item
            #support
            #handle_impl
            static __NATS_TOPOLOGY_DECL: __nats_topology::ConsumerDecl =
                __nats_topology::ConsumerDecl::#constructor(
                    ::core::concat!(::core::module_path!(), "::", #fn_name),
                    #stream_ref,
                    #decl,
                )
                .subjects(&[#(#subjects),*])
                #common_builders;
            #glue
            __nats_topology::inventory::submit! {
                __nats_topology::#registration {
                    decl: &__NATS_TOPOLOGY_DECL,
                    handler: #entry,
                    states: #states,
                }
            }
            #schema
            #layer
            #checks
        };
    })
}

/// The typed handle on a broadcast's relay: a type named like the handler (types and
/// functions live in different namespaces), with `relay(&runtime)`, so that a misspelt relay is
/// a compile error. Returns the type, for beside the function, and its `impl`, for inside the
/// `const _` block (where `__nats_topology` is in scope).
fn relay_handle(handler: &Handler) -> (TokenStream, TokenStream) {
    let ident = &handler.ident;
    let vis = &handler.vis;
    let doc = format!(
        "The typed handle on the relay of the `#[broadcast]` handler [`{ident}`](fn@{ident}): \
         `{ident}::relay(&runtime)` gives its `Relay`, whose `ensure()` a service calls when a \
         local session subscribes."
    );
    let handle_type = quote! {
        #[doc = #doc]
        #[allow(non_camel_case_types, dead_code)]
        #vis struct #ident {
            _private: (),
        }
    };
    let handle_impl = quote! {
        impl #ident {
            /// The relay of this handler in `runtime`: cheap, valid while the runtime runs.
            ///
            /// # Panics
            ///
            /// If `runtime` was built from a hand-built topology without this handler.
            #[allow(dead_code)]
            #[track_caller]
            pub fn relay(runtime: &__nats_topology::Runtime) -> __nats_topology::Relay {
                runtime.__relay_of(__NATS_TOPOLOGY_DECL.handler)
            }
        }
    };
    (handle_type, handle_impl)
}

/// Registers the payload type's JSON Schema (when it has one) for the AsyncAPI export.
fn payload_schema(handler: &Handler, fn_name: &str) -> TokenStream {
    if handler.raw {
        return TokenStream::new();
    }
    handler::schema(
        (
            handler.batch_of.as_ref().unwrap_or(&handler.payload),
            Span::call_site(),
        ),
        "PayloadSchemaRegistration",
        "__nats_topology_schema",
        fn_name,
    )
}

/// `const _: () = assert!(condition, "message");`, reported at `span` when it fails.
fn assertion(span: Span, condition: TokenStream, message: &str) -> TokenStream {
    let message = LitStr::new(&escape_format(message), span);
    quote_spanned! {span=>
        const _: () = ::core::assert!(#condition, #message);
    }
}
