//! One message, from fetched to settled, top to bottom: read its delivery metadata once, run
//! the handler (which decodes the payload) with progress acks while it runs and a panic
//! caught as a failure, then settle it exactly once: ack; nak with a delay; or publish a dead
//! letter and terminate.

use std::panic::AssertUnwindSafe;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, AckKind};
use futures::FutureExt;
use tracing::Instrument;

use super::ack::{AckDeadline, Acks};
use super::resume::Settled;
use crate::handler::{Context, HandlerError, Incoming, Scope};
use crate::health::Slot;
use crate::registry::SharedHandler;
use crate::retry::{Failed, RetryPolicy};
use crate::telemetry::{self, ConsumerMetrics};

/// What dispatching needs to settle a consumer's messages.
pub(super) struct Settle {
    pub(super) handler: SharedHandler,
    pub(super) scope: Arc<Scope>,
    pub(super) slot: Arc<Slot>,
    /// The consumer's redelivery limit (`None`: unlimited).
    pub(super) max_deliver: Option<u64>,
    /// The declared backoff, applied by naks (never sent to the server).
    pub(super) backoff: Vec<Duration>,
    /// The redelivery delay when no backoff is declared.
    pub(super) redelivery: RetryPolicy,
    pub(super) dead_letter: Option<&'static str>,
    /// How publishing a dead letter is retried, and how often at most.
    pub(super) dead_letter_retry: RetryPolicy,
    pub(super) dead_letter_attempts: u32,
    /// Where handlers stopped before they finished record their message (see [`Unsettled`]).
    pub(super) abandoned: Abandoned,
    /// Telemetry: counters, duration, in flight (the `metrics` facade).
    pub(super) metrics: ConsumerMetrics,
    /// How acks, terms and progress acks are sent.
    pub(super) acks: Acks,
    /// A queue consumer's record of what it settled, for a re-created consumer's start
    /// (`None` for a relay, whose handlers record their progress themselves).
    pub(super) settled: Option<Arc<Settled>>,
}

/// The reply subjects of messages whose handler was stopped before it finished (a drain's
/// grace period ran out): nothing settled them, so the drain naks them.
pub(super) type Abandoned = Arc<std::sync::Mutex<Vec<async_nats::Subject>>>;

/// A message's delivery metadata, read once from its reply subject.
#[derive(Clone, Copy)]
struct Delivery {
    /// This delivery's number (1 for the first).
    delivered: u64,
    /// The message's stream sequence (`None` if the reply subject could not be read).
    stream_sequence: Option<u64>,
}

impl Delivery {
    fn of(message: &jetstream::Message) -> Self {
        match message.info() {
            Ok(info) => Delivery {
                delivered: u64::try_from(info.delivered).unwrap_or(1),
                stream_sequence: Some(info.stream_sequence),
            },
            Err(_) => Delivery {
                delivered: 1,
                stream_sequence: None,
            },
        }
    }
}

/// Runs the handler on one message and settles it: ack, nak with a delay, or dead-letter
/// and terminate. Every message ends in exactly one of the three.
pub(super) async fn dispatch(
    message: jetstream::Message,
    mut deadline: AckDeadline,
    settle: Arc<Settle>,
) {
    let delivery = Delivery::of(&message);
    let span = tracing::info_span!(
        "message",
        stream = %settle.scope.stream,
        consumer = %settle.scope.consumer,
        subject = %message.subject,
        sequence = delivery.stream_sequence.unwrap_or(0),
        delivered = delivery.delivered,
    );
    telemetry::continue_trace(&span, message.headers.as_ref()); // telemetry hook (otel)
    async move {
        let mut unsettled = Unsettled {
            reply: message.reply.clone(),
            abandoned: settle.abandoned.clone(),
        };
        let running = settle.metrics.start(delivery.delivered); // telemetry hook
        let outcome = run_handler(&message, &settle, delivery, &mut deadline).await;
        drop(running); // telemetry hook
        unsettled.handled();
        match outcome {
            Ok(()) => acknowledge(&message, &settle, delivery, deadline).await,
            Err(error) => fail(&message, &settle, delivery, &error, deadline).await,
        }
    }
    .instrument(span)
    .await
}

