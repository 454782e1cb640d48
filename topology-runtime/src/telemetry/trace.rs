//! W3C trace context across NATS messages (feature `otel`): `traceparent` and `tracestate`
//! headers, written from the current `tracing` span on publish and read back into the span of
//! the handler that receives the message.
//!
//! The spans are `tracing` spans; their OpenTelemetry identity comes from the
//! `tracing-opentelemetry` layer the application installs in its subscriber. Without that
//! layer there is no trace context: nothing is injected and incoming headers are ignored.
//! The W3C propagator is used directly (not the global one, which is a no-op until an
//! application sets it), so the headers are always the standard ones.

use async_nats::HeaderMap;
use async_nats::header::HeaderValue;
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::TraceContextExt;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// Writes the trace context of `context` into `headers` (`traceparent`, and `tracestate` when
/// it is not empty). Nothing is written for a context without a valid span.
///
/// [`Context::publish`](crate::Context::publish) does this with the current span; use it
/// when publishing from outside a handler, so that the handlers the message reaches continue
/// the caller's trace.
///
/// ```
/// use nats_topology::async_nats::HeaderMap;
/// use tracing_opentelemetry::OpenTelemetrySpanExt;
///
/// let span = tracing::info_span!("request");
/// let mut headers = HeaderMap::new();
/// nats_topology::telemetry::inject_context(&span.context(), &mut headers);
/// // Without a `tracing-opentelemetry` layer, the span has no trace context:
/// assert!(headers.get("traceparent").is_none());
/// ```
pub fn inject_context(context: &opentelemetry::Context, headers: &mut HeaderMap) {
    if !context.span().span_context().is_valid() {
        return;
    }
    TraceContextPropagator::new().inject_context(context, &mut Carrier(headers));
}

/// Reads the trace context of a message's headers. An absent or malformed `traceparent`
/// gives a context without a remote span (a handler's span then starts a new trace).
///
/// ```
/// use nats_topology::async_nats::HeaderMap;
/// use opentelemetry::trace::TraceContextExt;
///
/// let mut headers = HeaderMap::new();
/// headers.insert("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
/// let context = nats_topology::telemetry::extract_context(&headers);
/// assert_eq!(
///     context.span().span_context().trace_id().to_string(),
///     "4bf92f3577b34da6a3ce929d0e0e4736"
/// );
/// ```
pub fn extract_context(headers: &HeaderMap) -> opentelemetry::Context {
    TraceContextPropagator::new().extract(&ReadCarrier(headers))
}

/// Injects the current span's trace context (the hook in `Context::publish`).
pub(crate) fn inject_current(headers: &mut HeaderMap) {
    inject_context(&tracing::Span::current().context(), headers);
}

/// Makes `span` (a message's span, not entered yet) continue the trace found in `headers`.
/// A message without a valid `traceparent` keeps the span's own parent.
pub(crate) fn continue_trace(span: &tracing::Span, headers: Option<&HeaderMap>) {
    let Some(headers) = headers else { return };
    let parent = extract_context(headers);
    if parent.span().span_context().is_valid() {
        // Fails only without a `tracing-opentelemetry` layer: nothing to continue then.
        let _ = span.set_parent(parent);
    }
}

struct Carrier<'a>(&'a mut HeaderMap);

impl Injector for Carrier<'_> {
    fn set(&mut self, key: &str, value: String) {
        self.0.insert(key, value.as_str());
    }
}

struct ReadCarrier<'a>(&'a HeaderMap);

impl Extractor for ReadCarrier<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(HeaderValue::as_str)
    }

    fn keys(&self) -> Vec<&str> {
        self.0.iter().map(|(name, _)| name.as_ref()).collect()
    }
}
