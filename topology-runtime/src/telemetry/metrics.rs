//! Metrics through the `metrics` facade: no exporter is chosen here; the application installs
//! the recorder it wants (Prometheus, StatsD, OpenTelemetry...) before it runs the runtime.
//!
//! Handles are registered once per consumer session, so a message costs a few atomic
//! updates on the recorder's handles (nothing at all without a recorder), never a key lookup.

use tokio::time::Instant;

use metrics::{Counter, Gauge, Histogram, Unit};
use topology_core::model::{ConsumerDecl, ConsumerKind};

/// The metric names, as the recorder sees them (Prometheus conventions: `snake_case`, a
/// `nats_topology_` prefix, the unit as a suffix, `_total` on counters). A consumer's metrics
/// have the labels `stream` and `consumer`; an endpoint's `service` and `endpoint`; a core
/// subscription's `subject`; see `docs/METRICS.md`.
pub mod names {
    /// Counter: messages whose handler returned `Ok` and that were acknowledged.
    pub const HANDLED: &str = "nats_topology_messages_handled_total";
    /// Counter: handler failures (an error, a panic, or a payload that could not be decoded).
    pub const FAILED: &str = "nats_topology_messages_failed_total";
    /// Counter: failed messages negatively acknowledged for redelivery after a delay.
    pub const RETRIED: &str = "nats_topology_messages_retried_total";
    /// Counter: messages terminated after their last allowed delivery or a permanent error
    /// (published to the dead-letter subject first when one is declared).
    pub const DEAD_LETTERED: &str = "nats_topology_messages_dead_lettered_total";
    /// Counter: of the messages handled, those a partition ran before the server delivered
    /// them (docs/PARTITIONS.md, "Running ahead").
    pub const EARLY: &str = "nats_topology_messages_early_total";
    /// Counter: deliveries after the first one (the server's delivery count above 1).
    pub const REDELIVERED: &str = "nats_topology_messages_redelivered_total";
    /// Counter: settlements that end a message (the ack of a handled one, the term of a
    /// dead-lettered one) that could not be sent, or with confirmed acks were not confirmed
    /// (the consumer or its stream gone, no confirmation within `ack_wait`). While the
    /// consumer exists, the server redelivers those messages after `ack_wait`: a handled
    /// message counted here may be handled again.
    pub const ACKS_FAILED: &str = "nats_topology_acks_failed_total";
    /// Counter: times a consumer's feed heard nothing from the server for two idle
    /// heartbeats while it should have (a stalled link, a partition, a consumer leader lost),
    /// and its state turned `stalled`.
    pub const STALLS: &str = "nats_topology_consumer_stalls_total";
    /// Counter: times a queue consumer's handlers failed so often that it stopped taking
    /// messages (state `backing off`: what they depend on seems down) until one succeeded.
    pub const BACKOFFS: &str = "nats_topology_consumer_backoffs_total";
    /// Counter: permission violations the server reported on the runtime's connection,
    /// labelled `stream` and `consumer` of the declaration that needs the denied subject
    /// (both empty for what every replica needs), and `action` (`publish` or `subscribe`).
    pub const PERMISSION_VIOLATIONS: &str = "nats_topology_permission_violations_total";
    /// Histogram: how long a handler ran (decoding included), in seconds.
    pub const HANDLER_DURATION: &str = "nats_topology_handler_duration_seconds";
    /// Gauge: handlers running now in this instance.
    pub const IN_FLIGHT: &str = "nats_topology_handlers_in_flight";
    /// Gauge: messages of the consumer's stream not yet delivered, as the server reports it.
    pub const PENDING: &str = "nats_topology_consumer_pending_messages";
    /// Gauge: messages delivered and not yet acknowledged, as the server reports it.
    pub const ACK_PENDING: &str = "nats_topology_consumer_ack_pending_messages";
    /// Counter: requests an endpoint answered (errors included); labels `service`, `endpoint`.
    pub const REQUESTS: &str = "nats_topology_requests_total";
    /// Counter: requests answered with an error; labels `service`, `endpoint` and `code` (the
    /// `Nats-Service-Error-Code` sent: the handler's, 400 for a request that did not decode,
    /// 500 for a panic, 503 for a drain that ran out of time, 504 for a timeout).
    pub const REQUEST_ERRORS: &str = "nats_topology_request_errors_total";
    /// Histogram: from a request's arrival to its answer, in seconds; labels `service`,
    /// `endpoint`.
    pub const REQUEST_DURATION: &str = "nats_topology_request_duration_seconds";
    /// Counter: core subscription messages whose handler returned `Ok`; label `subject`.
    pub const SUBSCRIPTION_HANDLED: &str = "nats_topology_subscription_messages_handled_total";
    /// Counter: core subscription messages whose handler failed (an error, a panic, a payload
    /// that did not decode); label `subject`.
    pub const SUBSCRIPTION_FAILED: &str = "nats_topology_subscription_messages_failed_total";
    /// Gauge: 1 while a declared stream takes writes (a leader that reaches a quorum of its
    /// replicas), 0 while it does not (no leader, no quorum, no answer to its info); label
    /// `stream`. Set at every read (every two heartbeats).
    pub const STREAM_WRITABLE: &str = "nats_topology_stream_writable";
    /// Counter: times a declared stream was found taking no writes; label `stream`.
    pub const STREAM_UNWRITABLE: &str = "nats_topology_stream_unwritable_total";
    /// Gauge: how many partitions of a partitioned group this replica holds; labels
    /// `stream`, `group` (the group as declared). Each partition's own metrics carry
    /// `consumer = <group>-p<n>`: its lag is that consumer's pending messages.
    pub const PARTITIONS_HELD: &str = "nats_topology_partitions_held";
    /// Counter: times this replica's share of a partitioned group changed (it took or
    /// released partitions); labels `stream`, `group`.
    pub const PARTITION_REBALANCES: &str = "nats_topology_partition_rebalances_total";
}

