//! Trace propagation on a real server (feature `otel`): a request's trace id crosses
//! publish -> handler -> `Context::publish` -> handler, each span the child of the one before,
//! through W3C `traceparent` headers; a message without a valid `traceparent` starts a trace
//! of its own.
//!
//! Spans are exported in memory, through a `tracing-opentelemetry` layer in the process's
//! global subscriber (handlers run on tokio worker threads).

#[path = "../../tests/fixture/mod.rs"]
mod fixture;

use std::sync::OnceLock;
use std::time::Duration;

use fixture::Fixture;
use nats_topology::async_nats::HeaderMap;
use nats_topology::model::QueueDecl;
use nats_topology::{HandlerFuture, Incoming, Topology};
use nats_topology_testkit::eventually;
use opentelemetry::trace::{SpanId, TraceContextExt, TraceId, TracerProvider as _};
use opentelemetry::{KeyValue, Value};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;

/// The spans every test of this binary exports.
fn exporter() -> &'static InMemorySpanExporter {
    static EXPORTER: OnceLock<InMemorySpanExporter> = OnceLock::new();
    EXPORTER.get_or_init(|| {
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build();
        let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("trace-tests"));
        tracing::subscriber::set_global_default(tracing_subscriber::registry().with(layer))
            .expect("no other subscriber in this binary");
        exporter
    })
}

/// The exported `message` span of the handler of `consumer` for the message published to
/// `subject`, once it ended.
async fn handler_span(consumer: &str, subject: &str) -> SpanData {
    let what = format!("the span of {consumer} on {subject} exported");
    eventually(Duration::from_secs(20), &what, || {
        let found = exporter()
            .get_finished_spans()
            .expect("the in-memory exporter reads")
            .into_iter()
            .find(|span| {
                span.name == "message"
                    && attribute(span, "consumer") == Some(consumer.to_owned())
                    && attribute(span, "subject") == Some(subject.to_owned())
            });
        async move { found }
    })
    .await
}

fn attribute(span: &SpanData, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|KeyValue { key: k, .. }| k.as_str() == key)
        .map(|kv| match &kv.value {
            Value::String(s) => s.as_str().to_owned(),
            other => other.to_string(),
        })
}

/// A stream with `first` and `second` subjects: `<prefix>_first` republishes what it gets to
/// `second` with `Context::publish`; `<prefix>_second` only receives.
fn chain(prefix: &str) -> (Topology, String, String) {
    let name = format!("{}_CHAIN", prefix.to_uppercase());
    let (first, second) = (format!("{prefix}.first"), format!("{prefix}.second"));
    let stream = fixture::stream(&name, &[&first, &second]);
    let onward = fixture::leak(second.clone());
    let forward = move |incoming: Incoming| -> HandlerFuture {
        Box::pin(async move {
            let cx = incoming.context();
            cx.publish_bytes(onward, incoming.payload().clone()).await?;
            Ok(())
        })
    };
    let receive = |_: Incoming| -> HandlerFuture { Box::pin(async { Ok(()) }) };
    let first_consumer = fixture::queue(
        &format!("tests::{prefix}_first"),
        &stream,
        &first,
        QueueDecl::new(fixture::leak(format!("{prefix}_first"))),
    );
    let second_consumer = fixture::queue(
        &format!("tests::{prefix}_second"),
        &stream,
        &second,
        QueueDecl::new(fixture::leak(format!("{prefix}_second"))),
    );
    let topology = Topology::new()
        .stream(stream)
        .consumer(first_consumer, forward)
        .consumer(second_consumer, receive);
    (topology, first, second)
}

