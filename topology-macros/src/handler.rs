//! The handler function: its shape, checked at expansion, and the glue that the runtime calls.
//!
//! The glue is `fn(Incoming) -> HandlerFuture`. Its pieces carry the spans of the user's tokens,
//! so that what only the type checker can see is reported where the user wrote it: the payload
//! type that is not `DeserializeOwned`, the second argument that is not `Context`, the return
//! type that is not `Result<(), E: Into<HandlerError>>`, and a future that is not `Send` (at the
//! function's name).

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{FnArg, Ident, ItemFn, ReturnType, Type};

use crate::ctxt::Ctxt;

/// A handler whose shape is right.
pub(crate) struct Handler {
    pub ident: Ident,
    payload: Type,
    raw: bool,
    context: Option<Type>,
    output_span: Span,
}

/// Checks the shape of the handler; `None` (with errors in `cx`) if it is wrong.
pub(crate) fn analyze(attr: &str, f: &ItemFn, cx: &mut Ctxt) -> Option<Handler> {
    let sig = &f.sig;
    let ident = &sig.ident;
    let mut ok = true;
    if let Some(constness) = &sig.constness {
        ok = false;
        cx.error_spanned_by(
            constness,
            format!("`#[{attr}]` handlers cannot be `const`; write `async fn {ident}(..)`"),
        );
    }
    if sig.asyncness.is_none() {
        ok = false;
        cx.error_spanned_by(
            sig.fn_token,
            format!(
                "`#[{attr}]` handlers are `async fn`: the `async` keyword is missing; write `async fn {ident}(..)`"
            ),
        );
    }
    if let syn::Safety::Unsafe(unsafety) = &sig.safety {
        ok = false;
        cx.error_spanned_by(
            unsafety,
            format!(
                "`#[{attr}]` handlers cannot be `unsafe`: the runtime calls them as safe functions"
            ),
        );
    }
    if let Some(abi) = &sig.abi {
        ok = false;
        cx.error_spanned_by(
            abi,
            format!("`#[{attr}]` handlers cannot have an ABI; remove the `extern`"),
        );
    }
    if !sig.generics.params.is_empty() {
        ok = false;
        cx.error_spanned_by(
            &sig.generics,
            format!(
                "`#[{attr}]` handlers cannot be generic: the runtime calls one concrete function for every message; name the payload type, as in `async fn {ident}(event: OrderPlaced)`"
            ),
        );
    } else if let Some(where_clause) = &sig.generics.where_clause {
        ok = false;
        cx.error_spanned_by(
            where_clause,
            format!("`#[{attr}]` handlers cannot be generic; remove the `where` clause"),
        );
    }
    if let Some(variadic) = &sig.variadic {
        ok = false;
        cx.error_spanned_by(variadic, format!("`#[{attr}]` handlers cannot be variadic"));
    }

    let mut types = Vec::new();
    for (i, arg) in sig.inputs.iter().enumerate() {
        match arg {
            FnArg::Receiver(receiver) => {
                ok = false;
                cx.error_spanned_by(
                    receiver,
                    format!(
                        "`#[{attr}]` goes on a free `async fn`, not a method: remove `self`, or call the method from a free function"
                    ),
                );
            }
            FnArg::Typed(pat_type) => {
                if i >= 2 {
                    ok = false;
                    cx.error_spanned_by(
                        pat_type,
                        format!(
                            "`#[{attr}]` handlers take the payload and, optionally, a `Context`; remove this argument (reach shared state with `cx.state::<T>()`)"
                        ),
                    );
                    continue;
                }
                if contains_impl_trait(&pat_type.ty) {
                    ok = false;
                    cx.error_spanned_by(
                        &pat_type.ty,
                        format!(
                            "`#[{attr}]` handler arguments must be concrete types, not `impl Trait`: the payload is decoded into the type named here"
                        ),
                    );
                    continue;
                }
                types.push((*pat_type.ty).clone());
            }
        }
    }
    if sig.inputs.is_empty() {
        ok = false;
        cx.error_at(
            sig.paren_token.span.join(),
            format!(
                "`#[{attr}]` handlers take the payload as their first argument, as in `async fn {ident}(event: OrderPlaced)` (`Vec<u8>` or `Bytes` for the raw bytes)"
            ),
        );
    }
    let output_span = match &sig.output {
        ReturnType::Type(_, ty) => ty.span(),
        ReturnType::Default => {
            ok = false;
            cx.error_at(
                sig.paren_token.span.close(),
                format!(
                    "`#[{attr}]` handlers return `Result<(), E>` with `E: Into<HandlerError>`, as in `-> Result<(), HandlerError>`: an `Err` asks for a redelivery"
                ),
            );
            Span::call_site()
        }
    };
    if !ok {
        return None;
    }
    let mut types = types.into_iter();
    let payload = types.next()?;
    Some(Handler {
        ident: ident.clone(),
        raw: is_raw(&payload),
        payload,
        context: types.next(),
        output_span,
    })
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
    let (context_stmt, args) = match &handler.context {
        Some(cx_ty) => (
            quote_spanned!(cx_ty.span()=> let #context: #cx_ty = __nats_topology::context(&#incoming);),
            quote!(#payload, #context),
        ),
        None => (TokenStream::new(), quote!(#payload)),
    };
    let user_fn = &handler.ident;
    // The result lives in a local located at the return type, so that a wrong return type is
    // reported there alone. (Call-site hygiene like the tokens around it: mixing hygiene in one
    // expression makes rustc fall back to the attribute's span. It is bound after the call, so
    // it cannot capture anything of the user's.)
    let result = Ident::new("__nats_topology_result", handler.output_span);
    let call = quote_spanned! {handler.output_span=>
        let #result = #user_fn(#args).await;
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

/// `Vec<u8>` or `Bytes` (by name: a syntactic check), passed through without decoding.
fn is_raw(ty: &Type) -> bool {
    match ty {
        Type::Group(g) => is_raw(&g.elem),
        Type::Paren(p) => is_raw(&p.elem),
        Type::Path(p) if p.qself.is_none() => {
            let Some(last) = p.path.segments.last() else {
                return false;
            };
            match &last.arguments {
                syn::PathArguments::None => last.ident == "Bytes",
                syn::PathArguments::AngleBracketed(args) => {
                    last.ident == "Vec"
                        && args.args.len() == 1
                        && matches!(
                            args.args.first(),
                            Some(syn::GenericArgument::Type(Type::Path(u8_path)))
                                if u8_path.qself.is_none() && u8_path.path.is_ident("u8")
                        )
                }
                syn::PathArguments::Parenthesized(_) => false,
            }
        }
        _ => false,
    }
}

fn contains_impl_trait(ty: &Type) -> bool {
    match ty {
        Type::ImplTrait(_) => true,
        Type::Group(g) => contains_impl_trait(&g.elem),
        Type::Paren(p) => contains_impl_trait(&p.elem),
        Type::Reference(r) => contains_impl_trait(&r.elem),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_payloads() {
        let raw = |s: &str| is_raw(&syn::parse_str::<Type>(s).unwrap());
        assert!(raw("Vec<u8>"));
        assert!(raw("std::vec::Vec<u8>"));
        assert!(raw("Bytes"));
        assert!(raw("bytes::Bytes"));
        assert!(!raw("Vec<u16>"));
        assert!(!raw("Vec<Event>"));
        assert!(!raw("Event"));
        assert!(!raw("&[u8]"));
        assert!(!raw("<T as X>::Bytes"));
    }
}
