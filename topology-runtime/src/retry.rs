//! Retry with full jitter: `sleep = uniform(0, min(cap, base * 2^attempt))`.
//!
//! Full jitter keeps the losers of a start-up race from re-synchronising: when many replicas
//! start at once against a fresh cluster, a fixed or equal-jitter window makes them collide
//! again on every attempt (see DESIGN.md, "the cold-start cliff").

use std::time::Duration;

use rand::RngExt;

/// How provisioning retries transient failures (request timeouts, no responders, JetStream
/// temporarily unavailable, no leader). Configuration conflicts are never retried.
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
    /// The overall time one provisioning call may take, retries included.
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
mod tests {
    use super::*;

    #[test]
    fn window_doubles_then_caps() {
        let policy = RetryPolicy {
            base: Duration::from_millis(100),
            cap: Duration::from_secs(1),
            ..RetryPolicy::default()
        };
        assert_eq!(policy.window(0), Duration::from_millis(100));
        assert_eq!(policy.window(1), Duration::from_millis(200));
        assert_eq!(policy.window(3), Duration::from_millis(800));
        assert_eq!(policy.window(4), Duration::from_secs(1));
        assert_eq!(policy.window(u32::MAX), Duration::from_secs(1));
    }

    #[test]
    fn delays_stay_inside_the_window_and_spread() {
        let policy = RetryPolicy::default();
        let delays: Vec<_> = (0..200).map(|_| policy.delay(2)).collect();
        assert!(delays.iter().all(|d| *d <= policy.window(2)));
        let distinct: std::collections::HashSet<_> = delays.iter().collect();
        assert!(distinct.len() > 150, "full jitter must spread delays");
    }
}
