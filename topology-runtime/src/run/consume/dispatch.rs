//! One message, from fetched to settled, top to bottom: read its delivery metadata once, run
//! the handler (which decodes the payload) with progress acks while it runs and a panic
//! caught as a failure, then settle it exactly once (ack; nak with a delay; or publish a dead
//! letter and terminate) and say how it ended ([`Outcome`]), which the session's observer
//! accounts for.

use std::panic::AssertUnwindSafe;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::AtomicU32;
use std::time::Duration;

use async_nats::jetstream::{self, AckKind};
use futures::FutureExt;
use tracing::Instrument;

use super::ack::{AckDeadline, Acks, Stopped};
use super::dead_letter::{DeadLetter, Delivery, publish_dead_letter};
use super::early::Early;
use super::meta::MessageMeta;
use super::outcome::{Observer, Outcome};
use crate::handler::{Context, HandlerError, Incoming, Received, Scope, panic_message};
use crate::outage::{Breaker, Change};
use crate::registry::SharedHandler;
use crate::retry::RetryPolicy;
use crate::telemetry;

/// What one session of a consumer needs to handle and settle its messages.
pub(in crate::run) struct Session {
    pub(in crate::run) handler: SharedHandler,
    pub(in crate::run) scope: Arc<Scope>,
    /// The consumer's redelivery limit (`None`: unlimited).
    pub(in crate::run) max_deliver: Option<u64>,
    /// The declared backoff, applied by naks (never sent to the server).
    pub(in crate::run) backoff: Vec<Duration>,
    /// The redelivery delay when no backoff is declared.
    pub(in crate::run) redelivery: RetryPolicy,
    /// Where a message that will not be handled goes, if declared.
    pub(in crate::run) dead_letter: Option<DeadLetter>,
    /// Where handlers stopped before they finished leave their message (see [`Unfinished`]).
    pub(in crate::run) stopped: Stopped,
    /// Accounts for each message as it starts and ends.
    pub(in crate::run) observer: Observer,
    /// How acks, terms and progress acks are sent.
    pub(in crate::run) acks: Acks,
    /// A `#[kv_watch]`: its handler sees each revision once, in order, so a delivery at or
    /// below the last revision it handled (its ack lost, the consumer's state restored from
    /// before it) is acknowledged again without calling the handler.
    pub(in crate::run) in_order: bool,
    /// An ordered replay's checks (`#[broadcast(ordered)]`, see `replay`).
    pub(in crate::run) replay: Option<super::replay::Replay>,
    /// A queue consumer's outage breaker (see `breaker`), shared by its sessions.
    pub(in crate::run) breaker: Option<Arc<Breaker>>,
    /// A partition's: how it reads its next message before the server delivers it (see
    /// `early`).
    pub(in crate::run) early: Option<Box<Early>>,
}