/// Describes every metric (help text and unit) to the installed recorder.
///
/// The runtime calls it when a consumer starts; call it yourself to have the descriptions
/// before the first consumer runs (an exporter prints them as `# HELP` lines).
///
/// ```
/// nats_topology::telemetry::describe(); // a no-op without a recorder
/// ```
pub fn describe() {
    use names::*;
    metrics::describe_counter!(HANDLED, Unit::Count, "Messages handled and acknowledged.");
    metrics::describe_counter!(
        FAILED,
        Unit::Count,
        "Handler failures: errors, panics and undecodable payloads."
    );
    metrics::describe_counter!(
        RETRIED,
        Unit::Count,
        "Failed messages negatively acknowledged for redelivery."
    );
    metrics::describe_counter!(
        DEAD_LETTERED,
        Unit::Count,
        "Messages terminated (dead-lettered when a dead-letter subject is declared)."
    );
    metrics::describe_counter!(
        EARLY,
        Unit::Count,
        "Of the messages handled, those a partition ran before their delivery."
    );
    metrics::describe_counter!(
        REDELIVERED,
        Unit::Count,
        "Deliveries after the first, from the server's delivery count."
    );
    metrics::describe_counter!(
        ACKS_FAILED,
        Unit::Count,
        "Acks and terms not sent, or not confirmed: those messages are redelivered."
    );
    metrics::describe_counter!(
        STALLS,
        Unit::Count,
        "Times a consumer heard nothing from the server for two heartbeats (stalled)."
    );
    metrics::describe_counter!(
        BACKOFFS,
        Unit::Count,
        "Times a consumer stopped taking messages because its handlers kept failing."
    );
    metrics::describe_counter!(
        PERMISSION_VIOLATIONS,
        Unit::Count,
        "Permission violations the server reported, by the declaration that needs the subject."
    );
    metrics::describe_histogram!(
        HANDLER_DURATION,
        Unit::Seconds,
        "How long handlers ran, decoding included."
    );
    metrics::describe_gauge!(IN_FLIGHT, Unit::Count, "Handlers running now.");
    metrics::describe_gauge!(
        PENDING,
        Unit::Count,
        "Messages not yet delivered to the consumer, read from the server."
    );
    metrics::describe_gauge!(
        ACK_PENDING,
        Unit::Count,
        "Messages delivered and not yet acknowledged, read from the server."
    );
    metrics::describe_counter!(
        REQUESTS,
        Unit::Count,
        "Requests an endpoint answered, errors included."
    );
    metrics::describe_counter!(
        REQUEST_ERRORS,
        Unit::Count,
        "Requests answered with an error, by the error code sent."
    );
    metrics::describe_histogram!(
        REQUEST_DURATION,
        Unit::Seconds,
        "From a request's arrival to its answer."
    );
    metrics::describe_counter!(
        SUBSCRIPTION_HANDLED,
        Unit::Count,
        "Core subscription messages handled."
    );
    metrics::describe_counter!(
        SUBSCRIPTION_FAILED,
        Unit::Count,
        "Core subscription messages whose handler failed."
    );
    metrics::describe_gauge!(
        STREAM_WRITABLE,
        Unit::Count,
        "1 while the stream takes writes (a leader with a quorum), 0 while it does not."
    );
    metrics::describe_counter!(
        STREAM_UNWRITABLE,
        Unit::Count,
        "Times the stream was found taking no writes."
    );
    metrics::describe_gauge!(
        PARTITIONS_HELD,
        Unit::Count,
        "Partitions of the partitioned group this replica holds."
    );
    metrics::describe_counter!(
        PARTITION_REBALANCES,
        Unit::Count,
        "Times this replica's share of the partitioned group changed."
    );
}

