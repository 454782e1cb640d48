//! A consumer session's loop: receives messages from its feed, starts them as its flow
//! control allows (`flow`), keeps the ones waiting to start alive with progress acks, and
//! hands back what it did not start when the session ends.
//!
//! Every handler is first polled inline, on this task: one that finishes without waiting (a
//! no-op, a handler that only computes) costs no task, no cross-thread wake-up and no timer.
//! A handler that waits stays in a set polled by this task, as a `for_each_concurrent` loop
//! would keep it; when the session ends, the handlers still running become tasks of
//! `in_flight`, which outlives the session and drains within the grace period.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream;
use futures::future::OptionFuture;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::ack::AckDeadline;
use super::dispatch::{Session, handle};
use super::early_run::EarlyRun;
use super::feed::{Feed, Fetched};
use super::flow::Flow;
use super::loss::Loss;
use super::meta::MessageMeta;
use crate::handler::Received;
use crate::health::{ConsumerState, Slot};

/// Why consuming stopped.
pub(in crate::run) enum Exit {
    /// Shutdown: drained.
    Drained,
    /// The consumer, its stream or the connection was lost: ensure again and resume.
    Lost(Loss),
}

/// The shortest interval at which waiting messages are checked for a progress ack.
const KEEP_ALIVE_FLOOR: Duration = Duration::from_millis(10);

/// A handler that did not finish on its first poll, in the memory it started in: it
/// resolves to how long it ran and what it was given of its message (see `handle`).
type Running = Pin<Box<dyn Future<Output = Option<Ran>> + Send>>;

/// How long a handler ran, and what it was given of its message if no one holds it.
type Ran = (Duration, Option<Arc<Received>>);

/// A message received and not started yet.
struct Waiting {
    message: jetstream::Message,
    meta: MessageMeta,
    deadline: AckDeadline,
    /// When it arrived, or when its last progress ack was sent.
    kept: Instant,
}

/// What woke the session loop.
enum Step {
    Cancelled,
    /// A handler finished (after running this long, if known): there is room for more.
    Finished(Option<Duration>),
    /// The consumer backs off and its next probe is due.
    Probe,
    KeepAlive,
    /// A message arrived (it waits to start).
    Received,
    /// A partition's message ran early, or its next message was read (see `early_run`).
    Early(super::early_run::Woke),
    Lost(Loss),
}