/// Runs the handler on one message, settles it, and has the session's observer account for
/// how it ended. `spare`: what a handler was given of an earlier message, for this one if no
/// handler holds it any more; returned emptied for the next one (see [`received`]).
pub(in crate::run) async fn handle(
    (mut message, meta): (jetstream::Message, MessageMeta),
    deadline: AckDeadline,
    session: Arc<Session>,
    spare: Option<Arc<Received>>,
) -> Option<Arc<Received>> {
    // Delivered again after it was handled here (its ack lost with a connection, or sent past
    // its ack_wait), or delivered after a partition's session handled it early (`early`):
    // settled again, its handler not called twice. A watch knows it from its progress; a
    // consumer that delivers one message at a time, from its sessions' last settlements
    // (`settled`).
    let sequence = meta.stream_sequence;
    let last = session.acks.last.as_ref();
    // (A watch's session begins at the progress of its consumer, created again after a loss:
    // a revision an earlier session still ran then comes again, and is known from the last
    // settlements.)
    let settled_last = || {
        last.zip(sequence)
            .and_then(|(last, sequence)| last.settle_again(sequence, meta.published))
    };
    let again = match session.in_order {
        true => (session.observer.handled_past(sequence))
            .then_some(AckKind::Ack)
            .or_else(settled_last),
        false => settled_last(),
    };
    if let Some(kind) = again {
        tracing::debug!(
            stream = %session.scope.stream,
            consumer = %session.scope.consumer,
            sequence,
            "delivered again after it was handled; settled again without calling the handler"
        );
        let sent = Box::pin(session.acks.settle(&message, kind, deadline)).await;
        if let Err(e) = &sent {
            tracing::debug!(error = %e, "could not settle a message delivered again");
        }
        let settled = match kind {
            AckKind::Term => Outcome::DeadLettered {
                terminated: sent.is_ok(),
            },
            _ => Outcome::Handled {
                acked: sent.is_ok(),
            },
        };
        // A message handled early (see `early`) ends now; one handled before (by an earlier
        // session, or before its ack was lost) ended then.
        let early = (last.zip(sequence)).is_some_and(|(last, s)| last.ran_early(s, meta.published));
        if early {
            session.observer.ended(sequence, settled);
            session.observer.early();
        }
        settled.record_in(last, (sequence, meta.published));
        return spare;
    }
    let running = last.map(|last| last.running(sequence, &message.subject));
    let mut received = received(&mut message, meta, spare);
    let outcome = dispatch(&message, &received, meta, deadline, &session).await;
    session.observer.ended(meta.stream_sequence, outcome);
    outcome.record_in(last, (sequence, meta.published));
    drop(running);
    if let Some(replay) = &session.replay {
        if outcome.done() {
            session.observer.slot.replayed(meta.pending);
        } else {
            replay.failed(meta.stream_sequence);
        }
    }
    // Emptied, so that a consumer left idle holds no payload.
    let emptied = Arc::get_mut(&mut received)?;
    emptied.headers = None;
    emptied.payload = bytes::Bytes::new();
    Some(received)
}

/// What the handler is given of `message`: its subject, headers and payload are moved out of
/// it (what stays is the reply subject, which settles it), so that a message costs one
/// allocation here instead of a clone of each, and none when `spare` (an earlier message's,
/// which no handler holds any more: most handlers do not keep their context) is reused.
fn received(
    message: &mut jetstream::Message,
    meta: MessageMeta,
    spare: Option<Arc<Received>>,
) -> Arc<Received> {
    let message = &mut message.message;
    let received = Received {
        subject: std::mem::replace(&mut message.subject, async_nats::Subject::from_static("")),
        headers: message.headers.take(),
        payload: std::mem::take(&mut message.payload),
        delivered: meta.delivered,
        stream_sequence: meta.stream_sequence.unwrap_or(0),
        published: meta.published,
        pending: meta.pending,
        publishes: AtomicU32::new(0),
    };
    match spare {
        Some(mut spare) => match Arc::get_mut(&mut spare) {
            Some(reused) => {
                *reused = received;
                spare
            }
            None => Arc::new(received),
        },
        None => Arc::new(received),
    }
}

