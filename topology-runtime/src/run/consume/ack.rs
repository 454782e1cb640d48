//! Every settlement a consumer sends goes through here: acks and terms ([`Acks::settle`]),
//! fire-and-forget or confirmed by the server before the delivery's deadline
//! ([`AckDeadline`]); naks ([`Acks::nak`], and [`Stopped::return_all`] for the messages of
//! handlers a drain stopped, known only by their reply subject); and the progress acks that
//! keep a message held here from being delivered again. A consumer without acks sends none of
//! them. Naks are fire-and-forget in every mode: a lost nak only delays the redelivery to the
//! message's `ack_wait`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::{self, AckKind};
use tokio::time::Instant;

use super::settled::LastSettled;

/// How one consumer's acks, terms and progress acks are sent.
pub(in crate::run) struct Acks {
    /// Confirmed acks (`ack = "confirmed"`): how; `None` for fire-and-forget. Boxed: a
    /// client is large, and inline every consumer's session would carry one.
    pub(in crate::run) confirm: Option<Box<Confirm>>,
    /// The consumer's `ack_wait` on the server.
    pub(in crate::run) ack_wait: Duration,
    /// Progress acks are sent at this interval while a message is held (its handler runs, or
    /// it waits for one).
    pub(in crate::run) progress_every: Duration,
    /// The consumer takes no acks (`AckPolicy::None`: an ordered replay, which keeps its own
    /// place): nothing is sent, and every settlement succeeds at once.
    pub(in crate::run) none: bool,
    /// For a consumer that delivers one message at a time: how this session last settled a
    /// message (see [`LastSettled`]).
    pub(in crate::run) last: Option<LastSettled>,
}

/// How a confirmed ack (or term) is sent: as a request whose reply is the server's
/// confirmation, through the client's shared reply subscription (async-nats's
/// `Message::double_ack` subscribes and unsubscribes an inbox for every ack, and waits for the
/// JetStream context's timeout, 5 s by default, once). A timed-out attempt is sent again: the
/// server acknowledges by stream sequence, so an ack of a message it has recorded already
/// changes nothing and is confirmed again (`processAckMsg`, nats-server `server/consumer.go`).
pub(in crate::run) struct Confirm {
    pub(in crate::run) client: async_nats::Client,
    /// The bound on one attempt (the runtime's request timeout).
    pub(in crate::run) attempt: Duration,
}

/// How long a confirmed ack refused at once waits before it is sent again: this, times the
/// attempt, up to [`REFUSED_ACK_STEPS`] times this (50 ms up to 1 s).
const REFUSED_ACK_PAUSE: Duration = Duration::from_millis(50);
const REFUSED_ACK_STEPS: u32 = 20;

/// A message as its feed received it.
pub(in crate::run) struct Fetched {
    pub(in crate::run) message: jetstream::Message,
    /// No later than the server delivered it, so no later than its `ack_wait` started: when
    /// the pull request it answers was sent; for a push delivery, when it arrived (a push
    /// consumer asks for nothing, so nothing earlier is known: a delivery held in a stalled
    /// link for longer than its `ack_wait` may be confirmed after its redelivery).
    pub(in crate::run) delivered_after: tokio::time::Instant,
    /// Its delivery metadata, read once here.
    pub(in crate::run) meta: super::meta::MessageMeta,
}

impl Fetched {
    /// `message`, delivered no earlier than `delivered_after`.
    pub(in crate::run) fn new(
        message: jetstream::Message,
        delivered_after: tokio::time::Instant,
    ) -> Self {
        Fetched {
            meta: super::meta::MessageMeta::of(&message),
            message,
            delivered_after,
        }
    }
}

/// Until when a delivery surely has not been given to anyone else: its `ack_wait` counted
/// from no later than the server delivered it (see [`Fetched::delivered_after`]), pushed
/// further by each progress ack the server confirmed before it. A confirmation received
/// before it was applied while the server still held the message for this delivery, so
/// the message is never delivered again; one later could come after a redelivery (the
/// server applies an ack by stream sequence, whatever the delivery, and confirms it again
/// for the other instance), so it is not taken as confirmed.
///
#[derive(Debug, Clone, Copy)]
pub(in crate::run) struct AckDeadline(Instant);

impl Acks {
    /// The deadline of a delivery made no earlier than `delivered_after`.
    pub(in crate::run) fn deadline(&self, delivered_after: Instant) -> AckDeadline {
        AckDeadline(delivered_after + self.ack_wait)
    }

    /// When the next progress ack is due for a message held on: every `progress_every`, and
    /// with confirmed acks soon enough that it can be confirmed before `deadline`.
    pub(in crate::run) fn next_progress(&self, deadline: AckDeadline) -> Instant {
        let every = Instant::now() + self.progress_every;
        match self.confirm {
            Some(_) => every.min(deadline.0 - self.progress_every.min(self.ack_wait / 2)),
            None => every,
        }
    }