/// Calls the handler (it decodes the payload), sending progress acks while it runs; a panic
/// is a failure.
async fn run_handler(
    message: &jetstream::Message,
    settle: &Settle,
    delivery: Delivery,
    deadline: &mut AckDeadline,
) -> Result<(), HandlerError> {
    let incoming = Incoming {
        payload: message.payload.clone(),
        context: Context {
            subject: message.subject.clone(),
            headers: message.headers.clone(),
            delivered: delivery.delivered,
            stream_sequence: delivery.stream_sequence.unwrap_or(0),
            scope: settle.scope.clone(),
            publishes: Default::default(),
        },
    };
    let handler = &settle.handler;
    let outcome = match std::panic::catch_unwind(AssertUnwindSafe(|| handler(incoming))) {
        Ok(future) => {
            let mut future = pin!(AssertUnwindSafe(future).catch_unwind());
            // Most handlers finish without waiting: no timer for them.
            match future.as_mut().now_or_never() {
                Some(outcome) => outcome,
                None => loop {
                    tokio::select! {
                        r = &mut future => break r,
                        _ = tokio::time::sleep_until(settle.acks.next_progress(*deadline)) => {
                            settle.acks.keep_alive(message, deadline).await;
                        }
                    }
                },
            }
        }
        Err(panic) => Err(panic),
    };
    outcome.unwrap_or_else(|panic| {
        Err(HandlerError::new(format!(
            "the handler panicked: {}",
            panic_message(&panic)
        )))
    })
}

/// Acknowledges a handled message; it counts as handled once the ack is sent, or, with
/// confirmed acks, once the server has confirmed it.
async fn acknowledge(
    message: &jetstream::Message,
    settle: &Settle,
    delivery: Delivery,
    deadline: AckDeadline,
) {
    match settle.acks.settle(message, AckKind::Ack, deadline).await {
        Ok(()) => {
            settle.record_settled(delivery);
            Slot::count(&settle.slot.handled);
            settle.metrics.handled(); // telemetry hook
        }
        Err(e) => {
            settle.metrics.ack_failed(); // telemetry hook
            tracing::warn!(
                stream = %settle.scope.stream,
                consumer = %settle.scope.consumer,
                subject = %message.subject,
                error = %e,
                "could not acknowledge a handled message; the server redelivers it after ack_wait"
            )
        }
    }
}

impl Settle {
    fn record_settled(&self, delivery: Delivery) {
        if let (Some(settled), Some(sequence)) = (&self.settled, delivery.stream_sequence) {
            settled.record(sequence);
        }
    }
}

/// A failed handler: its last allowed delivery, or a permanent error, is dead-lettered and
/// terminated; otherwise the message is naked with a delay from the backoff.
async fn fail(
    message: &jetstream::Message,
    settle: &Settle,
    delivery: Delivery,
    error: &HandlerError,
    deadline: AckDeadline,
) {
    Slot::count(&settle.slot.failed);
    settle.metrics.failed(); // telemetry hook
    let last = settle
        .max_deliver
        .is_some_and(|max| delivery.delivered >= max);
    if error.is_permanent() || last {
        terminate(message, settle, (delivery, deadline), last, error).await;
        return;
    }
    let delay = redelivery_delay(&settle.backoff, &settle.redelivery, delivery.delivered);
    tracing::debug!(subject = %message.subject, delivered = delivery.delivered, ?delay, %error, "handler failed; redelivering later");
    match message.ack_with(AckKind::Nak(Some(delay))).await {
        Ok(()) => {
            Slot::count(&settle.slot.retried);
            settle.metrics.retried(); // telemetry hook
        }
        Err(e) => {
            tracing::warn!(error = %e, "could not nak a failed message; it is redelivered after ack_wait")
        }
    }
}

/// Publishes the message to the dead-letter subject (if declared), then terminates it. If the
/// dead letter cannot be published, the message is naked instead: nothing is lost.
async fn terminate(
    message: &jetstream::Message,
    settle: &Settle,
    (delivery, deadline): (Delivery, AckDeadline),
    last: bool,
    error: &HandlerError,
) {
    if let Some(subject) = settle.dead_letter
        && let Err(failed) = publish_dead_letter(message, settle, subject, delivery, error).await
    {
        let (attempts, e) = (failed.attempts, failed.error);
        if last {
            tracing::error!(
                dead_letter = subject,
                stream = %settle.scope.stream,
                consumer = %settle.scope.consumer,
                error = %e,
                "could not publish a dead letter after {attempts} attempts; this was the last \
                 delivery, so the message stays unacknowledged in the stream (the server emits a \
                 MAX_DELIVERIES advisory): check that a stream captures the dead-letter subject"
            );
        } else {
            tracing::error!(dead_letter = subject, error = %e, "could not publish a dead letter; the message is redelivered instead");
            let nak = AckKind::Nak(Some(settle.dead_letter_retry.cap));
            let _ = message.ack_with(nak).await;
        }
        return;
    }
    tracing::warn!(subject = %message.subject, stream = %settle.scope.stream, consumer = %settle.scope.consumer, delivered = delivery.delivered, %error, "message terminated");
    match settle.acks.settle(message, AckKind::Term, deadline).await {
        Ok(()) => {
            settle.record_settled(delivery);
            Slot::count(&settle.slot.dead_lettered);
            settle.metrics.dead_lettered(); // telemetry hook
        }
        Err(e) => {
            settle.metrics.ack_failed(); // telemetry hook
            tracing::warn!(error = %e, "could not terminate a message; the server redelivers it after ack_wait")
        }
    }
}

