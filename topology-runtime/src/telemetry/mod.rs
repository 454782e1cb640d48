//! Telemetry: metrics through the [`metrics`](https://docs.rs/metrics) facade, and (feature
//! `otel`) W3C trace context carried across messages.
//!
//! - `metrics`: per consumer counters, the handler-duration histogram, the in-flight gauge
//!   and the lag gauges read from the server. Always compiled: the facade is a few atomics,
//!   and without an installed recorder every update is a no-op. The names are in
//!   [`names`]; `docs/METRICS.md` is the table.
//! - `serving`: per endpoint requests, errors by code and latency; per core subscription
//!   handled and failed messages.
//! - `trace` (feature `otel`): `Context::publish` injects `traceparent`/`tracestate` from the
//!   current span; each message's span continues the trace found in its headers.
//!   Without the feature, the same hooks compile to nothing.

mod metrics;
mod serving;
#[cfg(feature = "otel")]
mod trace;

pub(crate) use metrics::{
    ConsumerMetrics, LagGauges, Running, consumer_label, partitions_held, permission_violation,
    stream_writes,
};
pub use metrics::{describe, names};
pub(crate) use serving::{EndpointMetrics, SubscriptionMetrics};
#[cfg(feature = "otel")]
pub(crate) use trace::{continue_trace, inject_current};
#[cfg(feature = "otel")]
pub use trace::{extract_context, inject_context};

/// Without the `otel` feature there is no trace context to carry: the hooks do nothing.
#[cfg(not(feature = "otel"))]
pub(crate) fn inject_current(_headers: &mut async_nats::HeaderMap) {}

/// Without the `otel` feature there is no trace context to carry: the hooks do nothing.
#[cfg(not(feature = "otel"))]
pub(crate) fn continue_trace(_span: &tracing::Span, _headers: Option<&async_nats::HeaderMap>) {}
