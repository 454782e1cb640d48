//! The three macros, each in three passes: parse the attribute and the item into typed values
//! (recording every mistake in one [`Ctxt`]), validate them, and, when nothing was wrong,
//! generate the code. On errors the user's item is kept, followed by every error.

use proc_macro2::TokenStream;
use quote::quote;

use crate::args::Args;
use crate::attrs::consumer::{BROADCAST_SPEC, QUEUE_SPEC};
use crate::attrs::stream::SPEC as STREAM_SPEC;
use crate::attrs::{BroadcastAttrs, QueueAttrs, StreamAttrs};
use crate::ctxt::Ctxt;
use crate::item::{self, Handler};
use crate::{emit, validate};

/// `#[stream(..)]` on a unit struct.
pub(crate) fn stream(attr: TokenStream, item: TokenStream) -> TokenStream {
    let mut cx = Ctxt::new();
    let args = Args::parse(&STREAM_SPEC, attr, &mut cx);
    let target = item::stream_struct(&item, &mut cx);
    let attrs = StreamAttrs::parse(&args, &mut cx);
    validate::stream(&attrs, &mut cx);

    let Some(target) = target else {
        return emit::with_errors(item, cx, STREAM_SPEC.attr);
    };
    let ident = &target.ident;
    let krate = emit::krate(&attrs.krate);
    let result = cx.check();
    if result.is_ok()
        && let Some(krate) = &krate
        && let Some(tokens) = emit::stream(ident, &attrs, krate)
    {
        return quote!(#item #tokens);
    }
    let errors = emit::errors_or_bug(result, STREAM_SPEC.attr);
    // Unless the `crate` path is itself wrong, keep the struct usable as a stream, so that the
    // consumers naming it add no errors of their own.
    let fallback = krate.map(|krate| emit::stream_fallback(ident, &krate));
    quote! { #item #fallback #errors }
}

/// `#[queue_consumer(..)]` on an `async fn`.
pub(crate) fn queue_consumer(attr: TokenStream, item: TokenStream) -> TokenStream {
    let mut cx = Ctxt::new();
    let args = Args::parse(&QUEUE_SPEC, attr, &mut cx);
    let handler = item::handler(QUEUE_SPEC.attr, &item, &mut cx);
    let attrs = QueueAttrs::parse(&args, &mut cx);
    validate::queue(&attrs, &mut cx);
    consumer(cx, QUEUE_SPEC.attr, item, handler, |item, handler| {
        emit::queue(&attrs, item, handler)
    })
}

/// `#[broadcast(..)]` on an `async fn`.
pub(crate) fn broadcast(attr: TokenStream, item: TokenStream) -> TokenStream {
    let mut cx = Ctxt::new();
    let args = Args::parse(&BROADCAST_SPEC, attr, &mut cx);
    let handler = item::handler(BROADCAST_SPEC.attr, &item, &mut cx);
    let attrs = BroadcastAttrs::parse(&args, &mut cx);
    validate::broadcast(&attrs, &mut cx);
    consumer(cx, BROADCAST_SPEC.attr, item, handler, |item, handler| {
        emit::broadcast(&attrs, item, handler)
    })
}

/// The consumer's code if nothing was wrong, else the item and the errors.
fn consumer(
    cx: Ctxt,
    attr: &str,
    item: TokenStream,
    handler: Option<Handler>,
    generate: impl FnOnce(&TokenStream, &Handler) -> Option<TokenStream>,
) -> TokenStream {
    let result = cx.check();
    if result.is_ok()
        && let Some(handler) = &handler
        && let Some(tokens) = generate(&item, handler)
    {
        return tokens;
    }
    let errors = emit::errors_or_bug(result, attr);
    quote!(#item #errors)
}