/// Reads messages and dispatches them as `flow` allows, until shutdown (`cancel`) or loss.
/// Handlers still running when the session ends go into `in_flight`, which outlives it (the
/// grace period is applied to them by [`finish_in_flight`]); a partition's settle first,
/// within `grace`.
pub(in crate::run) async fn pump(
    mut feed: Feed,
    session: Arc<Session>,
    mut flow: Flow,
    (cancel, grace): (&CancellationToken, Duration),
    in_flight: &mut JoinSet<()>,
) -> Exit {
    // Received and not started yet: what `flow` holds ahead.
    let mut waiting: VecDeque<Waiting> = VecDeque::new();
    // Handlers of this session that waited on their first poll, polled by this task.
    let mut running: FuturesUnordered<Running> = FuturesUnordered::new();
    // Every half progress interval, messages that waited at least that long are kept alive:
    // a progress ack at most every `progress_every`, as for a running handler.
    // When next, on the loop's one timer (an interval is a timer of its own, boxed).
    let keep_every = (session.acks.progress_every / 2).max(KEEP_ALIVE_FLOOR);
    let mut keep_alive_at = Instant::now() + keep_every;
    // The memory a handler's future runs in on its first poll, reused while handlers finish
    // there (most do): a message costs no allocation for it then.
    let mut spare = None;
    // What the last handler that finished there was given, for the next one (see `handle`).
    let mut reused = None;
    // A partition's next message, run as soon as the one before it is handled (`early_run`).
    let mut early = EarlyRun::of(&session);
    let exit = loop {
        while in_flight.try_join_next().is_some() {
            flow.finished(None);
        }
        // An ordered replay whose handler failed starts nothing after that message (a handler
        // may fail inline, within this loop).
        let restarts = || session.replay.as_ref().is_some_and(|r| r.must_restart());
        // Backing off: nothing is started or asked for but one probe when it is due.
        let breaker = session.breaker.as_ref();
        // The clock is read only while the breaker is open.
        let limit = || breaker.filter(|b| b.is_open())?.limit(Instant::now());
        flow.limit(limit());
        // A partition's latest delivery is the message before the next one run early.
        if let (Some(early), Some(w)) = (early.as_deref_mut(), waiting.back()) {
            early.arrived(&session, &w.message.subject, &w.meta);
        }
        // A delivery waits while its message, or one of its key for a partition, runs (early,
        // or delivered to this session or an earlier one), and while the replica runs as many
        // of its group's handlers as it holds partitions.
        let mut seatless = false;
        while flow.may_start(running.len() + in_flight.len())
            && !restarts()
            && waiting
                .front()
                .is_some_and(|w| !held(early.as_deref(), &session, w))
            && let Some(seat) =
                seat_for(early.as_deref(), (&session, waiting.front()), &mut seatless)
            && let Some(next) = waiting.pop_front()
        {
            let started = Instant::now();
            // `map`, not an `async` block: a block would hold the future twice in its state.
            let handler = handle(
                (next.message, next.meta),
                next.deadline,
                session.clone(),
                reused.take(),
            )
            .map(move |spare| {
                drop(seat);
                (started.elapsed(), spare)
            });
            let mut slot: Pin<Box<OptionFuture<_>>> =
                spare.take().unwrap_or_else(|| Box::pin(None.into()));
            slot.set(Some(handler).into());
            // Most handlers finish without waiting: run them here, with no task.
            match slot.as_mut().now_or_never().flatten() {
                Some((took, received)) => {
                    slot.set(None.into());
                    spare = Some(slot);
                    reused = received;
                    flow.finished(Some(took));
                    // A probe that failed inline moved the next one.
                    flow.limit(limit());
                }
                // Its memory goes with it: no second allocation to wrap it.
                None => running.push(slot),
            }
        }
        if let Some(loss) = session.replay.as_ref().and_then(|r| r.take_restart()) {
            break Exit::Lost(loss);
        }
        if let Some(early) = early.as_deref_mut() {
            let allowed =
                !cancel.is_cancelled() && !feed.is_suspect() && limit().is_none() && !restarts();
            early.start(&session, allowed);
        }
        let started = running.len() + in_flight.len();
        let held = started + waiting.len();
        let readable = feed.asks() || flow.may_start(started);
        let probe_at = breaker.and_then(|b| b.probe_at());
        // One timer: the probe, when not due yet, and keeping waiting messages alive.
        let probe_ahead = probe_at.filter(|at| *at > Instant::now());
        let keep_alive_due = (!waiting.is_empty()).then_some(keep_alive_at);
        let wake = probe_ahead.into_iter().chain(keep_alive_due).min();
        // Nothing running, waiting or due but the next message, and it is here: take it
        // without the select below, whose futures (the feed's, a timer's) cost more than
        // handling a message that finishes at once.
        if readable
            && started == 0
            && waiting.is_empty()
            && probe_at.is_none()
            && !cancel.is_cancelled()
            && let Some(next) = feed.ready(&flow, held)
        {
            match receive(next, &session, &mut waiting) {
                Step::Lost(loss) => break Exit::Lost(loss),
                _ => continue,
            }
        }
        // Waiting for a seat: woken when one is freed.
        let capacity = (seatless && !waiting.is_empty())
            .then(|| early.as_deref().map(|e| e.capacity().clone()))
            .flatten();
        let step = tokio::select! {
            biased;
            _ = cancel.cancelled() => Step::Cancelled,
            Some(ran) = running.next(), if !running.is_empty() => match ran {
                Some((took, received)) => {
                    reused = reused.or(received);
                    Step::Finished(Some(took))
                }
                None => Step::Finished(None),
            },
            Some(_) = in_flight.join_next(), if !in_flight.is_empty() => Step::Finished(None),
            () = async { capacity.as_ref().expect("waiting for a seat").freed().await }, if capacity.is_some() => Step::Finished(None),
            woke = async { early.as_deref_mut().expect("busy").woke().await },
                if early.as_ref().is_some_and(|e| e.busy()) => Step::Early(woke),
            () = tokio::time::sleep_until(wake.unwrap_or_else(Instant::now)), if wake.is_some() => {
                let now = Instant::now();
                if probe_ahead.is_some_and(|at| at <= now) {
                    Step::Probe
                } else {
                    keep_alive_at = now + keep_every;
                    Step::KeepAlive
                }
            }
            next = feed.next(&flow, held), if readable => receive(next, &session, &mut waiting),
        };
        match step {
            Step::Cancelled => break Exit::Drained,
            Step::Finished(took) => flow.finished(took),
            Step::Probe => {}
            // Boxed, as the other rare waits here: inline, their bytes would stay in every
            // session's future for its lifetime.
            Step::KeepAlive => Box::pin(keep_waiting(&mut waiting, &session, keep_every)).await,
            Step::Received => {}
            Step::Early(woke) => {
                if let Some(early) = early.as_deref_mut() {
                    early.woken(woke, &session);
                }
            }
            Step::Lost(loss) => break Exit::Lost(loss),
        }
    };
    // Messages running early end before the session does, within the grace period (each
    // not delivered yet, by the time it is stopped: see `early_run`): their delivery may go to
    // another session once this one is gone, which must not run them beside this one.
    let runs = early
        .as_deref_mut()
        .map(EarlyRun::take_runs)
        .unwrap_or_default();
    let early_count = runs.len();
    let mut early_ended = Some(futures::future::join_all(runs));
    // A partition drained settles its handlers before its feed closes, within the grace
    // period: the ack of the one running brings the partition's next message to this
    // session's request, which the feed then takes and hands back (see `pull`).
    // So do the handlers an earlier session left running: the partition's next holder must
    // not run their keys beside them.
    // Meanwhile, what waits (a delivery held by such a handler) is kept alive.
    if matches!(exit, Exit::Drained) && feed.is_partition() {
        let settled = async {
            let handlers = async {
                while running.next().await.is_some() {}
                while in_flight.join_next().await.is_some() {}
            };
            futures::future::join(handlers, OptionFuture::from(early_ended.take())).await
        };
        let kept = async {
            loop {
                tokio::time::sleep(keep_every).await;
                keep_waiting(&mut waiting, &session, keep_every).await;
            }
        };
        let settled = async {
            tokio::select! {
                _ = settled => {}
                never = kept => never,
            }
        };
        if tokio::time::timeout(grace, settled).await.is_err() {
            // Stopped as the grace period stops any handler: their messages are returned by
            // the drain (see `dispatch`), rather than waiting another grace period in flight.
            let overdue = running.len() + in_flight.len() + early_count;
            warn_overdue(&session.observer.slot, overdue, grace);
            running.clear();
            in_flight.abort_all();
            while in_flight.join_next().await.is_some() {}
        }
        // So are the deliveries of messages it handled before they came (`early_run`), which
        // wait for no handler: settled again as `handle` does.
        let last = session.acks.last.as_ref();
        let ran = |w: &Waiting| {
            (last.zip(w.meta.stream_sequence)).is_some_and(|(last, sequence)| {
                last.settle_again(sequence, w.meta.published).is_some()
            })
        };
        let (ran, left): (VecDeque<Waiting>, _) = waiting.into_iter().partition(ran);
        waiting = left;
        for w in ran {
            handle((w.message, w.meta), w.deadline, session.clone(), None).await;
        }
    }
    // Handlers still running go on as tasks: a lost consumer is ensured again while they
    // finish, and a drain waits for them within its grace period.
    for handler in running {
        in_flight.spawn(handler.map(|_| ()));
    }
    if let Some(early_ended) = early_ended.filter(|_| early_count > 0)
        && tokio::time::timeout(grace, early_ended).await.is_err()
    {
        warn_overdue(&session.observer.slot, early_count, grace);
    }
    if matches!(exit, Exit::Drained) {
        session.observer.slot.transition(ConsumerState::Draining);
    }
    // Hand back what was received but not started, so that another instance takes it at once.
    let unstarted: Vec<jetstream::Message> = waiting.into_iter().map(|w| w.message).collect();
    Box::pin(hand_back(feed, unstarted, &session)).await;
    exit
}

