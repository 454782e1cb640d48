//! Retries woken by a leader's election: [`run_waking`] runs a [`Backoff`] whose waits and
//! attempts in flight end early at an event of a [`Wake`] (the leader watch's
//! [`StreamWake`](super::StreamWake)). Only provisioning uses it: its attempts are
//! idempotent CREATEs and reads, safe to repeat.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use tokio::time::Instant;

use crate::retry::{Backoff, Failed, full_jitter};

/// An event after which a retry is worth making before its backoff ends: "a JetStream
/// leader was elected" ([`StreamWake`](super::StreamWake); tests use their own). A retry
/// given one ([`run_waking`]) waits for the event beside its backoff sleep, and beside an
/// attempt that has been in flight longer than [`Wake::in_flight_grace`] (a request sent
/// while there was no leader is never answered: it would wait out its whole timeout). After
/// the event it waits a random delay in `[0, spread]` and tries again; the full-jitter
/// backoff stays the net when no event comes.
pub(crate) trait Wake: Send + Sync {
    /// Starts waiting: the future resolves at the first event after this call. Whatever the
    /// source needs to see events (a subscription) lives while some such future does.
    fn next_event(&self) -> Pin<Box<dyn Future<Output = ()> + Send + 'static>>;
    /// The spread after an event: retries of many replicas woken by one event start over
    /// `[0, spread]` instead of at one instant.
    fn spread(&self) -> Duration;
    /// How long a first attempt may be in flight before it also waits for an event (a
    /// healthy request is answered well within it).
    fn in_flight_grace(&self) -> Duration;
    /// As [`Wake::next_event`], but also resolves at once when an event the source saw came
    /// at or after `since` (an attempt's start): an event during an attempt's grace, or
    /// while it was being answered with a failure, still ends the wait that follows. The
    /// default sees only events after the call.
    fn event_since(&self, since: Instant) -> Pin<Box<dyn Future<Output = ()> + Send + 'static>> {
        let _ = since;
        self.next_event()
    }
    /// Resolves when an attempt started at `started` and still in flight looks lost: the one
    /// decision that gives up an attempt in flight (an event that wakes a sleeping retry
    /// need not lose a request already sent). The default: an event after its first `grace`
    /// (see [`Wake::event_since`] for a source that remembers events).
    fn stalled(
        &self,
        started: Instant,
        grace: Duration,
    ) -> Pin<Box<dyn Future<Output = ()> + Send + 'static>> {
        let event = self.event_since(started);
        Box::pin(async move {
            tokio::time::sleep_until(started + grace).await;
            event.await;
        })
    }
    /// Whether the source saw an event at or after `since`, asked when an attempt started
    /// at `since` is abandoned. With an event, the attempt was lost to it (an election: the
    /// replicas it woke retry over [`Wake::spread`]). Without one, [`Wake::stalled`] gave it
    /// up as merely unanswered: it is made again at once, and the next attempt's grace
    /// doubles (up to 8 times) in case the server is slow rather than deaf. The default,
    /// `true`, fits the default [`Wake::stalled`], which resolves on events only.
    fn event_seen_since(&self, since: Instant) -> bool {
        let _ = since;
        true
    }
    /// The longest the wait after the last failure may be, when the source knows that
    /// failure clears without an event it could see (a peer rejoining the cluster): the wait
    /// is then a random delay within it instead of the backoff's (when shorter). The
    /// default, `None`: the backoff's.
    fn backoff_cap(&self) -> Option<Duration> {
        None
    }
}

/// Why an attempt in flight was given up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Abandoned {
    /// An event came while it was in flight.
    AfterEvent,
    /// It went unanswered past its grace while the source says the server answers.
    Unanswered,
}

