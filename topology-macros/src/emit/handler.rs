//! The glue that the runtime calls, `fn(input) -> future`, calling the user's function: for a
//! consumer `fn(Incoming) -> HandlerFuture`, for an endpoint `fn(Request) -> ReplyFuture`, for a
//! core subscription `fn(Request) -> HandlerFuture`.
//!
//! Its pieces carry the spans of the user's tokens, so that what only the type checker can see
//! is reported where the user wrote it: the payload type that is not `DeserializeOwned`, the
//! second argument that is not the context, the return type whose parts do not convert, and a
//! future that is not `Send` (at the function's name).

use proc_macro2::{Span, TokenStream};
use quote::{ToTokens, quote, quote_spanned};
use syn::Ident;
use syn::spanned::Spanned;

use topology_core::codec::CodecId;

use crate::attrs::CodecAttr;
use crate::item::{Arg, Handler};

/// The `__private` items one kind of glue calls, by name.
pub(crate) struct Glue {
    /// The generated function's name.
    pub name: &'static str,
    /// What it takes and returns: `Incoming`, `HandlerFuture`.
    pub input: &'static str,
    pub future: &'static str,
    /// Decoding the payload from the input: JSON, raw, and with a named codec.
    pub decode_json: &'static str,
    pub decode_raw: &'static str,
    pub decode_with: &'static str,
    /// The context argument, and a `State<T>` argument, from the input.
    pub context: &'static str,
    pub state: &'static str,
    /// The trait of `State<T>` arguments, whose `KEY` the registration lists.
    pub state_arg: &'static str,
    /// Requires the future to be `Send`.
    pub send: &'static str,
}

pub(crate) const CONSUMER: Glue = Glue {
    name: "__nats_topology_handler",
    input: "Incoming",
    future: "HandlerFuture",
    decode_json: "decode_json",
    decode_raw: "decode_raw",
    decode_with: "decode_with",
    context: "context",
    state: "state",
    state_arg: "StateArg",
    send: "assert_send",
};

pub(crate) const ENDPOINT: Glue = Glue {
    name: "__nats_topology_endpoint",
    input: "Request",
    future: "ReplyFuture",
    decode_json: "decode_request_json",
    decode_raw: "decode_request_raw",
    decode_with: "decode_request_with",
    context: "request_context",
    state: "request_state",
    state_arg: "RequestStateArg",
    send: "assert_send_reply",
};

pub(crate) const SUBSCRIPTION: Glue = Glue {
    name: "__nats_topology_subscription",
    input: "Request",
    future: "HandlerFuture",
    decode_json: "decode_message_json",
    decode_raw: "decode_message_raw",
    decode_with: "decode_message_with",
    context: "request_context",
    state: "message_state",
    state_arg: "RequestStateArg",
    send: "assert_send_reply",
};

fn ident(name: &str, span: Span) -> Ident {
    Ident::new(name, span)
}

