//! The items the attributes go on: a unit struct for `#[stream]` and `#[service]`, an
//! `async fn` for `#[queue_consumer]`, `#[broadcast]`, `#[endpoint]` and `#[subscription]`.
//! Their shape is checked here; what only the type checker can see is left to it, at the
//! user's tokens (see [`crate::emit`]).

use proc_macro2::{Span, TokenStream};
use quote::{ToTokens, quote};
use syn::spanned::Spanned;
use syn::{FnArg, Ident, Item, ItemFn, ItemStruct, ReturnType, Type};

use crate::ctxt::Ctxt;

/// The struct of `#[stream]` or `#[service]` (`attr`, naming a `what`, as in `example`), if
/// the item is a non-generic unit struct; errors otherwise. A struct that is not one is still
/// kept and emitted; only the impls are skipped.
pub(crate) fn unit_struct(
    (attr, what, example): (&str, &str, &str),
    item: &TokenStream,
    cx: &mut Ctxt,
) -> Option<ItemStruct> {
    let item_struct = match syn::parse2::<Item>(item.clone()) {
        Ok(Item::Struct(s)) => s,
        Ok(other) => {
            cx.error_spanned_by(
                item_head(&other),
                format!("`#[{attr}]` goes on a unit struct that names the {what}, as in `pub struct {example};`"),
            );
            return None;
        }
        Err(error) => {
            cx.syn_error(error);
            return None;
        }
    };
    let generic =
        !item_struct.generics.params.is_empty() || item_struct.generics.where_clause.is_some();
    if generic {
        cx.error_spanned_by(
            &item_struct.generics,
            format!(
                "`#[{attr}]` goes on a unit struct without generics, as in `pub struct {example};`"
            ),
        );
    }
    let unit = matches!(item_struct.fields, syn::Fields::Unit);
    if !unit {
        cx.error_spanned_by(
            &item_struct.fields,
            format!(
                "`#[{attr}]` goes on a unit struct: a {what} type carries no data; write `struct {};`",
                item_struct.ident
            ),
        );
    }
    (unit && !generic).then_some(item_struct)
}

/// What a kind of handler takes and returns, for the messages about its shape.
pub(crate) struct HandlerKind {
    /// The name of its context type: `Context`, `RequestContext`.
    pub context: &'static str,
    /// What it handles: "messages", "requests".
    pub handles: &'static str,
    /// A whole handler, as an example.
    pub example: &'static str,
    /// What it returns, for a handler that returns nothing.
    pub returns: &'static str,
}

/// A consumer's handler (`#[queue_consumer]`, `#[broadcast]`).
pub(crate) const CONSUMER: HandlerKind = HandlerKind {
    context: "Context",
    handles: "messages",
    example: "async fn on_event(event: Event) -> Result<(), HandlerError>",
    returns: "return `Result<(), E>` with `E: Into<HandlerError>`, as in `-> Result<(), HandlerError>`: an `Err` asks for a redelivery",
};

/// An endpoint's handler.
pub(crate) const ENDPOINT: HandlerKind = HandlerKind {
    context: "RequestContext",
    handles: "requests",
    example: "async fn get_member(id: MemberId) -> Result<Member, ServiceError>",
    returns: "return `Result<T, E>`, the reply (`T: Serialize`, or `Bytes`, `Vec<u8>`) or the error (`E: Into<ServiceError>`), as in `-> Result<Member, ServiceError>`",
};

/// A core subscription's handler.
pub(crate) const SUBSCRIPTION: HandlerKind = HandlerKind {
    context: "RequestContext",
    handles: "messages",
    example: "async fn on_event(event: Event) -> Result<(), HandlerError>",
    returns: "return `Result<(), E>` with `E: Into<HandlerError>`, as in `-> Result<(), HandlerError>`",
};

/// The handler of a consumer, endpoint or subscription, if the item is an `async fn` of the
/// right shape; errors otherwise.
pub(crate) fn handler(
    attr: &str,
    kind: &HandlerKind,
    item: &TokenStream,
    cx: &mut Ctxt,
) -> Option<Handler> {
    match syn::parse2::<Item>(item.clone()) {
        Ok(Item::Fn(f)) => analyze(attr, kind, &f, cx),
        Ok(other) => {
            cx.error_spanned_by(
                item_head(&other),
                format!(
                    "`#[{attr}]` goes on the `async fn` that handles the {}, as in `{}`",
                    kind.handles, kind.example
                ),
            );
            None
        }
        Err(error) => {
            cx.syn_error(error);
            None
        }
    }
}