/// A request span publishes (its context injected with `telemetry::inject_context`); the
/// first handler's span is its child and publishes with `Context::publish`; the second
/// handler's span is the child of the first's. One trace id throughout, and the message
/// between the handlers carries the first handler's span as its `traceparent`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trace_id_crosses_publish_handler_publish_handler() {
    exporter();
    let fx = Fixture::start().await;
    let (topology, first, second) = chain("trace_cross");
    let running = fx.run(topology).await;
    let js = fx.jetstream().await;

    let request = tracing::info_span!("request");
    let request_cx = request.context();
    let (trace_id, request_id) = {
        let span = request_cx.span();
        (
            span.span_context().trace_id(),
            span.span_context().span_id(),
        )
    };
    assert_ne!(
        trace_id,
        TraceId::INVALID,
        "the layer gives the request a trace"
    );
    let mut headers = HeaderMap::new();
    nats_topology::telemetry::inject_context(&request_cx, &mut headers);
    let traceparent = headers
        .get("traceparent")
        .expect("a traceparent")
        .to_string();
    assert_eq!(traceparent, format!("00-{trace_id}-{request_id}-01"));
    js.publish_with_headers(first.clone(), headers, "hello".into())
        .await
        .unwrap()
        .await
        .expect("the stream takes the request");
    drop(request);

    let one = handler_span("trace_cross_first", &first).await;
    let two = handler_span("trace_cross_second", &second).await;
    assert_eq!(
        one.span_context.trace_id(),
        trace_id,
        "first handler: same trace"
    );
    assert_eq!(
        one.parent_span_id, request_id,
        "first handler: child of the request"
    );
    assert!(
        one.parent_span_is_remote,
        "its parent came from the message's headers"
    );
    assert_eq!(
        two.span_context.trace_id(),
        trace_id,
        "second handler: same trace"
    );
    assert_eq!(
        two.parent_span_id,
        one.span_context.span_id(),
        "second handler: child of the first"
    );

    // The message between the two handlers carries the first handler's span.
    let stream = js.get_stream("TRACE_CROSS_CHAIN").await.unwrap();
    let onward = stream
        .get_last_raw_message_by_subject(&second)
        .await
        .unwrap();
    let carried = onward
        .headers
        .get("traceparent")
        .expect("Context::publish injects");
    assert_eq!(
        carried.as_str(),
        format!("00-{trace_id}-{}-01", one.span_context.span_id())
    );
    running.stop().await.expect("clean drain");
}

/// A message without a `traceparent`: the first handler's span starts a trace of its own (no
/// parent), and the second handler continues it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trace_starts_afresh_without_a_valid_traceparent() {
    exporter();
    let fx = Fixture::start().await;
    let (topology, first, second) = chain("trace_fresh");
    let running = fx.run(topology).await;
    let js = fx.jetstream().await;

    js.publish(first.clone(), "no headers".into())
        .await
        .unwrap()
        .await
        .expect("the stream takes it");
    let one = handler_span("trace_fresh_first", &first).await;
    let two = handler_span("trace_fresh_second", &second).await;
    assert_eq!(
        one.parent_span_id,
        SpanId::INVALID,
        "no header: a root span"
    );
    assert_ne!(one.span_context.trace_id(), TraceId::INVALID);
    assert_eq!(two.span_context.trace_id(), one.span_context.trace_id());
    assert_eq!(two.parent_span_id, one.span_context.span_id());

    running.stop().await.expect("clean drain");
}

/// A malformed `traceparent` is ignored: the first handler's span starts a trace of its own
/// (no parent, not the garbage's), and the second handler continues it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trace_starts_afresh_with_a_malformed_traceparent() {
    exporter();
    let fx = Fixture::start().await;
    let (topology, first, second) = chain("trace_bad");
    let running = fx.run(topology).await;
    let js = fx.jetstream().await;

    let mut headers = HeaderMap::new();
    headers.insert("traceparent", "00-not-a-trace-01");
    js.publish_with_headers(first.clone(), headers, "bad header".into())
        .await
        .unwrap()
        .await
        .expect("the stream takes it");
    let one = handler_span("trace_bad_first", &first).await;
    let two = handler_span("trace_bad_second", &second).await;
    assert_eq!(
        one.parent_span_id,
        SpanId::INVALID,
        "malformed: a root span"
    );
    assert_ne!(one.span_context.trace_id(), TraceId::INVALID);
    assert_eq!(two.span_context.trace_id(), one.span_context.trace_id());
    assert_eq!(two.parent_span_id, one.span_context.span_id());
    running.stop().await.expect("clean drain");
}
