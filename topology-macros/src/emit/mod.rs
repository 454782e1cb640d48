//! Generating code from attributes that passed [`crate::validate`]: nothing here checks a value
//! or reports a mistake of the user's.
//!
//! Generated code reaches the facade only through `__private` (at `::nats_topology`, or the
//! `crate = path` override), names nothing else but `::core`, and lives in
//! `const _: () = { .. };`.

mod bucket;
mod consumer;
mod handler;
mod service;
mod stream;
mod watch;

use core::fmt::Debug;
use core::time::Duration;

use proc_macro2::{Span, TokenStream};
use quote::{ToTokens, quote};
use syn::{Ident, Path};

pub(crate) use bucket::bucket;
pub(crate) use consumer::{broadcast, queue};
pub(crate) use service::{endpoint, service, service_fallback, subscription};
pub(crate) use stream::{stream, stream_fallback};
pub(crate) use watch::watch;

use crate::ctxt::Ctxt;
use crate::value::Krate;

/// The path generated code reaches the facade at: `::nats_topology`, or the `crate = path`
/// override; `None` when the override is not a path.
fn krate(krate: &Krate) -> Option<TokenStream> {
    match krate {
        Krate::Default => Some(quote!(::nats_topology)),
        Krate::Path(path) => Some(path.to_token_stream()),
        Krate::Invalid => None,
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
fn duration(d: Duration) -> TokenStream {
    let secs = d.as_secs();
    let nanos = d.subsec_nanos();
    quote!(__nats_topology::Duration::new(#secs, #nanos))
}

/// `.method(value)` when there is a value.
fn call(method: &str, value: Option<impl ToTokens>) -> Option<TokenStream> {
    let method = Ident::new(method, Span::call_site());
    value.map(|value| quote!(.#method(#value)))
}

/// A variant of one of the model's enums, `__nats_topology::Storage::File`. (The model's enums
/// derive `Debug`, which writes a variant's name.)
fn variant(ty: &str, value: impl Debug) -> TokenStream {
    let ty = Ident::new(ty, Span::call_site());
    let value = Ident::new(&format!("{value:?}"), Span::call_site());
    quote!(__nats_topology::#ty::#value)
}

/// A path as written, without the spaces `to_string` puts around `::`.
fn path_text(path: &Path) -> String {
    path.to_token_stream().to_string().replace(' ', "")
}

/// Text made safe for the format string of `assert!`.
fn escape_format(text: &str) -> String {
    text.replace('{', "{{").replace('}', "}}")
}