/// The handler function, as the glue needs it.
pub(crate) struct Handler {
    pub ident: Ident,
    /// The function's visibility, which the typed relay handle of `#[broadcast]` shares.
    pub vis: syn::Visibility,
    pub payload: Type,
    /// `Vec<u8>` or `Bytes`: passed through without decoding (for a batch handler, its
    /// items).
    pub raw: bool,
    /// For a payload written `Batch<T>`: `T`, what each message of the batch decodes into.
    pub batch_of: Option<Type>,
    /// The arguments after the payload, in order.
    pub rest: Vec<Arg>,
    pub output_span: Span,
    /// The return type as written, if any.
    pub output: Option<Type>,
}

/// An argument after the payload.
pub(crate) enum Arg {
    /// The message's `Context` or `RequestContext` (or a type the checker will refuse as one).
    Context(Type),
    /// Application state, `State<T>`.
    State(Type),
}

impl Handler {
    /// The function's name, without `r#`.
    pub(crate) fn name(&self) -> String {
        let name = self.ident.to_string();
        name.strip_prefix("r#").map_or(name.clone(), str::to_owned)
    }

    /// The `State<T>` arguments.
    pub(crate) fn states(&self) -> impl Iterator<Item = &Type> {
        self.rest.iter().filter_map(|arg| match arg {
            Arg::State(ty) => Some(ty),
            Arg::Context(_) => None,
        })
    }
}