/// Publishes the message, with headers saying where it came from and why it failed, to
/// `subject`, and waits for the stream's ack. A failed publish is retried under the
/// dead-letter policy while the message is held with progress acks: on its last delivery a
/// nak would not bring it back.
async fn publish_dead_letter(
    message: &jetstream::Message,
    settle: &Settle,
    subject: &'static str,
    delivery: Delivery,
    error: &HandlerError,
) -> Result<(), Failed<async_nats::jetstream::context::PublishError>> {
    let mut headers = message.headers.clone().unwrap_or_default();
    headers.insert("Nats-Topology-Subject", message.subject.as_str());
    headers.insert("Nats-Topology-Stream", settle.scope.stream.as_str());
    headers.insert("Nats-Topology-Consumer", settle.scope.consumer.as_str());
    if let Some(sequence) = delivery.stream_sequence {
        headers.insert("Nats-Topology-Sequence", sequence.to_string().as_str());
        // A dead letter published again (its term lost, or its publish retried after a reply
        // that timed out) is dropped by the target stream's duplicate window. Position 0: no
        // handler publish has it.
        if headers.get(async_nats::header::NATS_MESSAGE_ID).is_none() {
            let id = crate::handler::msg_id(&settle.scope, sequence, 0);
            headers.insert(async_nats::header::NATS_MESSAGE_ID, id.as_str());
        }
    }
    let delivered = delivery.delivered.to_string();
    headers.insert("Nats-Topology-Delivered", delivered.as_str());
    let error = error.to_string().replace(['\r', '\n'], " ");
    headers.insert("Nats-Topology-Error", error.as_str());
    let publish = || async {
        let js = &settle.scope.jetstream;
        let published = async {
            js.publish_with_headers(subject, headers.clone(), message.payload.clone())
                .await?
                .await
        }
        .await;
        if published.is_err() {
            // Keep holding the message while the next attempt waits.
            let _ = message.ack_with(AckKind::Progress).await;
        }
        published
    };
    settle
        .dead_letter_retry
        .backoff()
        .max_attempts(settle.dead_letter_attempts)
        .run(publish, |_| true)
        .await
        .map(|_| ())
}

/// The delay before redelivery: the declared backoff for this attempt (the last entry
/// repeats), or full jitter over the `redelivery` policy's doubling window when none is
/// declared.
fn redelivery_delay(backoff: &[Duration], redelivery: &RetryPolicy, delivered: u64) -> Duration {
    let attempt = delivered.saturating_sub(1);
    match backoff {
        [] => redelivery.delay(u32::try_from(attempt).unwrap_or(u32::MAX)),
        delays => {
            delays[usize::try_from(attempt)
                .unwrap_or(usize::MAX)
                .min(delays.len() - 1)]
        }
    }
}

/// Records its message as abandoned if dropped before [`Unsettled::handled`]: a handler task
/// aborted, or an inline handler dropped, at the end of a drain's grace period. Once the
/// handler has returned, settling is under way (ack, nak or dead letter and term), and a
/// drop no longer records anything: a message is never settled twice.
struct Unsettled {
    reply: Option<async_nats::Subject>,
    abandoned: Abandoned,
}

impl Unsettled {
    fn handled(&mut self) {
        self.reply = None;
    }
}

impl Drop for Unsettled {
    fn drop(&mut self) {
        if let Some(reply) = self.reply.take() {
            self.abandoned
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(reply);
        }
    }
}

pub(super) fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redelivery_follows_the_declared_backoff_then_repeats_its_last_step() {
        let backoff = [Duration::from_secs(1), Duration::from_secs(10)];
        let policy = RetryPolicy::default();
        assert_eq!(
            redelivery_delay(&backoff, &policy, 1),
            Duration::from_secs(1)
        );
        assert_eq!(
            redelivery_delay(&backoff, &policy, 2),
            Duration::from_secs(10)
        );
        assert_eq!(
            redelivery_delay(&backoff, &policy, 9),
            Duration::from_secs(10)
        );
    }

    #[test]
    fn without_a_backoff_redelivery_waits_within_the_policy_window() {
        let policy = RetryPolicy {
            base: Duration::from_millis(100),
            cap: Duration::from_secs(30),
            ..RetryPolicy::default()
        };
        for delivered in [1, 2, 5, 40, u64::MAX] {
            let attempt = u32::try_from(delivered - 1).unwrap_or(u32::MAX);
            assert!(redelivery_delay(&[], &policy, delivered) <= policy.window(attempt));
        }
    }
}