    /// Sends a progress ack, so that the server does not redeliver the message while it is
    /// held here: fire-and-forget, or with confirmed acks as a request whose reply, received
    /// before `deadline`, pushes the deadline to a whole `ack_wait` after it was sent (the
    /// server restarted the message's `ack_wait` when it received it, no earlier than that).
    pub(in crate::run) async fn keep_alive(
        &self,
        message: &jetstream::Message,
        deadline: &mut AckDeadline,
    ) {
        if self.none {
            return;
        }
        let (Some(confirm), Some(reply)) = (&self.confirm, message.reply.clone()) else {
            progress(message).await;
            return;
        };
        let sent = Instant::now();
        let Some(left) = deadline.0.checked_duration_since(sent) else {
            // Too late to be confirmed in time: still ask the server to hold it.
            progress(message).await;
            return;
        };
        let request = async_nats::Request::new()
            .payload(AckKind::Progress.into())
            .timeout(Some(confirm.attempt.min(left)));
        if confirm.client.send_request(reply, request).await.is_ok() {
            deadline.0 = deadline.0.max(sent + self.ack_wait);
        }
    }

    /// Naks `message` (see [`nak`]); a consumer without acks sends nothing (`false`).
    pub(in crate::run) async fn nak(
        &self,
        message: &jetstream::Message,
        delay: Option<Duration>,
    ) -> bool {
        !self.none && nak(message, delay).await
    }

    /// Sends `kind` (an ack or a term: the settlements that end a message) fire-and-forget,
    /// or with confirmed acks, as a request sent again until the server confirms it before
    /// `deadline`.
    pub(in crate::run) async fn settle(
        &self,
        message: &jetstream::Message,
        kind: AckKind,
        deadline: AckDeadline,
    ) -> Result<(), async_nats::Error> {
        if self.none {
            return Ok(());
        }
        match &self.confirm {
            None => message.ack_with(kind).await,
            // Boxed: its retry loop would otherwise be part of every message's future.
            Some(confirm) => Box::pin(self.confirmed(confirm, message, kind, deadline)).await,
        }
    }

    /// Sends `kind` as a request until the server confirms it, within the delivery's deadline.
    async fn confirmed(
        &self,
        confirm: &Confirm,
        message: &jetstream::Message,
        kind: AckKind,
        deadline: AckDeadline,
    ) -> Result<(), async_nats::Error> {
        let Some(reply) = message.reply.clone() else {
            return Err("the message has no reply subject: not a JetStream delivery".into());
        };
        let mut attempt = 0u32;
        loop {
            let Some(left) = deadline
                .0
                .checked_duration_since(Instant::now())
                .filter(|left| !left.is_zero())
            else {
                return Err(format!(
                    "not confirmed after {attempt} attempts, before the consumer's ack_wait ({:?}) \
                     could have run out: the server may deliver it again",
                    self.ack_wait
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
                // Refused at once: no consumer leader takes acks now (an election, or the
                // consumer is gone), or the connection is being re-established. Pause first.
                let pause = REFUSED_ACK_PAUSE * attempt.min(REFUSED_ACK_STEPS);
                tokio::time::sleep(pause.min(left)).await;
            }
        }
    }
}

/// Naks `message`: delivered again after `delay` (`None`: at once). Returns whether the nak
/// was sent; if not, the server delivers the message again after its `ack_wait`.
pub(in crate::run) async fn nak(message: &jetstream::Message, delay: Option<Duration>) -> bool {
    match message.ack_with(AckKind::Nak(delay)).await {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!(reply = ?message.reply, error = %e, "could not nak a message; the server delivers it again after ack_wait");
            false
        }
    }
}

/// The messages whose handler a drain stopped before it settled them (its grace period ran
/// out), known by their reply subjects: nothing settled them, so the drain returns them.
#[derive(Clone, Default)]
pub(in crate::run) struct Stopped(Arc<Mutex<Vec<async_nats::Subject>>>);

impl Acks {
    /// Records a message whose handler was stopped, to be returned by the drain; a consumer
    /// without acks has nothing to return (it resumes from its own place).
    pub(in crate::run) fn stopped(&self, stopped: &Stopped, reply: async_nats::Subject) {
        if !self.none {
            stopped
                .0
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(reply);
        }
    }
}

impl Stopped {
    /// Naks every message recorded, so that each is delivered again at once rather than after
    /// its `ack_wait`.
    pub(in crate::run) async fn return_all(&self, client: &async_nats::Client) {
        let replies = std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()));
        for reply in replies {
            if let Err(e) = client.publish(reply, AckKind::Nak(None).into()).await {
                tracing::warn!(error = %e, "could not return a message whose handler was stopped; the server delivers it again after ack_wait");
            }
        }
    }
}

/// Asks the server to hold `message` for another `ack_wait` (fire-and-forget).
async fn progress(message: &jetstream::Message) {
    if let Err(e) = message.ack_with(AckKind::Progress).await {
        tracing::debug!(error = %e, "could not send a progress ack");
    }
}
