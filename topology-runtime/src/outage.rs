//! Outage-aware handling ([`OutagePolicy`], [`Breaker`]): when a queue consumer's (or an
//! endpoint's) handlers fail transiently at a high rate (what they depend on is down), the
//! consumer stops taking messages instead of having the server redeliver them against the
//! dependency until `max_deliver` terminates them, and the endpoint answers 503 at once instead
//! of running its handler against it.
//!
//! - **Opens** when, within the last `window`, at least `failures` handlers failed
//!   transiently and they are at least `ratio` of the handlers that ended (a handler that says
//!   so itself, [`HandlerError::unavailable`](crate::HandlerError::unavailable), opens it at
//!   once). Permanent errors, decode errors and successes are not failures here: one message
//!   in ten failing is poison or flakiness, not an outage.
//! - **Open**: the session asks for no messages and starts none. A message whose handler
//!   fails meanwhile is naked as usual; the server delivers it again only when asked, and the
//!   session asks only for its probes: no message nears `max_deliver`.
//! - **Probes**: after `probe_first`, one message (one already fetched, or one pulled) is
//!   handled; if it fails, the next probe waits twice as long, at most `probe_max`.
//! - **Closes** when a handler succeeds: the session pulls at full speed.
//!
//! Health shows `backing off` with the last error meanwhile; readiness stays up (the replica
//! is healthy, its dependency is not).

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// When a queue consumer stops taking messages because what its handlers depend on is down
/// (see [`RuntimeBuilder::outage`](crate::run::RuntimeBuilder::outage)): its handlers failed transiently at least `failures` times
/// within `window`, and at least `ratio` of the handlers that ended within it; or a handler
/// returned [`HandlerError::unavailable`](crate::HandlerError::unavailable).
///
/// ```
/// use std::time::Duration;
/// use nats_topology::OutagePolicy;
///
/// // A dependency that needs a while to come back: probe less often.
/// let patient = OutagePolicy {
///     probe_max: Duration::from_secs(30),
///     ..OutagePolicy::default()
/// };
/// assert_eq!(patient.failures, 10);
/// assert_eq!(OutagePolicy::disabled().failures, 0);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OutagePolicy {
    /// How far back failures are counted (default 10 s).
    pub window: Duration,
    /// How many transient failures within the window open the breaker (default 10); 0
    /// disables it (and `HandlerError::unavailable` is then an ordinary transient error).
    pub failures: u32,
    /// The share of the handlers that ended within the window that must have failed (default
    /// 0.5): one message in ten failing is poison or flakiness, not an outage.
    pub ratio: f64,
    /// The wait before the first probe (default 1 s).
    pub probe_first: Duration,
    /// The longest wait between probes (default 10 s): how long after the dependency is back
    /// the consumer may take to notice.
    pub probe_max: Duration,
}

impl Default for OutagePolicy {
    fn default() -> Self {
        OutagePolicy {
            window: Duration::from_secs(10),
            failures: 10,
            ratio: 0.5,
            probe_first: Duration::from_secs(1),
            probe_max: Duration::from_secs(10),
        }
    }
}

impl OutagePolicy {
    /// Never stop taking messages: every transient failure is naked and redelivered after its
    /// delay, as before this policy existed.
    pub const fn disabled() -> Self {
        OutagePolicy {
            window: Duration::from_secs(10),
            failures: 0,
            ratio: 0.5,
            probe_first: Duration::from_secs(1),
            probe_max: Duration::from_secs(10),
        }
    }
}

/// One queue consumer's breaker, shared by its sessions.
pub(crate) struct Breaker {
    policy: OutagePolicy,
    state: Mutex<State>,
    /// Whether it is open, or a failure was recorded within the window (as of when it last
    /// changed): while neither, a success changes nothing and is not recorded (no lock on the
    /// path of a consumer whose handlers succeed).
    watching: AtomicBool,
    /// Whether it is open (read without the lock on every turn of the session's loop).
    open: AtomicBool,
}

