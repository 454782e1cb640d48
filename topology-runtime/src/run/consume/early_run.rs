//! The session loop's part in running a partition's next message early (see `early`): the
//! message before it, the read of the next one, and the one running early.
//!
//! A message runs early only when all of these hold, checked when the session has nothing
//! else running or waiting:
//! - the message before it was delivered to this session less than half its `ack_wait` ago,
//!   and handled here, its ack sent;
//! - its key differs from that message's (a lost ack would bring that one back after it);
//! - it has not run here already, the session trusts its deliveries (`pull::fence`), and the
//!   consumer does not back off (`crate::outage`).
//!
//! Its delivery then waits until it has run, and is acknowledged without calling the handler
//! (`dispatch::handle`); if it failed, its delivery runs the handler as any delivery. If its
//! delivery has not come by then, it is stopped (its future dropped, as the grace period stops
//! a handler) half an `ack_wait` after the delivery of the message before it: a session that
//! lost the partition without knowing (a link cut) ends it before the server could deliver
//! that message again, and so this one, to the partition's next holder. It runs again when
//! delivered.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::SystemTime;

use futures::future::OptionFuture;
use tokio::time::Instant;
use tracing::Instrument;

use super::ack::{AckDeadline, Again};
use super::dispatch::{Session, breaker_changed, run_handler};
use super::early::{Looked, Next, fresh_within};
use super::meta::MessageMeta;
use crate::telemetry;

type Task<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// What a partition's session knows of running ahead.
pub(super) struct EarlyRun {
    /// The last message delivered and started here.
    before: Option<Before>,
    /// The sequence after which `reading` reads, or `next` was read.
    read_after: u64,
    reading: Option<Task<Looked>>,
    /// The message after `read_after`, read.
    next: Option<Box<Next>>,
    /// A message running before its delivery: its stream sequence, and when it is stopped
    /// if its delivery has not come.
    running: Option<Task<()>>,
    running_sequence: u64,
    stop_at: Instant,
    /// Reads failed: the session no longer reads ahead.
    off: bool,
}

struct Before {
    sequence: u64,
    published: Option<SystemTime>,
    subject: async_nats::Subject,
    /// What the consumer had left after it.
    pending: u64,
    /// Half its `ack_wait` after its delivery, at the latest: a message runs early only
    /// before.
    until: Instant,
}

/// What finished.
pub(super) enum Woke {
    Ran,
    Read(Looked),
    /// The message running early was not delivered in time (see the module documentation).
    Overdue,
}

impl EarlyRun {
    /// For a partition's session that reads ahead.
    pub(super) fn of(session: &Session) -> Option<Box<EarlyRun>> {
        session.early.as_ref()?;
        session.acks.last.as_ref()?;
        Some(Box::new(EarlyRun {
            before: None,
            read_after: 0,
            reading: None,
            next: None,
            running: None,
            running_sequence: 0,
            stop_at: Instant::now(),
            off: false,
        }))
    }

    /// Whether a message runs early, or a read is under way.
    pub(super) fn busy(&self) -> bool {
        self.running.is_some() || self.reading.is_some()
    }

    /// Whether a message runs early: no delivery starts meanwhile.
    pub(super) fn runs(&self) -> bool {
        self.running.is_some()
    }

    /// The stream sequence of the message running early, if one does.
    pub(super) fn running_sequence(&self) -> Option<u64> {
        self.running.as_ref().map(|_| self.running_sequence)
    }

    /// A delivered message starts (its delivery's deadline `deadline`): the next message read
    /// is the one after it.
    pub(super) fn delivered(
        &mut self,
        session: &Arc<Session>,
        subject: &async_nats::Subject,
        (meta, deadline): (&MessageMeta, AckDeadline),
    ) {
        let Some(sequence) = meta.stream_sequence else {
            self.before = None;
            return;
        };
        self.before = Some(Before {
            sequence,
            published: meta.published,
            subject: subject.clone(),
            pending: meta.pending,
            until: deadline.at() - fresh_within(session.acks.ack_wait),
        });
        // Read after it already (it ran early), or to read now.
        if self.read_after == sequence && (self.reading.is_some() || self.next.is_some()) {
            return;
        }
        self.next = None;
        self.reading = None;
        self.read_after = sequence;
        if meta.pending > 0 && !self.off {
            self.reading = Some(read(session, sequence));
        }
    }

