//! Retry with full jitter: `sleep = uniform(0, min(cap, base * 2^attempt))`, the one retry
//! primitive every retrying loop of the runtime goes through ([`RetryPolicy::run`], or a
//! [`Backoff`] where the attempts are not one call).
//!
//! Full jitter keeps the losers of a start-up race from re-synchronising: when many replicas
//! start at once against a fresh cluster, a fixed or equal-jitter window makes them collide
//! again on every attempt (see DESIGN.md, "the cold-start cliff").

use std::future::Future;
use std::time::Duration;

use rand::RngExt;
use tokio::time::Instant;

/// How an operation is retried: full-jitter waits over a doubling window, until a deadline. Provisioning uses it for transient failures
/// (request timeouts, no responders, JetStream temporarily unavailable, no leader); the
/// runtime also uses it for redelivery delays and dead-letter publishing. Configuration
/// conflicts are never retried.
///
/// The defaults follow measurements on a 3-node loopback cluster (nats-server 2.15.1):
/// - `request_timeout` 5 s: an R3 create during a leader election can take a few seconds; a
///   shorter bound turns slow successes into retries, a longer one delays the retry that a
///   lost request needs (nats.go uses 5 s too).
/// - `base` 250 ms, `cap` 5 s: the first retries spread a crowd of replicas over a window
///   several times a healthy create (tens of ms), and the window stops growing at the time a
///   re-election takes (about 6–9 s after a leader is lost).
/// - `deadline` 60 s: long enough to ride out a node restart and a re-election; a
///   supervised consumer keeps retrying after it, this only bounds one provisioning call.
///
/// ```
/// use std::time::Duration;
/// use nats_topology::RetryPolicy;
///
/// let fast = RetryPolicy {
///     base: Duration::from_millis(50),
///     deadline: Duration::from_secs(5),
///     ..RetryPolicy::default()
/// };
/// assert!(fast.window(0) <= Duration::from_millis(50));
/// assert_eq!(fast.window(30), fast.cap);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// The first window; window `n` is `base * 2^n`, capped.
    pub base: Duration,
    /// The largest window.
    pub cap: Duration,
    /// The overall time one retried operation may take, retries included: no wait starts
    /// that would end past it.
    pub deadline: Duration,
    /// The bound on each JetStream API request.
    pub request_timeout: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            base: Duration::from_millis(250),
            cap: Duration::from_secs(5),
            deadline: Duration::from_secs(60),
            request_timeout: Duration::from_secs(5),
        }
    }
}

/// Why [`RetryPolicy::run`] stopped without a success.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GaveUp {
    /// The last failure was one that retrying cannot fix.
    Final,
    /// Failures were transient, but the deadline or the attempt limit was reached.
    Exhausted,
}

/// The last error of a [`RetryPolicy::run`] that did not succeed, with how many attempts it
/// made and why it stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failed<E> {
    /// The last attempt's error.
    pub error: E,
    /// Attempts made, the last one included.
    pub attempts: u32,
    /// Why it stopped.
    pub gave_up: GaveUp,
}

impl RetryPolicy {
    /// A policy that makes one attempt (for measuring what retry buys).
    pub fn no_retry() -> Self {
        RetryPolicy {
            deadline: Duration::ZERO,
            ..RetryPolicy::default()
        }
    }

    /// The jitter window after `attempt` failures: `min(cap, base * 2^attempt)`.
    pub fn window(&self, attempt: u32) -> Duration {
        let factor = 1u32.checked_shl(attempt.min(31)).unwrap_or(u32::MAX);
        self.base.saturating_mul(factor).min(self.cap)
    }

    /// A random delay in `[0, window(attempt)]`.
    pub fn delay(&self, attempt: u32) -> Duration {
        full_jitter(self.window(attempt))
    }

    /// The waits of one retried operation whose deadline starts now.
    pub fn backoff(&self) -> Backoff {
        self.backoff_until(Some(Instant::now() + self.deadline))
    }

    /// The waits of one retried operation with the given deadline (`None`: no deadline).
    pub fn backoff_until(&self, deadline: Option<Instant>) -> Backoff {
        Backoff {
            policy: *self,
            deadline,
            max_attempts: None,
            failures: 0,
        }
    }

    /// Runs `op` until it succeeds, fails in a way `transient` says retrying cannot fix, or
    /// the next wait would pass the deadline (from now). Returns the value and the attempts
    /// made.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// use std::time::Duration;
    /// use nats_topology::RetryPolicy;
    /// use nats_topology::retry::GaveUp;
    ///
    /// let policy = RetryPolicy { base: Duration::from_millis(1), ..RetryPolicy::default() };
    /// let mut calls = 0;
    /// let (value, attempts) = policy
    ///     .run(|| { calls += 1; let n = calls; async move { if n < 3 { Err("busy") } else { Ok(n) } } },
    ///          |e| *e == "busy")
    ///     .await
    ///     .unwrap();
    /// assert_eq!((value, attempts), (3, 3));
    ///
    /// let refused = policy.run(|| async { Err::<(), _>("refused") }, |e| *e == "busy").await;
    /// assert_eq!(refused.unwrap_err().gave_up, GaveUp::Final);
    /// # }
    /// ```
    pub async fn run<T, E, F, Fut>(
        &self,
        op: F,
        transient: impl FnMut(&E) -> bool,
    ) -> Result<(T, u32), Failed<E>>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        self.backoff().run(op, transient).await
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

/// The waits between the attempts of one retried operation: full jitter over a doubling
/// window, bounded by a deadline and optionally by a number of attempts. [`RetryPolicy::run`] is built on it;
/// a loop whose attempts are not one call (a supervisor that consumes between failures)
/// uses it directly.
#[derive(Debug, Clone)]
pub struct Backoff {
    policy: RetryPolicy,
    deadline: Option<Instant>,
    max_attempts: Option<u32>,
    failures: u32,
}

impl Backoff {
    /// Stops after `attempts` attempts, whatever the deadline.
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = Some(attempts);
        self
    }