/// Records that this replica holds `held` partitions of `group` on `stream`; `changed`: its
/// share just changed (a rebalance, counted).
pub(crate) fn partitions_held(stream: &str, group: &str, held: usize, changed: bool) {
    let labels = [("stream", stream.to_owned()), ("group", group.to_owned())];
    metrics::gauge!(names::PARTITIONS_HELD, &labels).set(held as f64);
    if changed {
        metrics::counter!(names::PARTITION_REBALANCES, &labels).increment(1);
    }
}

/// Records whether `stream` takes writes, as a read of it said; `changed`: it said
/// otherwise before (a stream found taking no writes is counted).
pub(crate) fn stream_writes(stream: &str, taken: bool, changed: bool) {
    metrics::gauge!(names::STREAM_WRITABLE, "stream" => stream.to_owned()).set(if taken {
        1.0
    } else {
        0.0
    });
    if changed && !taken {
        metrics::counter!(names::STREAM_UNWRITABLE, "stream" => stream.to_owned()).increment(1);
    }
}

/// Counts one permission violation of the declaration labelled `stream` and `consumer`.
pub(crate) fn permission_violation(stream: &str, consumer: &str, action: &'static str) {
    describe();
    metrics::counter!(
        names::PERMISSION_VIOLATIONS,
        "stream" => stream.to_owned(),
        "consumer" => consumer.to_owned(),
        "action" => action
    )
    .increment(1);
}

/// The `consumer` label of a declaration: the durable name of a queue consumer; the handler
/// of a broadcast (its relay's server name is new in every process: as a label it would
/// start a new series at every restart).
pub(crate) fn consumer_label(decl: &ConsumerDecl) -> &'static str {
    match &decl.kind {
        ConsumerKind::Queue(queue) => queue.group,
        ConsumerKind::Broadcast(_) => decl.handler,
    }
}

