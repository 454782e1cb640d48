//! The session loop's part in running a partition's messages early (see `early`): the last
//! message delivered, the read of the next one, and the messages running before their
//! delivery came (or whose delivery waits for them).
//!
//! A partition's next message runs early only when all of these hold:
//! - the last message delivered to this session came recently (`early::fresh_within`), and
//!   is running, waiting, or handled here with its ack sent (not failed, not dead-lettered);
//! - its key differs from that message's, from every message running early, and from every
//!   delivered message a handler still runs here, in this session or an earlier one (an ack
//!   lost would bring that one back after it, and a key's messages run one at a time);
//! - every message that ran early was delivered since: one message at a time runs before its
//!   delivery, which is the consumer's next;
//! - the replica has room for it (`shares::Capacity`): it runs beside another of its
//!   partition only while a partition held here leaves its share unused, so the replica runs
//!   no more handlers at once than the partitions it holds;
//! - it has not run here already, the session trusts its deliveries (`pull::fence`), and the
//!   consumer does not back off (`crate::outage`).
//!
//! Its delivery then waits until it has run, and is acknowledged without calling the handler
//! (`dispatch::handle`); if it failed, its delivery runs the handler as any delivery. If its
//! delivery has not come, it is stopped (its future dropped, as the grace period stops a
//! handler) by the same bound after the delivery of the message before it: a session that
//! lost the partition without knowing (a link cut) ends it before the server could give it to
//! the partition's next holder. It runs again when delivered.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::SystemTime;

use futures::future::OptionFuture;
use tokio::time::Instant;
use tracing::Instrument;

use super::dispatch::{Session, breaker_changed, run_handler};
use super::early::{Looked, Next, fresh_within};
use super::meta::MessageMeta;
use super::settled::Again;
use crate::run::shares::{Capacity, Seat};
use crate::telemetry;

type Task<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// What a partition's session knows of running ahead.
pub(super) struct EarlyRun {
    /// The last message delivered here.
    before: Option<Before>,
    /// The sequence after which `reading` reads, or `next` was read.
    read_after: u64,
    reading: Option<Task<Looked>>,
    /// The message after `read_after`, read.
    next: Option<Box<Next>>,
    /// Messages running early: at most one not delivered yet.
    runs: Vec<Run>,
    /// Reads failed: the session no longer reads ahead.
    off: bool,
    capacity: Arc<Capacity>,
}

struct Before {
    sequence: u64,
    published: Option<SystemTime>,
    subject: async_nats::Subject,
    /// What the consumer had left after it.
    pending: u64,
    /// When a message may no longer run early after it (see `early::fresh_within`).
    until: Instant,
}

/// A message running before its delivery came, or whose delivery waits for it.
struct Run {
    sequence: u64,
    subject: async_nats::Subject,
    delivered: bool,
    /// When it is stopped if its delivery has not come.
    stop_at: Instant,
    task: Task<()>,
}

/// What finished.
pub(super) enum Woke {
    /// The message at this sequence ran.
    Ran(u64),
    Read(Looked),
    /// The message running early was not delivered in time (see the module documentation).
    Overdue,
}

impl EarlyRun {
    /// For a partition's session that reads ahead, counted in `capacity`.
    pub(super) fn of(session: &Session) -> Option<Box<EarlyRun>> {
        let capacity = session.early.as_ref()?.capacity().clone();
        session.acks.last.as_ref()?;
        Some(Box::new(EarlyRun {
            before: None,
            read_after: 0,
            reading: None,
            next: None,
            runs: Vec::new(),
            off: false,
            capacity,
        }))
    }

    /// A seat for a delivered handler, if the replica has room (see `shares::Capacity`).
    pub(super) fn seat(&self) -> Option<Seat> {
        self.capacity.try_enter()
    }

    /// The group's capacity here.
    pub(super) fn capacity(&self) -> &Arc<Capacity> {
        &self.capacity
    }

    /// Whether a run or a read is under way.
    pub(super) fn busy(&self) -> bool {
        !self.runs.is_empty() || self.reading.is_some()
    }

    /// Whether the delivery of the message at `sequence`, stored under `subject`, waits: its
    /// message, or one of its key, runs early.
    pub(super) fn holds(
        &self,
        session: &Session,
        (sequence, subject): (Option<u64>, &str),
    ) -> bool {
        let Some(early) = &session.early else {
            return false;
        };
        self.runs.iter().any(|run| {
            Some(run.sequence) == sequence || !early.other_key(run.subject.as_str(), subject)
        })
    }

    /// A delivery arrived: the next message read is the one after it.
    pub(super) fn arrived(
        &mut self,
        session: &Arc<Session>,
        subject: &async_nats::Subject,
        meta: &MessageMeta,
    ) {
        let Some(sequence) = meta.stream_sequence else {
            return;
        };
        if self.before.as_ref().is_some_and(|b| b.sequence == sequence) {
            return;
        }
        if let Some(run) = self.runs.iter_mut().find(|run| run.sequence == sequence) {
            run.delivered = true;
        }
        self.before = Some(Before {
            sequence,
            published: meta.published,
            subject: subject.clone(),
            pending: meta.pending,
            until: Instant::now() + fresh_within(session.acks.ack_wait),
        });
        // Read after it already (it ran early), or to read now.
        if self.read_after == sequence && (self.reading.is_some() || self.next.is_some()) {
            return;
        }
        self.next = None;
        self.reading = None;
        self.read_after = sequence;
        // A denied read is not answered (the server reports it on the connection).
        if let Some(early) = session.early.as_ref().filter(|_| !self.off)
            && session.observer.slot.refuses(early.read_subject())
        {
            self.failed(session, "the server refuses it to this user".to_owned());
        }
        if meta.pending > 0 && !self.off {
            self.reading = Some(read(session, sequence));
        }
    }

