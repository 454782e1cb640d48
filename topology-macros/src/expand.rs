//! The nine macros, each in three passes: parse the attribute and the item into typed values
//! (recording every mistake in one [`Ctxt`]), validate them, and, when nothing was wrong,
//! generate the code. On errors the user's item is kept, followed by every error.

use proc_macro2::TokenStream;
use quote::quote;

use crate::args::{Args, Spec};
use crate::attrs::broadcast::BROADCAST_SPEC;
use crate::attrs::bucket::{KV_SPEC, OBJECT_SPEC};
use crate::attrs::consumer::QUEUE_SPEC;
use crate::attrs::service::{ENDPOINT_SPEC, SERVICE_SPEC, SUBSCRIPTION_SPEC};
use crate::attrs::stream::SPEC as STREAM_SPEC;
use crate::attrs::watch::WATCH_SPEC;
use crate::attrs::{
    BroadcastAttrs, BucketAttrs, EndpointAttrs, QueueAttrs, ServiceAttrs, StreamAttrs,
    SubscriptionAttrs, WatchAttrs,
};
use crate::ctxt::Ctxt;
use crate::item::{self, Handler, HandlerKind};
use crate::{emit, validate};

/// `#[stream(..)]` on a unit struct.
pub(crate) fn stream(attr: TokenStream, item: TokenStream) -> TokenStream {
    let mut cx = Ctxt::new();
    let args = Args::parse(&STREAM_SPEC, attr, &mut cx);
    let target = item::unit_struct(("stream", "stream", "Orders"), &item, &mut cx);
    let attrs = StreamAttrs::parse(&args, &mut cx);
    validate::stream(&attrs, target.as_ref().map(|t| &t.ident), &mut cx);

    let Some(target) = target else {
        return emit::with_errors(item, cx, STREAM_SPEC.attr);
    };
    let result = cx.check();
    if result.is_ok()
        && let Some(tokens) = emit::stream(&target, &attrs)
    {
        return quote!(#item #tokens);
    }
    let errors = emit::errors_or_bug(result, STREAM_SPEC.attr);
    let fallback = emit::stream_fallback(&target, &attrs);
    quote! { #item #fallback #errors }
}

/// `#[kv_bucket(..)]` on a unit struct.
pub(crate) fn kv_bucket(attr: TokenStream, item: TokenStream) -> TokenStream {
    bucket(
        &KV_SPEC,
        BucketAttrs::parse_kv,
        ("key-value bucket", "MemberStatus"),
        attr,
        item,
    )
}

/// `#[object_store(..)]` on a unit struct.
pub(crate) fn object_store(attr: TokenStream, item: TokenStream) -> TokenStream {
    bucket(
        &OBJECT_SPEC,
        BucketAttrs::parse_object,
        ("object store", "Uploads"),
        attr,
        item,
    )
}

fn bucket(
    spec: &'static Spec,
    parse: fn(&Args, &mut Ctxt) -> BucketAttrs,
    (what, example): (&str, &str),
    attr: TokenStream,
    item: TokenStream,
) -> TokenStream {
    let mut cx = Ctxt::new();
    let args = Args::parse(spec, attr, &mut cx);
    let target = item::unit_struct((spec.attr, what, example), &item, &mut cx);
    let attrs = parse(&args, &mut cx);
    validate::bucket(&attrs, &mut cx);
    let result = cx.check();
    if result.is_ok()
        && let Some(target) = &target
        && let Some(tokens) = emit::bucket(target, &attrs)
    {
        return quote!(#item #tokens);
    }
    let errors = emit::errors_or_bug(result, spec.attr);
    quote!(#item #errors)
}

/// `#[service(..)]` on a unit struct.
pub(crate) fn service(attr: TokenStream, item: TokenStream) -> TokenStream {
    let mut cx = Ctxt::new();
    let args = Args::parse(&SERVICE_SPEC, attr, &mut cx);
    let target = item::unit_struct(("service", "service", "Members"), &item, &mut cx);
    let attrs = ServiceAttrs::parse(&args, &mut cx);
    validate::service(&attrs, &mut cx);

    let Some(target) = target else {
        return emit::with_errors(item, cx, SERVICE_SPEC.attr);
    };
    let ident = &target.ident;
    let result = cx.check();
    if result.is_ok()
        && let Some(tokens) = emit::service(ident, &attrs)
    {
        return quote!(#item #tokens);
    }
    let errors = emit::errors_or_bug(result, SERVICE_SPEC.attr);
    let fallback = emit::service_fallback(ident, &attrs.krate);
    quote! { #item #fallback #errors }
}

/// `#[endpoint(..)]` on an `async fn`.
pub(crate) fn endpoint(attr: TokenStream, item: TokenStream) -> TokenStream {
    handler(&ENDPOINT, attr, item)
}

/// `#[subscription(..)]` on an `async fn`.
pub(crate) fn subscription(attr: TokenStream, item: TokenStream) -> TokenStream {
    handler(&SUBSCRIPTION, attr, item)
}

/// `#[queue_consumer(..)]` on an `async fn`.
pub(crate) fn queue_consumer(attr: TokenStream, item: TokenStream) -> TokenStream {
    handler(&QUEUE, attr, item)
}

/// `#[broadcast(..)]` on an `async fn`.
pub(crate) fn broadcast(attr: TokenStream, item: TokenStream) -> TokenStream {
    handler(&BROADCAST, attr, item)
}

/// `#[kv_watch(..)]` on an `async fn`.
pub(crate) fn kv_watch(attr: TokenStream, item: TokenStream) -> TokenStream {
    handler(&WATCH, attr, item)
}

static WATCH: Passes<WatchAttrs> = Passes {
    spec: &WATCH_SPEC,
    kind: &item::CONSUMER,
    parse: WatchAttrs::parse,
    validate: |attrs, _, cx| validate::watch(attrs, cx),
    emit: emit::watch,
};

static QUEUE: Passes<QueueAttrs> = Passes {
    spec: &QUEUE_SPEC,
    kind: &item::CONSUMER,
    parse: QueueAttrs::parse,
    validate: |attrs, handler, cx| {
        validate::queue(attrs, cx);
        validate::batch(attrs, handler, cx);
        validate::codec("queue_consumer", attrs.common.codec.as_ref(), handler, cx);
    },
    emit: emit::queue,
};

static BROADCAST: Passes<BroadcastAttrs> = Passes {
    spec: &BROADCAST_SPEC,
    kind: &item::CONSUMER,
    parse: BroadcastAttrs::parse,
    validate: |attrs, handler, cx| {
        validate::broadcast(attrs, cx);
        validate::codec("broadcast", attrs.common.codec.as_ref(), handler, cx);
    },
    emit: emit::broadcast,
};

static ENDPOINT: Passes<EndpointAttrs> = Passes {
    spec: &ENDPOINT_SPEC,
    kind: &item::ENDPOINT,
    parse: EndpointAttrs::parse,
    validate: |attrs, handler, cx| {
        validate::endpoint(attrs, handler, cx);
        validate::codec("endpoint", attrs.codec.as_ref(), handler, cx);
    },
    emit: emit::endpoint,
};

static SUBSCRIPTION: Passes<SubscriptionAttrs> = Passes {
    spec: &SUBSCRIPTION_SPEC,
    kind: &item::SUBSCRIPTION,
    parse: SubscriptionAttrs::parse,
    validate: |attrs, handler, cx| {
        validate::subscription(attrs, cx);
        validate::codec("subscription", attrs.codec.as_ref(), handler, cx);
    },
    emit: emit::subscription,
};

/// The passes of one handler macro, whose attributes parse into an `A`.
struct Passes<A> {
    spec: &'static Spec,
    /// What its handler takes and returns.
    kind: &'static HandlerKind,
    parse: fn(&Args, &mut Ctxt) -> A,
    /// The rules, given the handler when its shape could be read.
    validate: fn(&A, Option<&Handler>, &mut Ctxt),
    /// The item and its registration; `None` if something it needs is missing (a bug, since
    /// validation passed).
    emit: fn(&A, &TokenStream, &Handler) -> Option<TokenStream>,
}

/// The handler's code if nothing was wrong, else the item and the errors.
fn handler<A>(passes: &Passes<A>, attr: TokenStream, item: TokenStream) -> TokenStream {
    let mut cx = Ctxt::new();
    let args = Args::parse(passes.spec, attr, &mut cx);
    let handler = item::handler(passes.spec.attr, passes.kind, &item, &mut cx);
    let attrs = (passes.parse)(&args, &mut cx);
    (passes.validate)(&attrs, handler.as_ref(), &mut cx);
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