    /// Failures recorded since the start or the last [`Backoff::reset`].
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// Records a failure and returns how long to wait before the next attempt, or `None` when
    /// that wait would end past the deadline or the attempt limit is reached.
    pub fn fail(&mut self) -> Option<Duration> {
        self.failures = self.failures.saturating_add(1);
        if self.max_attempts.is_some_and(|max| self.failures >= max) {
            return None;
        }
        let delay = self.policy.delay(self.failures - 1);
        match self.deadline {
            Some(deadline) if Instant::now() + delay >= deadline => None,
            _ => Some(delay),
        }
    }

    /// Starts counting failures afresh (the window shrinks back to `base`).
    pub fn reset(&mut self) {
        self.failures = 0;
    }

    /// Runs `op` until it succeeds, fails in a way `transient` says retrying cannot fix, or
    /// [`Backoff::fail`] says to stop; see [`RetryPolicy::run`].
    pub async fn run<T, E, F, Fut>(
        self,
        op: F,
        transient: impl FnMut(&E) -> bool,
    ) -> Result<(T, u32), Failed<E>>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        self.run_waking(op, transient, None).await
    }

    /// [`Backoff::run`], woken early by `wake` (when given) after a transient failure or while
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
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// use std::future::Future;
    /// use std::pin::Pin;
    /// use std::time::Duration;
    /// use nats_topology::RetryPolicy;
    /// use nats_topology::retry::Wake;
    ///
    /// /// An event that has always just happened.
    /// struct Now;
    /// impl Wake for Now {
    ///     fn next_event(&self) -> Pin<Box<dyn Future<Output = ()> + Send>> { Box::pin(async {}) }
    ///     fn spread(&self) -> Duration { Duration::from_millis(1) }
    ///     fn in_flight_grace(&self) -> Duration { Duration::from_secs(60) }
    /// }
    ///
    /// // Without the wake, the second attempt would wait up to an hour.
    /// let slow = RetryPolicy { base: Duration::from_secs(3600), cap: Duration::from_secs(3600),
    ///                          deadline: Duration::from_secs(7200), ..RetryPolicy::default() };
    /// let mut calls = 0;
    /// let (value, attempts) = slow
    ///     .backoff()
    ///     .run_waking(|| { calls += 1; let n = calls; async move { if n < 2 { Err(()) } else { Ok(n) } } },
    ///                 |_| true, Some(&Now))
    ///     .await
    ///     .unwrap();
    /// assert_eq!((value, attempts), (2, 2));
    /// # }
    /// ```
    pub async fn run_waking<T, E, F, Fut>(
        mut self,
        mut op: F,
        mut transient: impl FnMut(&E) -> bool,
        wake: Option<&dyn Wake>,
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
            let outcome = match wake {
                None => Ok(op().await),
                Some(wake) => {
                    let grace = wake.in_flight_grace() * (1 << unanswered.min(3));
                    self.attempt_waking(op(), wake, started, grace).await
                }
            };
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
            let gave_up = if !transient(&error) {
                GaveUp::Final
            } else if let Some(delay) = self.fail() {
                let delay = match wake.and_then(|wake| wake.backoff_cap()) {
                    Some(cap) if cap < delay => full_jitter(cap),
                    _ => delay,
                };
                match wake {
                    None => tokio::time::sleep(delay).await,
                    Some(wake) => {
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
                continue;
            } else {
                GaveUp::Exhausted
            };
            return Err(Failed {
                error,
                attempts,
                gave_up,
            });
        }
    }

    /// One attempt raced against `wake`: its outcome, or why it was given up: an event came
    /// while it was in flight and it did not finish within the spread after it, or it went
    /// unanswered past its grace while the source says the server answers (then it is made
    /// again at once: there is no crowd to spread, each attempt's grace ended on its own).
    async fn attempt_waking<T, E, Fut>(
        &self,
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
        if self
            .deadline
            .is_some_and(|deadline| Instant::now() >= deadline)
        {
            return Ok(attempt.await);
        }
        Err(why)
    }
}

/// A uniformly random duration in `[0, window]`.
pub(crate) fn full_jitter(window: Duration) -> Duration {
    let nanos = u64::try_from(window.as_nanos()).unwrap_or(u64::MAX);
    if nanos == 0 {
        return Duration::ZERO;
    }
    Duration::from_nanos(rand::rng().random_range(0..=nanos))
}

mod wake;

pub use wake::Wake;

#[cfg(test)]
mod tests;