/// Closes the feed and hands back what was received but not started, `unstarted` first.
/// A message handled already (before its delivery, see `early_run`, or by an earlier session)
/// is settled again instead.
async fn hand_back(feed: Feed, mut unstarted: Vec<jetstream::Message>, session: &Session) {
    unstarted.extend(feed.close().await);
    for message in unstarted {
        let meta = MessageMeta::of(&message);
        let handled = (session.acks.last.as_ref())
            .zip(meta.stream_sequence)
            .and_then(|(last, sequence)| last.settle_again(sequence, meta.published));
        match handled {
            Some(kind) => {
                let deadline = session.acks.deadline(Instant::now());
                if let Err(e) = session.acks.settle(&message, kind, deadline).await {
                    tracing::debug!(error = %e, "could not acknowledge a message handled before its delivery; the server delivers it again after ack_wait");
                }
            }
            None => {
                session.acks.nak(&message, None).await;
            }
        }
    }
}

/// A seat for the handler of `next`: `Some(None)` when it needs none (the session does not
/// read ahead, or `next` is settled again without its handler), `None` when the replica has
/// no room (`seatless` is set: wait for one).
fn seat_for(
    early: Option<&EarlyRun>,
    (session, next): (&Session, Option<&Waiting>),
    seatless: &mut bool,
) -> Option<Option<crate::run::shares::Seat>> {
    let Some(early) = early else {
        return Some(None);
    };
    let settled_again = (session.acks.last.as_ref().zip(next)).is_some_and(|(last, next)| {
        (next.meta.stream_sequence)
            .is_some_and(|sequence| last.settle_again(sequence, next.meta.published).is_some())
    });
    if settled_again {
        return Some(None);
    }
    let seat = early.seat();
    *seatless = seat.is_none();
    seat.map(Some)
}

