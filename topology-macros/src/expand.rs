//! The three macros, each in three passes: parse the attribute and the item into typed values
//! (recording every mistake in one [`Ctxt`]), validate them, and, when nothing was wrong,
//! generate the code. On errors the user's item is kept, followed by every error.

use proc_macro2::TokenStream;
use quote::quote;

use crate::args::{Args, Spec};
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
    let result = cx.check();
    if result.is_ok()
        && let Some(tokens) = emit::stream(ident, &attrs)
    {
        return quote!(#item #tokens);
    }
    let errors = emit::errors_or_bug(result, STREAM_SPEC.attr);
    let fallback = emit::stream_fallback(ident, &attrs.krate);
    quote! { #item #fallback #errors }
}

/// `#[queue_consumer(..)]` on an `async fn`.
pub(crate) fn queue_consumer(attr: TokenStream, item: TokenStream) -> TokenStream {
    consumer(&QUEUE, attr, item)
}

/// `#[broadcast(..)]` on an `async fn`.
pub(crate) fn broadcast(attr: TokenStream, item: TokenStream) -> TokenStream {
    consumer(&BROADCAST, attr, item)
}

static QUEUE: Passes<QueueAttrs> = Passes {
    spec: &QUEUE_SPEC,
    parse: QueueAttrs::parse,
    validate: validate::queue,
    emit: emit::queue,
};

static BROADCAST: Passes<BroadcastAttrs> = Passes {
    spec: &BROADCAST_SPEC,
    parse: BroadcastAttrs::parse,
    validate: validate::broadcast,
    emit: emit::broadcast,
};

/// The passes of one consumer macro, whose attributes parse into an `A`.
struct Passes<A> {
    spec: &'static Spec,
    parse: fn(&Args, &mut Ctxt) -> A,
    validate: fn(&A, &mut Ctxt),
    /// The item and its registration; `None` if something it needs is missing (a bug, since
    /// validation passed).
    emit: fn(&A, &TokenStream, &Handler) -> Option<TokenStream>,
}

/// The consumer's code if nothing was wrong, else the item and the errors.
fn consumer<A>(passes: &Passes<A>, attr: TokenStream, item: TokenStream) -> TokenStream {
    let mut cx = Ctxt::new();
    let args = Args::parse(passes.spec, attr, &mut cx);
    let handler = item::handler(passes.spec.attr, &item, &mut cx);
    let attrs = (passes.parse)(&args, &mut cx);
    (passes.validate)(&attrs, &mut cx);
    let result = cx.check();
    if result.is_ok()
        && let Some(handler) = &handler
        && let Some(tokens) = (passes.emit)(&attrs, &item, handler)
    {
        return tokens;
    }
    let errors = emit::errors_or_bug(result, passes.spec.attr);
    quote!(#item #errors)
}
