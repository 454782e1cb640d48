//! The glue that the runtime calls: `fn(Incoming) -> HandlerFuture`, calling the user's function.
//!
//! Its pieces carry the spans of the user's tokens, so that what only the type checker can see
//! is reported where the user wrote it: the payload type that is not `DeserializeOwned`, the
//! second argument that is not `Context`, the return type that is not
//! `Result<(), E: Into<HandlerError>>`, and a future that is not `Send` (at the function's name).

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::Ident;
use syn::spanned::Spanned;

use crate::item::{Arg, Handler};

/// The `StateKey`s of the handler's `State<T>` arguments, for the registration.
pub(crate) fn states(handler: &Handler) -> TokenStream {
    let keys = handler
        .states()
        .map(|ty| quote_spanned!(ty.span()=> <#ty as __nats_topology::StateArg>::KEY));
    quote!(&[#(#keys),*])
}

/// `fn __nats_topology_handler(Incoming) -> HandlerFuture`, calling the user's function.
pub(crate) fn glue(handler: &Handler) -> TokenStream {
    // Local names with mixed-site hygiene: they cannot capture or shadow the user's names.
    let incoming = Ident::new("incoming", Span::mixed_site());
    let payload = Ident::new("payload", Span::mixed_site());
    let context = Ident::new("cx", Span::mixed_site());
    let error = Ident::new("error", Span::mixed_site());

    let ty = &handler.payload;
    let ty_span = ty.span();
    let decode = if handler.raw {
        quote_spanned!(ty_span=> __nats_topology::decode_raw::<#ty>)
    } else {
        quote_spanned!(ty_span=> __nats_topology::decode_json::<#ty>)
    };
    let decode = quote_spanned! {ty_span=>
        let #payload: #ty = match #decode(&#incoming) {
            ::core::result::Result::Ok(value) => value,
            ::core::result::Result::Err(#error) => return ::core::result::Result::Err(#error),
        };
    };
    let mut context_stmt = TokenStream::new();
    let mut args = vec![quote!(#payload)];
    for (i, arg) in handler.rest.iter().enumerate() {
        match arg {
            Arg::Context(cx_ty) => {
                context_stmt.extend(quote_spanned!(cx_ty.span()=>
                    let #context: #cx_ty = __nats_topology::context::<#cx_ty>(&#incoming);
                ));
                args.push(quote!(#context));
            }
            Arg::State(state_ty) => {
                let value = Ident::new(&format!("state_{i}"), Span::mixed_site());
                context_stmt.extend(quote_spanned! {state_ty.span()=>
                    let #value: #state_ty = match __nats_topology::state::<#state_ty>(&#incoming) {
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
        __nats_topology::into_result(#result)
    };
    let name_span = handler.ident.span();
    let future = quote_spanned! {name_span=>
        __nats_topology::assert_send(async move {
            #decode
            #context_stmt
            #call
        })
    };
    quote! {
        fn __nats_topology_handler(#incoming: __nats_topology::Incoming) -> __nats_topology::HandlerFuture {
            __nats_topology::Box::pin(#future)
        }
    }
}