    /// Starts the next message if it may run early (see the module documentation); `allowed`:
    /// the session trusts its deliveries and is not draining or backing off.
    pub(super) fn start(&mut self, session: &Arc<Session>, allowed: bool) {
        let (Some(before), Some(next), Some(last), Some(early)) =
            (&self.before, &self.next, &session.acks.last, &session.early)
        else {
            return;
        };
        let settled = last.again(before.sequence, before.published);
        let other_keys = early.other_key(next.subject(), before.subject.as_str())
            && self
                .runs
                .iter()
                .all(|run| early.other_key(next.subject(), run.subject.as_str()));
        if !allowed
            || Instant::now() >= before.until
            || self.read_after != before.sequence
            || next.sequence <= before.sequence
            || !matches!(settled, None | Some(Again::Ack))
            || last.again(next.sequence, next.published).is_some()
            || last.waits(Some(next.sequence), next.subject())
            || self.runs.iter().any(|run| !run.delivered)
            || !other_keys
        {
            return;
        }
        let Some(seat) = self.capacity.try_enter() else {
            return;
        };
        let (pending, stop_at) = (before.pending.saturating_sub(1), before.until);
        let Some(next) = self.next.take() else {
            return;
        };
        tracing::debug!(
            stream = %session.scope.stream,
            consumer = %session.scope.consumer,
            sequence = next.sequence,
            subject = next.subject(),
            before = before.sequence,
            before_subject = %before.subject,
            beside = self.runs.len(),
            "running a message before its delivery"
        );
        self.read_after = next.sequence;
        self.reading = (pending > 0 && !self.off).then(|| read(session, next.sequence));
        self.runs.push(Run {
            sequence: next.sequence,
            subject: async_nats::Subject::from(next.subject()),
            delivered: false,
            stop_at,
            task: Box::pin(run(next, session.clone(), pending, seat)),
        });
    }

    /// Waits for a run or the read under way (call only while [`EarlyRun::busy`]), or for
    /// the time to stop the run whose message is not delivered.
    pub(super) async fn woke(&mut self) -> Woke {
        let stop_at = self
            .runs
            .iter()
            .find(|run| !run.delivered)
            .map(|run| run.stop_at);
        let runs = &mut self.runs;
        let ran = futures::future::poll_fn(|cx| {
            for run in runs.iter_mut() {
                if run.task.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(run.sequence);
                }
            }
            Poll::Pending
        });
        let read = OptionFuture::from(self.reading.as_mut());
        let overdue = OptionFuture::from(stop_at.map(tokio::time::sleep_until));
        tokio::select! {
            biased;
            sequence = ran => Woke::Ran(sequence),
            Some(looked) = read => Woke::Read(looked),
            Some(()) = overdue => Woke::Overdue,
        }
    }

    /// What [`EarlyRun::woke`] returned.
    pub(super) fn woken(&mut self, woke: Woke, session: &Session) {
        match woke {
            Woke::Ran(sequence) => self.runs.retain(|run| run.sequence != sequence),
            Woke::Overdue => {
                let Some(at) = self.runs.iter().position(|run| !run.delivered) else {
                    return;
                };
                let stopped = self.runs.remove(at);
                tracing::warn!(
                    stream = %session.scope.stream,
                    consumer = %session.scope.consumer,
                    sequence = stopped.sequence,
                    "a message run before its delivery was stopped: it was not delivered soon enough after the message before it (half its ack_wait, at most 1 s: a link cut or stalled?); it runs again when delivered, here or on the partition's next holder"
                );
            }
            Woke::Read(looked) => {
                self.reading = None;
                match looked {
                    Looked::Next(next) => self.next = Some(next),
                    Looked::Nothing => {}
                    Looked::Failed(error) => self.failed(session, error),
                }
            }
        }
    }

    /// Reading the next message failed: the session reads no more.
    fn failed(&mut self, session: &Session, error: String) {
        self.off = true;
        tracing::warn!(
            stream = %session.scope.stream,
            consumer = %session.scope.consumer,
            error,
            "cannot read the partition's next message from the stream; until the session is opened again, each message waits for its delivery (grant `$JS.API.STREAM.MSG.GET.<stream>`, which the exported permissions include, or turn it off: `RuntimeBuilder::partitions_early(false)`)"
        );
    }

    /// The runs under way, a drain or a loss waits for: each not delivered yet ends by the
    /// time it is stopped (see the module documentation).
    pub(super) fn take_runs(&mut self) -> Vec<Task<()>> {
        let runs = self.runs.drain(..).map(|run| match run.delivered {
            true => run.task,
            false => Box::pin(async move {
                let _ = tokio::time::timeout_at(run.stop_at, run.task).await;
            }),
        });
        runs.collect()
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

/// Runs the handler on `next` before its delivery, `pending` messages after it, counted in
/// its group's capacity while `seat` lives; records it as handled early if the handler
/// succeeds.
async fn run(next: Box<Next>, session: Arc<Session>, pending: u64, seat: Seat) {
    let Some(last) = session.acks.last.as_ref() else {
        return;
    };
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
    drop(seat);
}