#[derive(Default)]
struct State {
    /// Handlers that ended within the window: when, and whether they failed transiently.
    recent: VecDeque<(Instant, Ended)>,
    open: Option<Open>,
}

/// How a handler ended, as the breaker counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    Succeeded,
    /// Failed transiently, on a message's first attempt.
    Failed,
    /// Failed transiently again: a redelivery, or an endpoint's request.
    FailedAgain,
}

struct Open {
    since: Instant,
    /// When the next probe may start.
    probe_at: Instant,
    /// The wait before the probe after the next failed one.
    interval: Duration,
    /// Handlers that failed since it opened (probes, and what was running then).
    failed: u64,
    /// A probe claimed its turn ([`Breaker::may_run`]): its failure moves the next one.
    claimed: bool,
    last_error: String,
}

/// What changed with an outcome.
pub(crate) enum Change {
    None,
    /// It opened: `cause` is the last error.
    Opened {
        cause: String,
    },
    /// It closed after being open for `open_for`, with `failed` handlers failing meanwhile.
    Closed {
        open_for: Duration,
        failed: u64,
    },
}

impl Breaker {
    pub(crate) fn new(policy: OutagePolicy) -> Breaker {
        Breaker {
            policy,
            state: Mutex::new(State::default()),
            watching: AtomicBool::new(false),
            open: AtomicBool::new(false),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether it is open: the session asks only for probes.
    pub(crate) fn is_open(&self) -> bool {
        self.open.load(Ordering::Relaxed)
    }

    /// How many messages the session may hold and start now: `None` while closed (its flow
    /// decides), 0 while open before the next probe, 1 from then on.
    pub(crate) fn limit(&self, now: Instant) -> Option<usize> {
        if !self.is_open() {
            return None;
        }
        let state = self.state();
        let open = state.open.as_ref()?;
        Some(usize::from(now >= open.probe_at))
    }

    /// Whether a request may run its handler now (an endpoint): always while closed; while
    /// open, one when a probe is due, which claims it (the next one waits for its outcome or
    /// the interval, whichever comes first).
    pub(crate) fn may_run(&self, now: Instant) -> bool {
        if !self.is_open() {
            return true;
        }
        let mut state = self.state();
        let Some(open) = state.open.as_mut() else {
            return true;
        };
        if now < open.probe_at {
            return false;
        }
        open.probe_at = now + open.interval;
        open.claimed = true;
        true
    }

    /// When the next probe may start, while open.
    pub(crate) fn probe_at(&self) -> Option<Instant> {
        if !self.is_open() {
            return None;
        }
        self.state().open.as_ref().map(|o| o.probe_at)
    }

    /// The open breaker's cause and age, for health.
    pub(crate) fn describe(&self) -> Option<String> {
        let state = self.state();
        let open = state.open.as_ref()?;
        Some(format!(
            "{} handler failures since {:.0?} ago; next probe in {:.0?}: {}",
            open.failed,
            open.since.elapsed(),
            open.probe_at.saturating_duration_since(Instant::now()),
            open.last_error
        ))
    }

    /// A handler succeeded.
    pub(crate) fn succeeded(&self) -> Change {
        if !self.watching.load(Ordering::Relaxed) {
            return Change::None;
        }
        let now = Instant::now();
        let mut state = self.state();
        self.remember(&mut state, now, Ended::Succeeded);
        let change = match state.open.take() {
            Some(open) => {
                self.open.store(false, Ordering::Relaxed);
                Change::Closed {
                    open_for: open.since.elapsed(),
                    failed: open.failed,
                }
            }
            None => Change::None,
        };
        // Closed, with no failure left in the window: successes need not be counted.
        if state
            .recent
            .iter()
            .all(|(_, ended)| *ended == Ended::Succeeded)
        {
            self.watching.store(false, Ordering::Relaxed);
        }
        change
    }

    /// A handler failed transiently with `error`; `unavailable`: the handler said that what
    /// it depends on is down; `again`: on a message that failed before (a redelivery; an
    /// endpoint's requests always count so). An outage fails messages again; a handler that
    /// fails first attempts (a conflict retried) does not, and never opens it.
    pub(crate) fn failed(&self, error: &str, unavailable: bool, again: bool) -> Change {
        let now = Instant::now();
        let mut state = self.state();
        self.watching.store(true, Ordering::Relaxed);
        let ended = if again {
            Ended::FailedAgain
        } else {
            Ended::Failed
        };
        self.remember(&mut state, now, ended);
        if let Some(open) = &mut state.open {
            open.failed += 1;
            open.last_error = error.to_owned();
            // A probe failed (what ran before it started earlier does not move the probe).
            if now >= open.probe_at || std::mem::take(&mut open.claimed) {
                open.interval = (open.interval * 2).min(self.policy.probe_max);
                open.probe_at = now + open.interval;
            }
            return Change::None;
        }
        let failures = state
            .recent
            .iter()
            .filter(|(_, ended)| *ended != Ended::Succeeded)
            .count();
        let again = state
            .recent
            .iter()
            .filter(|(_, ended)| *ended == Ended::FailedAgain)
            .count();
        let ended = state.recent.len();
        let enabled = self.policy.failures > 0;
        let outage = unavailable
            || (failures >= self.policy.failures as usize
                && again >= (self.policy.failures as usize / 2).max(1)
                && failures as f64 >= self.policy.ratio * ended as f64);
        if !enabled || !outage {
            return Change::None;
        }
        self.open.store(true, Ordering::Relaxed);
        state.open = Some(Open {
            since: now,
            probe_at: now + self.policy.probe_first,
            interval: self.policy.probe_first,
            failed: 1,
            claimed: false,
            last_error: error.to_owned(),
        });
        Change::Opened {
            cause: error.to_owned(),
        }
    }

    fn remember(&self, state: &mut State, now: Instant, ended: Ended) {
        state.recent.push_back((now, ended));
        while state
            .recent
            .front()
            .is_some_and(|(at, _)| now.duration_since(*at) > self.policy.window)
        {
            state.recent.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> OutagePolicy {
        OutagePolicy::default()
    }

    #[test]
    fn one_failure_in_ten_never_opens_it() {
        let breaker = Breaker::new(policy());
        for i in 0..1_000 {
            if i % 10 == 0 {
                assert!(matches!(breaker.failed("flaky", false, true), Change::None));
            } else {
                breaker.succeeded();
            }
        }
        assert!(!breaker.is_open());
    }

    #[test]
    fn a_run_of_failures_opens_it_and_a_success_closes_it() {
        let breaker = Breaker::new(policy());
        let mut opened = false;
        for _ in 0..policy().failures {
            opened |= matches!(
                breaker.failed("db down", false, true),
                Change::Opened { .. }
            );
        }
        assert!(opened && breaker.is_open());
        assert_eq!(
            breaker.limit(Instant::now()),
            Some(0),
            "nothing before the probe"
        );
        assert_eq!(
            breaker.limit(Instant::now() + policy().probe_first),
            Some(1),
            "one probe"
        );
        assert!(matches!(
            breaker.succeeded(),
            Change::Closed { failed, .. } if failed >= 1
        ));
        assert_eq!(breaker.limit(Instant::now()), None);
    }

    #[test]
    fn a_handler_that_fails_first_attempts_only_never_opens_it() {
        let breaker = Breaker::new(policy());
        for _ in 0..100 {
            assert!(matches!(
                breaker.failed("a conflict", false, false),
                Change::None
            ));
            breaker.succeeded();
        }
        assert!(!breaker.is_open());
    }

    #[test]
    fn a_handler_that_says_its_dependency_is_down_opens_it_at_once() {
        let breaker = Breaker::new(policy());
        assert!(matches!(
            breaker.failed("payments unavailable", true, false),
            Change::Opened { .. }
        ));
    }
}