/// Runs the handler on one message and settles it: ack, nak with a delay, or dead-letter
/// and terminate. Every message ends in exactly one of the three; returns which.
pub(in crate::run) async fn dispatch(
    message: &jetstream::Message,
    received: &Arc<Received>,
    meta: MessageMeta,
    mut deadline: AckDeadline,
    session: &Session,
) -> Outcome {
    let span = tracing::info_span!(
        "message",
        stream = %session.scope.stream,
        consumer = %session.scope.consumer,
        subject = %received.subject,
        sequence = meta.stream_sequence.unwrap_or(0),
        delivered = meta.delivered,
    );
    // The caller's trace goes on in this span (with the `otel` feature).
    telemetry::continue_trace(&span, received.headers.as_ref());
    // Borrows the message, which only `handle` holds: every copy of a future's state costs
    // a copy of what it holds, on every message.
    async {
        let mut unfinished = Unfinished {
            message: Some(message),
            session,
        };
        let running = session
            .observer
            .started(meta.stream_sequence, meta.delivered);
        let result = run_handler(Some(message), received, session, &mut deadline).await;
        drop(running);
        unfinished.handled();
        // A failure while the consumer backs off is naked like any other: the consumer pulls
        // nothing but its probes meanwhile, so the server delivers it again only to one.
        match result {
            Ok(()) => {
                if let Some(breaker) = &session.breaker {
                    breaker_changed(session, breaker, breaker.succeeded());
                }
                acknowledge(message, &received.subject, session, deadline).await
            }
            Err(error) => {
                if !error.is_permanent()
                    && let Some(breaker) = &session.breaker
                {
                    let change = breaker.failed(
                        &error.to_string(),
                        error.is_unavailable(),
                        meta.delivered > 1,
                    );
                    breaker_changed(session, breaker, change);
                }
                // Boxed: the failure path's state (redelivery, dead letter, term) would
                // otherwise be part of every message's future, copied with it.
                Box::pin(fail((message, received), session, meta, &error, deadline)).await
            }
        }
    }
    .instrument(span)
    .await
}

/// Health, metrics and the log follow the breaker.
pub(super) fn breaker_changed(session: &Session, breaker: &Breaker, change: Change) {
    let slot = &session.observer.slot;
    match change {
        Change::None if breaker.is_open() => slot.backing_off(breaker.describe()),
        Change::None => {}
        Change::Opened { cause } => {
            session.observer.metrics.backed_off();
            tracing::warn!(stream = %session.scope.stream, consumer = %session.scope.consumer, cause, "handlers keep failing: what they depend on seems down; taking no new messages and probing with one");
            slot.backing_off(breaker.describe());
        }
        Change::Closed { open_for, failed } => {
            tracing::info!(stream = %session.scope.stream, consumer = %session.scope.consumer, ?open_for, failed, "a handler succeeded again: consuming at full speed");
            slot.backing_off(None);
        }
    }
}