fn labels(stream: &str, consumer: &str) -> [(&'static str, String); 2] {
    [
        ("stream", stream.to_owned()),
        ("consumer", consumer.to_owned()),
    ]
}

/// One consumer's message metrics, registered with the recorder installed when it was made.
pub(crate) struct ConsumerMetrics {
    handled: Counter,
    failed: Counter,
    retried: Counter,
    dead_lettered: Counter,
    early: Counter,
    redelivered: Counter,
    acks_failed: Counter,
    /// Shared with the consumer's feed, which counts its stalls.
    pub(crate) stalls: Counter,
    backoffs: Counter,
    duration: Histogram,
    in_flight: Gauge,
}

impl ConsumerMetrics {
    pub(crate) fn new(stream: &str, consumer: &str) -> Self {
        describe();
        let labels = labels(stream, consumer);
        ConsumerMetrics {
            handled: metrics::counter!(names::HANDLED, &labels),
            failed: metrics::counter!(names::FAILED, &labels),
            retried: metrics::counter!(names::RETRIED, &labels),
            dead_lettered: metrics::counter!(names::DEAD_LETTERED, &labels),
            early: metrics::counter!(names::EARLY, &labels),
            redelivered: metrics::counter!(names::REDELIVERED, &labels),
            acks_failed: metrics::counter!(names::ACKS_FAILED, &labels),
            stalls: metrics::counter!(names::STALLS, &labels),
            backoffs: metrics::counter!(names::BACKOFFS, &labels),
            duration: metrics::histogram!(names::HANDLER_DURATION, &labels),
            in_flight: metrics::gauge!(names::IN_FLIGHT, &labels),
        }
    }

    /// A handler starts on its `delivered`-th delivery: counts a redelivery, and the handler
    /// as in flight until the returned guard is dropped, which records its duration.
    pub(crate) fn start(&self, delivered: u64) -> Running<'_> {
        if delivered > 1 {
            self.redelivered.increment(1);
        }
        self.in_flight.increment(1.0);
        Running {
            metrics: self,
            started: Instant::now(),
        }
    }

    pub(crate) fn handled(&self) {
        self.handled.increment(1);
    }

    pub(crate) fn failed(&self) {
        self.failed.increment(1);
    }

    pub(crate) fn retried(&self) {
        self.retried.increment(1);
    }

    /// Its breaker opened: the handlers' dependency seems down.
    pub(crate) fn backed_off(&self) {
        self.backoffs.increment(1);
    }

    /// A partition's message handled before its delivery was acknowledged on delivery.
    pub(crate) fn early(&self) {
        self.early.increment(1);
    }

    pub(crate) fn dead_lettered(&self) {
        self.dead_lettered.increment(1);
    }

    pub(crate) fn ack_failed(&self) {
        self.acks_failed.increment(1);
    }
}

/// A running handler (see [`ConsumerMetrics::start`]). Dropped when the handler returned, or
/// when it was stopped at the end of a drain's grace period.
pub(crate) struct Running<'a> {
    metrics: &'a ConsumerMetrics,
    started: Instant,
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.metrics.duration.record(self.started.elapsed());
        self.metrics.in_flight.decrement(1.0);
    }
}

/// A queue consumer's lag, as the server reports it in the consumer's info.
pub(crate) struct LagGauges {
    pending: Gauge,
    ack_pending: Gauge,
}

impl LagGauges {
    pub(crate) fn new(stream: &str, consumer: &str) -> Self {
        let labels = labels(stream, consumer);
        LagGauges {
            pending: metrics::gauge!(names::PENDING, &labels),
            ack_pending: metrics::gauge!(names::ACK_PENDING, &labels),
        }
    }

    /// Sets both gauges from a consumer info read from the server.
    pub(crate) fn set(&self, info: &async_nats::jetstream::consumer::Info) {
        // Counts far below 2^53: exact as f64.
        self.pending.set(info.num_pending as f64);
        self.ack_pending.set(info.num_ack_pending as f64);
    }
}
