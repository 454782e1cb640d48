//! [`LeaderTimings`]: how the leader watch waits, as settings with defaults (the
//! measurements behind them: docs/PERFORMANCE.md, "The leader watch").

use std::time::Duration;

/// The leader watch's timings ([`RuntimeBuilder::leader_timings`](crate::RuntimeBuilder::leader_timings)).
///
/// ```
/// use std::time::Duration;
/// use topology_runtime::provision::LeaderTimings;
///
/// let quick = LeaderTimings { in_flight_grace: Duration::from_millis(50), ..LeaderTimings::default() };
/// assert_eq!(quick.wake_spread, Duration::from_millis(100));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaderTimings {
    /// How long a request may go unanswered before it also waits for an election (a healthy
    /// create of a replicated stream is answered in tens of milliseconds). Default 250 ms.
    pub in_flight_grace: Duration,
    /// The retries one election wakes start at a random delay within this, so that many
    /// replicas do not arrive at the new leader in one instant. Default 100 ms.
    pub wake_spread: Duration,
    /// How long a probe of the meta leader waits for its answer, at least. Default 1 s.
    pub probe_timeout: Duration,
    /// How long the watch (its subscriptions and probes) outlives its last waiting retry.
    /// Default 1 s.
    pub linger: Duration,
    /// The longest wait before retrying a request refused for want of a peer (10005: a node
    /// restarting, announced to nobody), during the first [`peer_poll_for`] of such refusals;
    /// the usual backoff after. Default 200 ms.
    ///
    /// [`peer_poll_for`]: LeaderTimings::peer_poll_for
    pub peer_poll: Duration,
    /// See [`LeaderTimings::peer_poll`]. Default 3 s.
    pub peer_poll_for: Duration,
}

impl Default for LeaderTimings {
    fn default() -> Self {
        LeaderTimings {
            in_flight_grace: Duration::from_millis(250),
            wake_spread: Duration::from_millis(100),
            probe_timeout: Duration::from_millis(1000),
            linger: Duration::from_secs(1),
            peer_poll: Duration::from_millis(200),
            peer_poll_for: Duration::from_secs(3),
        }
    }
}