/// Calls the handler (it decodes the payload), sending progress acks for `message` while it
/// runs (none for a message not delivered yet); a panic is a failure.
pub(super) async fn run_handler(
    message: Option<&jetstream::Message>,
    received: &Arc<Received>,
    session: &Session,
    deadline: &mut AckDeadline,
) -> Result<(), HandlerError> {
    let incoming = Incoming::new(Context {
        received: received.clone(),
        scope: session.scope.clone(),
    });
    let handler = &session.handler;
    let outcome = match std::panic::catch_unwind(AssertUnwindSafe(|| handler(incoming))) {
        Ok(future) => {
            let mut future = pin!(AssertUnwindSafe(future).catch_unwind());
            // Most handlers finish without waiting: no timer for them.
            match future.as_mut().now_or_never() {
                Some(outcome) => outcome,
                None if message.is_none() => future.await,
                // Boxed: only a handler that waits needs the timer and the progress acks.
                None => Box::pin(async {
                    loop {
                        tokio::select! {
                            r = &mut future => break r,
                            _ = tokio::time::sleep_until(session.acks.next_progress(*deadline)) => {
                                if let Some(message) = message {
                                    session.acks.keep_alive(message, deadline).await;
                                }
                            }
                        }
                    }
                })
                .await,
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
    subject: &str,
    session: &Session,
    deadline: AckDeadline,
) -> Outcome {
    match session.acks.settle(message, AckKind::Ack, deadline).await {
        Ok(()) => Outcome::Handled { acked: true },
        Err(e) => {
            tracing::warn!(
                stream = %session.scope.stream,
                consumer = %session.scope.consumer,
                subject,
                error = %e,
                "could not acknowledge a handled message; the server redelivers it after ack_wait"
            );
            Outcome::Handled { acked: false }
        }
    }
}

/// A failed handler: its last allowed delivery, or a permanent error, is dead-lettered and
/// terminated; otherwise the message is naked with a delay from the backoff.
async fn fail(
    (message, received): (&jetstream::Message, &Received),
    session: &Session,
    meta: MessageMeta,
    error: &HandlerError,
    deadline: AckDeadline,
) -> Outcome {
    let last = session.max_deliver.is_some_and(|max| meta.delivered >= max);
    if error.is_permanent() || last {
        return terminate((message, received), session, (meta, deadline), last, error).await;
    }
    let delay = session.redelivery.after(&session.backoff, meta.delivered);
    tracing::debug!(subject = %received.subject, delivered = meta.delivered, ?delay, %error, "handler failed; redelivering later");
    // A consumer without acks (an ordered replay) restarts after this message instead.
    let naked = session.acks.nak(message, Some(delay)).await;
    Outcome::Retried { delay, naked }
}

/// Publishes the message to the dead-letter subject (if declared), then terminates it. If the
/// dead letter cannot be published, the message is naked instead: nothing is lost.
async fn terminate(
    (message, received): (&jetstream::Message, &Received),
    session: &Session,
    (meta, mut deadline): (MessageMeta, AckDeadline),
    last: bool,
    error: &HandlerError,
) -> Outcome {
    let delivery = Delivery {
        delivered: meta.delivered,
        stream_sequence: meta.stream_sequence,
    };
    let holder = (&*session.scope, &session.acks);
    if let Some(target) = &session.dead_letter
        && let Err(failed) = publish_dead_letter(
            (message, received),
            holder,
            target,
            (delivery, &mut deadline),
            error,
        )
        .await
    {
        let subject = target.subject;
        let (attempts, e) = (failed.attempts, failed.error);
        // The dead-letter stream may take no writes (no leader, no quorum): say so.
        session.scope.common.publish_unanswered.notify_one();
        let target_stream = (session.scope.common.refusing)(subject).unwrap_or_default();
        if last {
            tracing::error!(
                dead_letter = subject,
                stream = %session.scope.stream,
                consumer = %session.scope.consumer,
                error = %e,
                target_stream,
                "could not publish a dead letter after {attempts} attempts; this was the last \
                 delivery, so the message stays unacknowledged in the stream (the server emits a \
                 MAX_DELIVERIES advisory): check that a stream captures the dead-letter subject"
            );
        } else {
            tracing::error!(dead_letter = subject, error = %e, target_stream, "could not publish a dead letter; the message is redelivered instead");
            session.acks.nak(message, Some(target.retry.cap)).await;
        }
        return Outcome::DeadLetterUnpublished { last };
    }
    tracing::warn!(subject = %received.subject, stream = %session.scope.stream, consumer = %session.scope.consumer, delivered = meta.delivered, %error, "message terminated");
    match session.acks.settle(message, AckKind::Term, deadline).await {
        Ok(()) => Outcome::DeadLettered { terminated: true },
        Err(e) => {
            tracing::warn!(error = %e, "could not terminate a message; the server redelivers it after ack_wait");
            Outcome::DeadLettered { terminated: false }
        }
    }
}

/// Records its message as stopped if dropped before [`Unfinished::handled`]: a handler task
/// aborted, or an inline handler dropped, at the end of a drain's grace period. Once the
/// handler has returned, settling is under way (ack, nak or dead letter and term), and a
/// drop no longer records anything: a message is never settled twice.
struct Unfinished<'a> {
    /// The message, until its handler returned (its reply subject is cloned only if dropped
    /// before: a clone of it costs an allocation on every message).
    message: Option<&'a jetstream::Message>,
    session: &'a Session,
}

impl Unfinished<'_> {
    fn handled(&mut self) {
        self.message = None;
    }
}

impl Drop for Unfinished<'_> {
    fn drop(&mut self) {
        if let Some(reply) = self.message.take().and_then(|m| m.reply.clone()) {
            self.session.acks.stopped(&self.session.stopped, reply);
        }
    }
}