/// Whether `w` waits while its message, or one of its key for a partition, runs: early (see
/// `early_run`), or delivered (see `settled::LastSettled::waits`).
fn held(early: Option<&EarlyRun>, session: &Session, w: &Waiting) -> bool {
    let at = (w.meta.stream_sequence, w.message.subject.as_str());
    early.is_some_and(|e| e.holds(session, at))
        || (session.acks.last.as_ref()).is_some_and(|last| last.waits(at.0, at.1))
}

/// A message from the feed waits to start (at the top of the session loop, as soon as there
/// is room), unless it tells the consumer is lost.
fn receive(
    next: Result<Fetched, Loss>,
    session: &Session,
    waiting: &mut VecDeque<Waiting>,
) -> Step {
    match next {
        Ok(fetched)
            if let Some(Err(loss)) = session.replay.as_ref().map(|r| r.received(&fetched.meta)) =>
        {
            Step::Lost(loss)
        }
        Ok(fetched) => {
            waiting.push_back(Waiting {
                message: fetched.message,
                meta: fetched.meta,
                deadline: session.acks.deadline(fetched.delivered_after),
                kept: Instant::now(),
            });
            Step::Received
        }
        Err(loss) => Step::Lost(loss),
    }
}

/// Sends a progress ack for each waiting message not kept alive for `every`, so that its
/// `ack_wait` does not run out while it waits here for a free handler.
async fn keep_waiting(waiting: &mut VecDeque<Waiting>, session: &Session, every: Duration) {
    let now = Instant::now();
    for w in waiting.iter_mut().filter(|w| now >= w.kept + every) {
        w.kept = now;
        session.acks.keep_alive(&w.message, &mut w.deadline).await;
    }
}

/// Waits (within the grace period) for the handlers still running; the ones still running
/// after it are stopped (their messages are recorded as abandoned, see `dispatch`).
pub(in crate::run) async fn finish_in_flight(
    in_flight: &mut JoinSet<()>,
    grace: Duration,
    slot: &Slot,
) {
    let finished = tokio::time::timeout(grace, async {
        while in_flight.join_next().await.is_some() {}
    })
    .await;
    if finished.is_err() {
        warn_overdue(slot, in_flight.len(), grace);
        in_flight.abort_all();
        while in_flight.join_next().await.is_some() {}
    }
}

fn warn_overdue(slot: &Slot, still_running: usize, grace: Duration) {
    tracing::warn!(
        stream = %slot.stream,
        consumer = %slot.consumer,
        still_running,
        ?grace,
        "handlers still running after the grace period; stopping them and returning their messages"
    );
}