/// The `StateKey`s of the handler's `State<T>` arguments, for the registration.
pub(crate) fn states(glue: &Glue, handler: &Handler) -> TokenStream {
    let keys = handler.states().map(|ty| {
        let state_arg = ident(glue.state_arg, ty.span());
        quote_spanned!(ty.span()=> <#ty as __nats_topology::#state_arg>::KEY)
    });
    quote!(&[#(#keys),*])
}

/// The glue function, calling the user's function and passing its result to
/// `__nats_topology::#finish` (`into_result` for a consumer or a subscription, `reply_json` or
/// `reply_raw` for an endpoint; `reply_json` becomes `reply_with` the declared codec).
pub(crate) fn glue(
    glue: &Glue,
    handler: &Handler,
    finish: &str,
    codec: Option<&CodecAttr>,
    reply: Option<&TokenStream>,
) -> TokenStream {
    let codec = codec.filter(|c| c.id != CodecId::Json);
    let decode = codec.filter(|_| !handler.raw).map(|codec| {
        let ty = &handler.payload;
        let decode_with = ident(glue.decode_with, ty.span());
        let codec_ty = codec_type(codec);
        move |input: &Ident| {
            quote_spanned!(ty.span()=> __nats_topology::#decode_with::<#codec_ty, #ty>(&#input))
        }
    });
    let finish = match codec {
        Some(codec) if finish == "reply_json" => {
            let codec_ty = codec_type(codec);
            let span = handler.output_span;
            let reply = reply.cloned().unwrap_or_else(|| quote!(_));
            quote_spanned!(span=> __nats_topology::reply_with::<#codec_ty, #reply, _>)
        }
        _ => {
            let finish = ident(finish, handler.output_span);
            quote_spanned!(handler.output_span=> __nats_topology::#finish)
        }
    };
    match &decode {
        Some(decode) => glue_decoding(glue, handler, finish, Some(decode)),
        None => glue_decoding(glue, handler, finish, None),
    }
}

/// The type of a named codec (`__nats_topology::MsgPack`), located at the `codec` key: a codec
/// that cannot read the payload (or whose feature is off) is reported there.
pub(crate) fn codec_type(codec: &CodecAttr) -> TokenStream {
    let name = match codec.id {
        CodecId::Json | CodecId::Raw => "Json",
        CodecId::MsgPack => "MsgPack",
        CodecId::Cbor => "Cbor",
        CodecId::Protobuf => "Protobuf",
    };
    let name = ident(name, codec.span);
    quote_spanned!(codec.span=> __nats_topology::#name)
}

/// The declaration's `.codec(..)` call: the named codec, raw bytes for a raw payload, nothing
/// for JSON (the default).
pub(crate) fn codec_call(codec: Option<&CodecAttr>, raw: bool) -> TokenStream {
    let id = match (codec, raw) {
        (_, true) => "Raw",
        (Some(codec), false) => match codec.id {
            CodecId::Json => return TokenStream::new(),
            CodecId::MsgPack => "MsgPack",
            CodecId::Cbor => "Cbor",
            CodecId::Protobuf => "Protobuf",
            CodecId::Raw => "Raw",
        },
        (None, false) => return TokenStream::new(),
    };
    let id = ident(id, Span::call_site());
    quote!(.codec(__nats_topology::CodecId::#id))
}

/// [`glue`], with the payload read by `decode` (given the input's name, an expression giving
/// a `Result` of the payload type), rather than by the glue's JSON or raw decoding.
pub(crate) fn glue_decoding(
    glue: &Glue,
    handler: &Handler,
    finish: TokenStream,
    decode: Option<&dyn Fn(&Ident) -> TokenStream>,
) -> TokenStream {
    // Local names with mixed-site hygiene: they cannot capture or shadow the user's names.
    let input = Ident::new("input", Span::mixed_site());
    let payload = Ident::new("payload", Span::mixed_site());
    let context = Ident::new("cx", Span::mixed_site());
    let error = Ident::new("error", Span::mixed_site());

    let ty = &handler.payload;
    let ty_span = ty.span();
    let decode = decode.map(|decode| decode(&input)).unwrap_or_else(|| {
        let decode = ident(
            if handler.raw {
                glue.decode_raw
            } else {
                glue.decode_json
            },
            ty_span,
        );
        quote_spanned!(ty_span=> __nats_topology::#decode::<#ty>(&#input))
    });
    let decode = quote_spanned! {ty_span=>
        let #payload: #ty = match #decode {
            ::core::result::Result::Ok(value) => value,
            ::core::result::Result::Err(#error) => return ::core::result::Result::Err(#error),
        };
    };
    let mut context_stmt = TokenStream::new();
    let mut args = vec![quote!(#payload)];
    for (i, arg) in handler.rest.iter().enumerate() {
        match arg {
            Arg::Context(cx_ty) => {
                let f = ident(glue.context, cx_ty.span());
                context_stmt.extend(quote_spanned!(cx_ty.span()=>
                    let #context: #cx_ty = __nats_topology::#f::<#cx_ty>(&#input);
                ));
                args.push(quote!(#context));
            }
            Arg::State(state_ty) => {
                let value = Ident::new(&format!("state_{i}"), Span::mixed_site());
                let f = ident(glue.state, state_ty.span());
                context_stmt.extend(quote_spanned! {state_ty.span()=>
                    let #value: #state_ty = match __nats_topology::#f::<#state_ty>(&#input) {
                        ::core::result::Result::Ok(value) => value,
                        ::core::result::Result::Err(#error) => return ::core::result::Result::Err(#error),
                    };
                });
                args.push(quote!(#value));
            }
        }
    }
    let user_fn = &handler.ident;
    // The result lives in a local located at the return type, so that a wrong return type is
    // reported there alone. (Call-site hygiene like the tokens around it: mixing hygiene in one
    // expression makes rustc fall back to the attribute's span. It is bound after the call, so
    // it cannot capture anything of the user's.)
    let result = Ident::new("__nats_topology_result", handler.output_span);
    let call = quote_spanned! {handler.output_span=>
        let #result = #user_fn(#(#args),*).await;
        #finish(#result)
    };
    let name_span = handler.ident.span();
    let send = ident(glue.send, name_span);
    let future = quote_spanned! {name_span=>
        __nats_topology::#send(async move {
            #decode
            #context_stmt
            #call
        })
    };
    let (name, input_ty, future_ty) = (
        ident(glue.name, Span::call_site()),
        ident(glue.input, Span::call_site()),
        ident(glue.future, Span::call_site()),
    );
    quote! {
        fn #name(#input: __nats_topology::#input_ty) -> __nats_topology::#future_ty {
            __nats_topology::Box::pin(#future)
        }
    }
}

/// Registers `ty`'s JSON Schema (when it has one) for the export, as a `registration` (a
/// `PayloadSchemaRegistration` or `ReplySchemaRegistration`) of the handler `fn_name`, through
/// a function named `schema_fn`. The probe is located at `span`, so that a type the checker
/// refuses there is reported at the user's token, once.
pub(crate) fn schema(
    (ty, span): (&impl ToTokens, Span),
    registration: &str,
    schema_fn: &str,
    fn_name: &str,
) -> TokenStream {
    let registration = ident(registration, Span::call_site());
    let schema_fn = ident(schema_fn, Span::call_site());
    let name_fn = ident(&format!("{schema_fn}_protobuf_name"), Span::call_site());
    let probe = quote_spanned! {span=>
        (&&__nats_topology::SchemaProbe::<#ty>::new()).payload_schema()
    };
    let name_probe = quote_spanned! {span=>
        (&&__nats_topology::SchemaProbe::<#ty>::new()).protobuf_name()
    };
    quote! {
        fn #schema_fn() -> ::core::option::Option<__nats_topology::PayloadSchema> {
            #[allow(unused_imports)]
            use __nats_topology::{SchemaFallback as _, SchemaSpecialized as _};
            #probe
        }
        fn #name_fn() -> ::core::option::Option<::std::string::String> {
            #[allow(unused_imports)]
            use __nats_topology::{NameFallback as _, NameSpecialized as _};
            #name_probe
        }
        __nats_topology::inventory::submit! {
            __nats_topology::#registration {
                handler: ::core::concat!(::core::module_path!(), "::", #fn_name),
                schema: #schema_fn,
                protobuf_name: #name_fn,
            }
        }
    }
}

/// The glue of a batch handler (`#[queue_consumer(batch = N)]`), `fn(BatchInput) ->
/// BatchFuture`: decodes each message into the `T` of `Batch<T>` (one that does not decode
/// fails alone), takes the `State<T>` arguments, calls the user's function, and turns its
/// result into each message's outcome.
pub(crate) fn batch_glue(handler: &Handler, codec_ty: Option<&TokenStream>) -> TokenStream {
    let input = Ident::new("input", Span::mixed_site());
    let batch = Ident::new("batch", Span::mixed_site());
    let error = Ident::new("error", Span::mixed_site());
    let Some(item_ty) = &handler.batch_of else {
        return TokenStream::new();
    };
    let ty_span = item_ty.span();
    let decode = match codec_ty.filter(|_| !handler.raw) {
        Some(codec_ty) => {
            quote_spanned!(ty_span=> __nats_topology::decode_with::<#codec_ty, #item_ty>)
        }
        None => {
            let decode = ident(
                if handler.raw {
                    CONSUMER.decode_raw
                } else {
                    CONSUMER.decode_json
                },
                ty_span,
            );
            quote_spanned!(ty_span=> __nats_topology::#decode::<#item_ty>)
        }
    };
    let payload_ty = &handler.payload;
    let decode = quote_spanned! {ty_span=>
        let #batch: #payload_ty = __nats_topology::BatchInput::decode(&mut #input, #decode);
    };
    let mut states = TokenStream::new();
    let mut args = vec![quote!(#batch)];
    for (i, arg) in handler.rest.iter().enumerate() {
        // A `Context` argument was refused by validation.
        if let Arg::State(state_ty) = arg {
            let value = Ident::new(&format!("state_{i}"), Span::mixed_site());
            states.extend(quote_spanned! {state_ty.span()=>
                let #value: #state_ty = match __nats_topology::batch_state::<#state_ty>(&#input) {
                    ::core::result::Result::Ok(value) => value,
                    ::core::result::Result::Err(#error) => return #input.fail_all(#error),
                };
            });
            args.push(quote!(#value));
        }
    }
    let user_fn = &handler.ident;
    let result = Ident::new("__nats_topology_result", handler.output_span);
    let finish = ident("into_batch_result", handler.output_span);
    let call = quote_spanned! {handler.output_span=>
        let #result = #user_fn(#(#args),*).await;
        #input.finish(__nats_topology::#finish(#result))
    };
    let name_span = handler.ident.span();
    let send = ident(CONSUMER.send, name_span);
    let future = quote_spanned! {name_span=>
        __nats_topology::#send(async move {
            #decode
            if #input.none_decoded() {
                return #input.finish(::core::result::Result::Ok(()));
            }
            #states
            #call
        })
    };
    quote! {
        fn __nats_topology_batch(
            mut #input: __nats_topology::BatchInput,
        ) -> __nats_topology::BatchFuture {
            __nats_topology::Box::pin(#future)
        }
    }
}

/// The registration of a `layer = f` key: a function building the layer through `trait_name`
/// (`IntoHandlerLayer`, `IntoBatchLayer`, `IntoEndpointLayer`; located at the path, where a
/// function returning something else, or the `tower` feature off, is reported), submitted for
/// the handler `fn_name`.
pub(crate) fn layer(path: Option<&syn::Path>, trait_name: &str, fn_name: &str) -> TokenStream {
    let Some(path) = path else {
        return TokenStream::new();
    };
    let trait_ident = ident(trait_name, path.span());
    let call = quote_spanned! {path.span()=>
        __nats_topology::#trait_ident::into_layer(#path())
    };
    quote! {
        fn __nats_topology_layer() -> __nats_topology::AnyLayer {
            #call
        }
        __nats_topology::inventory::submit! {
            __nats_topology::LayerRegistration {
                handler: ::core::concat!(::core::module_path!(), "::", #fn_name),
                layer: __nats_topology_layer,
            }
        }
    }
}
