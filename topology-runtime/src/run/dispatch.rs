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
    /// Progress acks are sent at this interval while a handler runs.
    pub(super) progress_every: Duration,
    /// The consumer's `ack_wait` on the server.
    pub(super) ack_wait: Duration,
    /// Where handlers stopped before they finished record their message (see [`Unsettled`]).
    pub(super) abandoned: Abandoned,
    /// Telemetry: counters, duration, in flight (the `metrics` facade).
    pub(super) metrics: ConsumerMetrics,
    /// Confirmed acks (`ack = "confirmed"`): how; `None` for fire-and-forget.
    pub(super) confirm: Option<Confirm>,
    /// A queue consumer's record of what it settled, for a re-created consumer's start
    /// (`None` for a relay, whose handlers record their progress themselves).
    pub(super) settled: Option<Arc<Settled>>,
}

/// How a confirmed ack (or term) is sent: as a request whose reply is the server's
/// confirmation, through the client's shared reply subscription (async-nats's
/// `Message::double_ack` subscribes and unsubscribes an inbox for every ack, and waits for the
/// JetStream context's timeout, 5 s by default, once). A timed-out attempt is sent again: the
/// server acknowledges by stream sequence, so an ack of a message it has recorded already
/// changes nothing and is confirmed again (`processAckMsg`, nats-server `server/consumer.go`).
pub(super) struct Confirm {
    pub(super) client: async_nats::Client,
    /// The bound on one attempt (the runtime's request timeout).
    pub(super) attempt: Duration,
}

/// Until when a delivery surely has not been given to anyone else: its `ack_wait` counted
/// from no later than the server delivered it (see [`Fetched::delivered_after`]), pushed
/// further by each progress ack the server confirmed before it. A confirmation received
/// before it was applied while the server still held the message for this delivery, so
/// the message is never delivered again; one later could come after a redelivery (the
/// server applies an ack by stream sequence, whatever the delivery, and confirms it again
/// for the other instance), so it is not taken as confirmed.
///
/// [`Fetched::delivered_after`]: super::feed::Fetched::delivered_after
#[derive(Debug, Clone, Copy)]
pub(super) struct AckDeadline(pub(super) tokio::time::Instant);

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
                        _ = tokio::time::sleep_until(settle.next_progress(*deadline)) => {
                            keep_alive(message, settle, deadline).await;
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
    match settle_with(message, settle, AckKind::Ack, deadline).await {
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

    /// When the next progress ack is due for a handler that runs on: every `progress_every`,
    /// and with confirmed acks soon enough that it can be confirmed before `deadline`.
    fn next_progress(&self, deadline: AckDeadline) -> tokio::time::Instant {
        let every = tokio::time::Instant::now() + self.progress_every;
        match self.confirm {
            Some(_) => every.min(deadline.0 - self.progress_every.min(self.ack_wait / 2)),
            None => every,
        }
    }
}

/// Sends a progress ack, so that the server does not redeliver the message while it is held
/// here: fire-and-forget, or with confirmed acks as a request whose reply, received before
/// `deadline`, pushes the deadline to a whole `ack_wait` after it was sent (the server
/// restarted the message's `ack_wait` when it received it, no earlier than that).
pub(super) async fn keep_alive(
    message: &jetstream::Message,
    settle: &Settle,
    deadline: &mut AckDeadline,
) {
    let (Some(confirm), Some(reply)) = (&settle.confirm, message.reply.clone()) else {
        if let Err(e) = message.ack_with(AckKind::Progress).await {
            tracing::debug!(error = %e, "could not send a progress ack");
        }
        return;
    };
    let sent = tokio::time::Instant::now();
    let Some(left) = deadline.0.checked_duration_since(sent) else {
        // Too late to be confirmed in time: still ask the server to hold it.
        let _ = message.ack_with(AckKind::Progress).await;
        return;
    };
    let request = async_nats::Request::new()
        .payload(AckKind::Progress.into())
        .timeout(Some(confirm.attempt.min(left)));
    if confirm.client.send_request(reply, request).await.is_ok() {
        deadline.0 = deadline.0.max(sent + settle.ack_wait);
    }
}

/// Sends `kind` (an ack or a term: the settlements that end a message) fire-and-forget, or
/// with confirmed acks, as a request sent again until the server confirms it before
/// `deadline` (see [`AckDeadline`]).
async fn settle_with(
    message: &jetstream::Message,
    settle: &Settle,
    kind: AckKind,
    deadline: AckDeadline,
) -> Result<(), async_nats::Error> {
    let Some(confirm) = &settle.confirm else {
        return message.ack_with(kind).await;
    };
    let Some(reply) = message.reply.clone() else {
        return Err("the message has no reply subject: not a JetStream delivery".into());
    };
    let mut attempt = 0u32;
    loop {
        let Some(left) = deadline
            .0
            .checked_duration_since(tokio::time::Instant::now())
            .filter(|left| !left.is_zero())
        else {
            return Err(format!(
                "not confirmed after {attempt} attempts, before the consumer's ack_wait ({:?}) \
                 could have run out: the server may deliver it again",
                settle.ack_wait
            )
            .into());
        };
        attempt += 1;
        let request = async_nats::Request::new()
            .payload(kind.into())
            .timeout(Some(confirm.attempt.min(left)));
        let error = match confirm.client.send_request(reply.clone(), request).await {
            Ok(_) => return Ok(()),
            Err(e) => e,
        };
        tracing::debug!(attempt, error = %error, "an ack was not confirmed; sending it again");
        if error.kind() != async_nats::RequestErrorKind::TimedOut {
            // Refused at once: no consumer leader takes acks now (an election, or the consumer
            // is gone), or the connection is being re-established. Pause before trying again.
            let pause = Duration::from_millis(50 * u64::from(attempt.min(20)));
            tokio::time::sleep(pause.min(left)).await;
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
    match settle_with(message, settle, AckKind::Term, deadline).await {
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
