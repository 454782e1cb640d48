//! Retry with full jitter: `sleep = uniform(0, min(cap, base * 2^attempt))`, the one retry
//! primitive every retrying loop of the runtime goes through ([`RetryPolicy::run`], or a
//! [`Backoff`] where the attempts are not one call).
//!
//! Full jitter keeps the losers of a start-up race from re-synchronising: when many replicas
//! start at once against a fresh cluster, a fixed or equal-jitter window makes them collide
//! again on every attempt (see docs/PERFORMANCE.md, "Why CREATE first").

use std::future::Future;
use std::time::Duration;

use rand::RngExt;
use tokio::time::Instant;

/// How an operation is retried: full-jitter waits over a doubling window, until a deadline.
/// Provisioning uses it for transient failures (request timeouts, no responders, JetStream
/// temporarily unavailable, no leader); the runtime also uses it for redelivery delays and
/// dead-letter publishing. Configuration conflicts are never retried. The measurements
/// behind the defaults: docs/PERFORMANCE.md, "Retry defaults".
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
    /// The delay before a message's redelivery, delivered `delivered` times: the declared
    /// `backoff` for this attempt (its last entry repeats), or full jitter over this policy's
    /// doubling window when none is declared.
    pub(crate) fn after(&self, backoff: &[Duration], delivered: u64) -> Duration {
        let attempt = delivered.saturating_sub(1);
        match backoff {
            [] => self.delay(u32::try_from(attempt).unwrap_or(u32::MAX)),
            delays => {
                delays[usize::try_from(attempt)
                    .unwrap_or(usize::MAX)
                    .min(delays.len() - 1)]
            }
        }
    }

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

/// The waits between the attempts of one retried operation: full jitter over a doubling
/// window, bounded by a deadline and optionally by a number of attempts.
/// [`RetryPolicy::run`] is built on it; a loop whose attempts are not one call (a supervisor
/// that consumes between failures) uses it directly.
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
        mut self,
        mut op: F,
        mut transient: impl FnMut(&E) -> bool,
    ) -> Result<(T, u32), Failed<E>>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            let error = match op().await {
                Ok(value) => return Ok((value, attempts)),
                Err(error) => error,
            };
            match self.after(transient(&error)) {
                Ok(delay) => tokio::time::sleep(delay).await,
                Err(gave_up) => {
                    return Err(Failed {
                        error,
                        attempts,
                        gave_up,
                    });
                }
            }
        }
    }

    /// After a failed attempt (`transient` or not): the delay before the next, or why there
    /// is none.
    pub(crate) fn after(&mut self, transient: bool) -> Result<Duration, GaveUp> {
        if !transient {
            return Err(GaveUp::Final);
        }
        self.fail().ok_or(GaveUp::Exhausted)
    }

    /// The deadline no wait may pass (`None`: none).
    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.deadline
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

#[cfg(test)]
mod tests;
