//! Small pieces of generated code shared by the macros.

use core::time::Duration;

use proc_macro2::{Span, TokenStream};
use quote::{ToTokens, quote};
use syn::{Item, Path};

use crate::ctxt::Ctxt;

/// The path generated code reaches the facade at: `::nats_topology`, or the `crate = path`
/// override.
pub(crate) fn krate(path: Option<&Path>) -> TokenStream {
    match path {
        Some(path) => path.to_token_stream(),
        None => quote!(::nats_topology),
    }
}

/// The user's item, unchanged, followed by every error.
pub(crate) fn with_errors(item: TokenStream, cx: Ctxt, attr: &str) -> TokenStream {
    let errors = errors_or_bug(cx.check(), attr);
    quote!(#item #errors)
}

/// The errors; never nothing, so that a failed expansion cannot silently register nothing.
pub(crate) fn errors_or_bug(result: Result<(), TokenStream>, attr: &str) -> TokenStream {
    match result {
        Err(errors) => errors,
        Ok(()) => syn::Error::new(
            Span::call_site(),
            format!("`#[{attr}]` could not be expanded; this is a bug in nats-topology, please report it"),
        )
        .into_compile_error(),
    }
}

/// A `core::time::Duration` value, exactly.
pub(crate) fn duration(d: Duration) -> TokenStream {
    let secs = d.as_secs();
    let nanos = d.subsec_nanos();
    quote!(__nats_topology::Duration::new(#secs, #nanos))
}

/// The start of an item, to point at when the item is of the wrong kind.
pub(crate) fn item_head(item: &Item) -> TokenStream {
    match item {
        Item::Enum(i) => {
            let (t, n) = (&i.enum_token, &i.ident);
            quote!(#t #n)
        }
        Item::Fn(i) => {
            let (t, n) = (&i.sig.fn_token, &i.sig.ident);
            quote!(#t #n)
        }
        Item::Struct(i) => {
            let (t, n) = (&i.struct_token, &i.ident);
            quote!(#t #n)
        }
        Item::Union(i) => {
            let (t, n) = (&i.union_token, &i.ident);
            quote!(#t #n)
        }
        Item::Trait(i) => {
            let (t, n) = (&i.trait_token, &i.ident);
            quote!(#t #n)
        }
        Item::Type(i) => {
            let (t, n) = (&i.type_token, &i.ident);
            quote!(#t #n)
        }
        Item::Const(i) => {
            let (t, n) = (&i.const_token, &i.ident);
            quote!(#t #n)
        }
        Item::Static(i) => {
            let (t, n) = (&i.static_token, &i.ident);
            quote!(#t #n)
        }
        Item::Mod(i) => {
            let (t, n) = (&i.mod_token, &i.ident);
            quote!(#t #n)
        }
        Item::Impl(i) => {
            let t = &i.impl_token;
            quote!(#t)
        }
        other => other.to_token_stream(),
    }
}

/// A path as written, without the spaces `to_string` puts around `::`.
pub(crate) fn path_text(path: &Path) -> String {
    path.to_token_stream().to_string().replace(' ', "")
}

/// Text made safe for the format string of `assert!`.
pub(crate) fn escape_format(text: &str) -> String {
    text.replace('{', "{{").replace('}', "}}")
}