/// Checks the shape of the handler, reporting every mistake. A handler with mistakes is read
/// as far as it can be (the errors stop the expansion anyway); `None` when it has no payload
/// argument (an error too).
fn analyze(attr: &str, kind: &HandlerKind, f: &ItemFn, cx: &mut Ctxt) -> Option<Handler> {
    let sig = &f.sig;
    let ident = &sig.ident;
    if let Some(constness) = &sig.constness {
        cx.error_spanned_by(
            constness,
            format!("`#[{attr}]` handlers cannot be `const`; write `async fn {ident}(..)`"),
        );
    }
    if sig.asyncness.is_none() {
        cx.error_spanned_by(
            sig.fn_token,
            format!(
                "`#[{attr}]` handlers are `async fn`: the `async` keyword is missing; write `async fn {ident}(..)`"
            ),
        );
    }
    if let syn::Safety::Unsafe(unsafety) = &sig.safety {
        cx.error_spanned_by(
            unsafety,
            format!(
                "`#[{attr}]` handlers cannot be `unsafe`: the runtime calls them as safe functions"
            ),
        );
    }
    if let Some(abi) = &sig.abi {
        cx.error_spanned_by(
            abi,
            format!("`#[{attr}]` handlers cannot have an ABI; remove the `extern`"),
        );
    }
    if !sig.generics.params.is_empty() {
        cx.error_spanned_by(
            &sig.generics,
            format!(
                "`#[{attr}]` handlers cannot be generic: the runtime calls one concrete function for every message; name the payload type, as in `async fn {ident}(event: OrderPlaced)`"
            ),
        );
    } else if let Some(where_clause) = &sig.generics.where_clause {
        cx.error_spanned_by(
            where_clause,
            format!("`#[{attr}]` handlers cannot be generic; remove the `where` clause"),
        );
    }
    if let Some(variadic) = &sig.variadic {
        cx.error_spanned_by(variadic, format!("`#[{attr}]` handlers cannot be variadic"));
    }

    let mut types = Vec::new();
    for arg in &sig.inputs {
        match arg {
            FnArg::Receiver(receiver) => {
                cx.error_spanned_by(
                    receiver,
                    format!(
                        "`#[{attr}]` goes on a free `async fn`, not a method: remove `self`, or call the method from a free function"
                    ),
                );
            }
            FnArg::Typed(pat_type) => {
                if contains_impl_trait(&pat_type.ty) {
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
    let method = sig
        .inputs
        .iter()
        .any(|arg| matches!(arg, FnArg::Receiver(_)));
    if !method && crate::enclosing::inside_impl(ident) {
        cx.error_spanned_by(
            ident,
            format!(
                "`#[{attr}]` goes on a free function, not inside an `impl` block: move `{ident}` out of the `impl` (to use the type, call it from the free function)"
            ),
        );
    }
    if sig.inputs.is_empty() {
        cx.error_at(
            sig.paren_token.span.join(),
            format!(
                "`#[{attr}]` handlers take the payload as their first argument, as in `async fn {ident}(event: OrderPlaced)` (`Vec<u8>` or `Bytes` for the raw bytes)"
            ),
        );
    }
    let (output_span, output) = match &sig.output {
        ReturnType::Type(_, ty) => (ty.span(), Some((**ty).clone())),
        ReturnType::Default => {
            cx.error_at(
                sig.paren_token.span.close(),
                format!("`#[{attr}]` handlers {}", kind.returns),
            );
            (Span::call_site(), None)
        }
    };
    let mut types = types.into_iter();
    let payload = types.next()?;
    // After the payload: `State<T>` arguments anywhere, and one context. The second argument
    // is taken as the context unless it is a `State`, so that a second payload is reported by
    // the type checker as "the second argument of a handler is its `Context`".
    let mut rest = Vec::new();
    let mut context = false;
    for (i, ty) in types.enumerate() {
        if last_segment_is(&ty, "State") {
            rest.push(Arg::State(ty));
        } else if !context && (i == 0 || last_segment_is(&ty, kind.context)) {
            context = true;
            rest.push(Arg::Context(ty));
        } else {
            cx.error_spanned_by(
                &ty,
                format!(
                    "`#[{attr}]` handlers take the payload, optionally a `{}`, then any `State<T>` arguments (application state given to `Runtime::builder(..).state(..)`); this argument is none of these: remove it, or wrap application state in `State<..>`",
                    kind.context
                ),
            );
        }
    }
    let batch_of = batch_item(&payload).cloned();
    Some(Handler {
        ident: ident.clone(),
        vis: f.vis.clone(),
        raw: is_raw(batch_of.as_ref().unwrap_or(&payload)),
        batch_of,
        payload,
        rest,
        output_span,
        output,
    })
}

/// The `T` of a payload written `Batch<T>` (by name: a syntactic check).
pub(crate) fn batch_item(ty: &Type) -> Option<&Type> {
    match ty {
        Type::Group(g) => batch_item(&g.elem),
        Type::Paren(p) => batch_item(&p.elem),
        Type::Path(p) if p.qself.is_none() => {
            let last = p.path.segments.last()?;
            let syn::PathArguments::AngleBracketed(args) = &last.arguments else {
                return None;
            };
            match (args.args.len(), args.args.first()) {
                (1, Some(syn::GenericArgument::Type(item))) if last.ident == "Batch" => Some(item),
                _ => None,
            }
        }
        _ => None,
    }
}

/// Whether `ty` is a path whose last segment is `name` (by name: a syntactic check).
fn last_segment_is(ty: &Type, name: &str) -> bool {
    match ty {
        Type::Group(g) => last_segment_is(&g.elem, name),
        Type::Paren(p) => last_segment_is(&p.elem, name),
        Type::Path(p) if p.qself.is_none() => p
            .path
            .segments
            .last()
            .is_some_and(|last| last.ident == name),
        _ => false,
    }
}

/// The `T` of a return type written `Result<T, ..>` (any path ending in `Result`, such as
/// `anyhow::Result<T>`); `None` for other types (an alias, which the type checker sees through).
pub(crate) fn result_ok_type(ty: &Type) -> Option<&Type> {
    match ty {
        Type::Group(g) => result_ok_type(&g.elem),
        Type::Paren(p) => result_ok_type(&p.elem),
        Type::Path(p) if p.qself.is_none() => {
            let last = p.path.segments.last()?;
            let syn::PathArguments::AngleBracketed(args) = &last.arguments else {
                return None;
            };
            match args.args.first() {
                Some(syn::GenericArgument::Type(ok)) if last.ident == "Result" => Some(ok),
                _ => None,
            }
        }
        _ => None,
    }
}

/// `Vec<u8>` or `Bytes` (by name: a syntactic check), passed through without decoding.
pub(crate) fn is_raw(ty: &Type) -> bool {
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

/// The start of an item, to point at when the item is of the wrong kind.
fn item_head(item: &Item) -> TokenStream {
    fn head(keyword: &dyn ToTokens, ident: &Ident) -> TokenStream {
        quote!(#keyword #ident)
    }
    match item {
        Item::Enum(i) => head(&i.enum_token, &i.ident),
        Item::Fn(i) => head(&i.sig.fn_token, &i.sig.ident),
        Item::Struct(i) => head(&i.struct_token, &i.ident),
        Item::Union(i) => head(&i.union_token, &i.ident),
        Item::Trait(i) => head(&i.trait_token, &i.ident),
        Item::Type(i) => head(&i.type_token, &i.ident),
        Item::Const(i) => head(&i.const_token, &i.ident),
        Item::Static(i) => head(&i.static_token, &i.ident),
        Item::Mod(i) => head(&i.mod_token, &i.ident),
        Item::Impl(i) => i.impl_token.to_token_stream(),
        other => other.to_token_stream(),
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

    #[test]
    fn result_ok_types() {
        let ok = |s: &str| {
            let ty = syn::parse_str::<Type>(s).unwrap();
            result_ok_type(&ty).map(|t| quote!(#t).to_string())
        };
        assert_eq!(
            ok("Result<Member, ServiceError>").as_deref(),
            Some("Member")
        );
        assert_eq!(ok("anyhow::Result<Vec<u8>>").as_deref(), Some("Vec < u8 >"));
        assert_eq!(ok("Reply<Member>"), None);
        assert_eq!(ok("Result"), None);
        assert_eq!(ok("String"), None);
    }
}