/// [`Backoff::run`], woken early by `wake` after a transient failure or while
/// an attempt is in flight longer than [`Wake::in_flight_grace`]:
///
/// - waiting out a backoff delay, an event ends the wait; the retry follows after a
///   random delay in `[0, spread]`;
/// - during an attempt, once [`Wake::stalled`] says it looks lost to an event, the same
///   spread delay starts; if the attempt has not finished by then it is abandoned (its
///   answer, if one ever comes, is ignored) and made again. Only operations that are safe
///   to repeat may be given a wake (provisioning sends idempotent CREATEs and reads);
/// - an attempt [`Wake::stalled`] gives up without an event ([`Wake::event_seen_since`])
///   is made again at once, and the grace of the next one doubles (up to 8 times);
/// - after a failure, [`Wake::backoff_cap`] may bound the wait (the failure clears
///   without an event the source could see).
///
/// Abandoning never passes the deadline: past it, the attempt in flight is awaited.
pub(crate) async fn run_waking<T, E, F, Fut>(
    mut backoff: Backoff,
    mut op: F,
    mut transient: impl FnMut(&E) -> bool,
    wake: &dyn Wake,
) -> Result<(T, u32), Failed<E>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let mut attempts = 0u32;
    // Attempts abandoned unanswered (no event in flight) so far: each doubles the grace of
    // the next (up to 8 times), so that a server slower than the grace is not sent the
    // same request again and again. An attempt lost to an election says nothing of the
    // server's speed.
    let mut unanswered = 0u32;
    loop {
        attempts += 1;
        let started = Instant::now();
        let grace = wake.in_flight_grace() * (1 << unanswered.min(3));
        let outcome = attempt_waking(&backoff, op(), wake, started, grace).await;
        let error = match outcome {
            Ok(Ok(value)) => return Ok((value, attempts)),
            Ok(Err(error)) => error,
            Err(why) => {
                // Abandoned: try again now.
                tracing::debug!(
                    attempt = attempts,
                    in_flight_ms = started.elapsed().as_millis() as u64,
                    ?why,
                    "attempt abandoned; trying again"
                );
                if why == Abandoned::Unanswered {
                    unanswered += 1;
                }
                continue;
            }
        };
        let delay = match backoff.after(transient(&error)) {
            Ok(delay) => delay,
            Err(gave_up) => {
                return Err(Failed {
                    error,
                    attempts,
                    gave_up,
                });
            }
        };
        let delay = match wake.backoff_cap() {
            Some(cap) if cap < delay => full_jitter(cap),
            _ => delay,
        };
        // An event while the failed attempt was answered counts: the
        // failure may predate it (a request that reached no leader).
        let event = wake.event_since(started);
        let slept = Instant::now();
        tokio::select! {
            () = tokio::time::sleep(delay) => tracing::debug!(
                attempt = attempts,
                delay_ms = delay.as_millis() as u64,
                "backoff slept out; trying again"
            ),
            () = event => {
                let spread = full_jitter(wake.spread()).min(delay);
                tracing::debug!(
                    attempt = attempts,
                    waited_ms = slept.elapsed().as_millis() as u64,
                    spread_ms = spread.as_millis() as u64,
                    "backoff woken by a leader event"
                );
                tokio::time::sleep(spread).await;
            }
        }
    }
}

/// One attempt raced against `wake`: its outcome, or why it was given up: an event came
/// while it was in flight and it did not finish within the spread after it, or it went
/// unanswered past its grace while the source says the server answers (then it is made
/// again at once: there is no crowd to spread, each attempt's grace ended on its own).
async fn attempt_waking<T, E, Fut>(
    backoff: &Backoff,
    attempt: Fut,
    wake: &dyn Wake,
    started: Instant,
    grace: Duration,
) -> Result<Result<T, E>, Abandoned>
where
    Fut: Future<Output = Result<T, E>>,
{
    let mut attempt = std::pin::pin!(attempt);
    // Whether an attempt in flight is lost is the source's one decision (`stalled`): an
    // event that wakes a sleeping retry need not lose a request already sent.
    tokio::select! {
        outcome = &mut attempt => return Ok(outcome),
        () = wake.stalled(started, grace) => {}
    }
    let why = if wake.event_seen_since(started) {
        Abandoned::AfterEvent
    } else {
        Abandoned::Unanswered
    };
    if why == Abandoned::AfterEvent {
        tokio::select! {
            outcome = &mut attempt => return Ok(outcome),
            () = tokio::time::sleep(full_jitter(wake.spread())) => {}
        }
    }
    if backoff
        .deadline()
        .is_some_and(|deadline| Instant::now() >= deadline)
    {
        return Ok(attempt.await);
    }
    Err(why)
}