    /// Starts the next message if it may run early (see the module documentation); `idle`:
    /// nothing else runs or waits in the session, which trusts its deliveries and is not
    /// draining or backing off.
    pub(super) fn start(&mut self, session: &Arc<Session>, idle: bool) {
        if !idle || self.running.is_some() {
            return;
        }
        let (Some(before), Some(next), Some(last), Some(early)) =
            (&self.before, &self.next, &session.acks.last, &session.early)
        else {
            return;
        };
        let fresh = Instant::now() < before.until;
        // Read after the last delivered message: one that ran early has not been delivered
        // yet, and nothing more runs early until it is.
        if !fresh
            || self.read_after != before.sequence
            || next.sequence <= before.sequence
            || last.again(before.sequence, before.published) != Some(Again::Ack)
            || last.again(next.sequence, next.published).is_some()
            || !early.other_key(next.subject(), before.subject.as_str())
        {
            return;
        }
        let pending = before.pending.saturating_sub(1);
        let Some(next) = self.next.take() else {
            return;
        };
        self.read_after = next.sequence;
        self.running_sequence = next.sequence;
        self.stop_at = before.until;
        self.reading = (pending > 0 && !self.off).then(|| read(session, next.sequence));
        self.running = Some(Box::pin(run(next, session.clone(), pending)));
    }

    /// Waits for the run or the read under way (call only while [`EarlyRun::busy`]), or for
    /// the time to stop the run while its message is not `delivered`.
    pub(super) async fn woke(&mut self, delivered: bool) -> Woke {
        let overdue = !delivered && self.running.is_some();
        let stop_at = self.stop_at;
        let ran = OptionFuture::from(self.running.as_mut());
        let read = OptionFuture::from(self.reading.as_mut());
        tokio::select! {
            biased;
            Some(()) = ran => Woke::Ran,
            Some(looked) = read => Woke::Read(looked),
            () = tokio::time::sleep_until(stop_at), if overdue => Woke::Overdue,
            else => std::future::pending().await,
        }
    }

    /// What [`EarlyRun::woke`] returned.
    pub(super) fn woken(&mut self, woke: Woke, session: &Session) {
        match woke {
            Woke::Ran => self.running = None,
            Woke::Overdue => {
                self.running = None;
                tracing::warn!(
                    stream = %session.scope.stream,
                    consumer = %session.scope.consumer,
                    sequence = self.running_sequence,
                    "a message run before its delivery was stopped: it was not delivered within half the ack_wait of the message before it (a link cut or stalled?); it runs again when delivered, here or on the partition's next holder"
                );
            }
            Woke::Read(looked) => {
                self.reading = None;
                match looked {
                    Looked::Next(next) => self.next = Some(next),
                    Looked::Nothing => {}
                    Looked::Failed(error) => {
                        self.off = true;
                        tracing::warn!(
                            stream = %session.scope.stream,
                            consumer = %session.scope.consumer,
                            error,
                            "cannot read the partition's next message from the stream; until the session is opened again, each message waits for its delivery (grant `$JS.API.STREAM.MSG.GET.<stream>`, which the exported permissions include, or turn it off: `RuntimeBuilder::partitions_early(false)`)"
                        );
                    }
                }
            }
        }
    }

    /// The run under way, if any: a drain or a loss waits for it.
    pub(super) fn take_running(&mut self) -> Option<Task<()>> {
        self.running.take()
    }
}

/// Reads the partition's first message after `after`.
fn read(session: &Arc<Session>, after: u64) -> Task<Looked> {
    let session = session.clone();
    Box::pin(async move {
        match &session.early {
            Some(early) => early.look(after).await,
            None => Looked::Nothing,
        }
    })
}

/// Runs the handler on `next` before its delivery, `pending` messages after it; records it
/// as handled early if the handler succeeds.
async fn run(next: Box<Next>, session: Arc<Session>, pending: u64) {
    let Some(last) = session.acks.last.as_ref() else {
        return;
    };
    let running = last.running();
    let (sequence, published) = (next.sequence, next.published);
    let received = next.received(pending);
    let span = tracing::info_span!(
        "message",
        stream = %session.scope.stream,
        consumer = %session.scope.consumer,
        subject = %received.subject,
        sequence,
        delivered = 1u64,
        early = true,
    );
    telemetry::continue_trace(&span, received.headers.as_ref());
    let in_flight = session.observer.started(Some(sequence), 1);
    let mut deadline = session.acks.deadline(Instant::now());
    let result = run_handler(None, &received, &session, &mut deadline)
        .instrument(span)
        .await;
    drop(in_flight);
    match result {
        Ok(()) => {
            if let Some(breaker) = &session.breaker {
                breaker_changed(&session, breaker, breaker.succeeded());
            }
            last.handled_early(sequence, published);
        }
        Err(error) => tracing::debug!(
            stream = %session.scope.stream,
            consumer = %session.scope.consumer,
            sequence,
            %error,
            "a message run before its delivery failed; its delivery runs the handler again"
        ),
    }
    drop(running);
}
