//! Priority groups on a queue consumer (nats-server 2.11, ADR-42): which of the instances
//! pulling from the shared durable the server delivers to.
//!
//! - [`Priority::PinnedClient`]: one instance consumes (the pinned one) and the others stand
//!   by; when the pinned one stops pulling for the pin's `ttl`, the server pins another.
//! - [`Priority::Overflow`]: every instance pulls, but an instance that sets thresholds (a
//!   spill-over instance) is delivered to only while the consumer's backlog reaches them.
//!
//! The policy and the group are the consumer's configuration; the thresholds travel in each
//! pull request, so they are per instance (a runtime chooses to be a spill-over instance).

use core::time::Duration;

use crate::duration;
use crate::model::Delivery;
use crate::rules::IntRange;

/// Which instance of a queue consumer the server delivers to.
///
/// ```
/// use core::time::Duration;
/// use topology_core::model::{Overflow, Priority, QueueDecl};
///
/// // One instance consumes; another takes over 10 s after it stops pulling.
/// const ACTIVE_STANDBY: QueueDecl = QueueDecl::new("sync").pinned_client(Duration::from_secs(10));
/// // Spill-over instances take work only while 100 messages or more wait.
/// const SPILL: QueueDecl = QueueDecl::new("bulk").overflow(Overflow::new().min_pending(100));
/// assert!(matches!(ACTIVE_STANDBY.priority, Some(Priority::PinnedClient { .. })));
/// assert_eq!(SPILL.priority, Some(Priority::Overflow(Overflow { min_pending: Some(100), min_ack_pending: None })));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Priority {
    /// One instance consumes; the others stand by (ready, holding pull requests the server
    /// does not serve). The server moves the pin when the pinned instance has sent no pull
    /// request for `ttl`, or at once when it unpins (the runtime does on a drain).
    PinnedClient {
        /// How long the pinned instance may go without pulling before another is pinned
        /// (the consumer's `priority_timeout`).
        ttl: Duration,
    },
    /// Every instance pulls; a spill-over instance (see `RuntimeBuilder::spill_over`) is
    /// delivered to only while the backlog reaches one of these thresholds.
    Overflow(Overflow),
}

/// The thresholds of a spill-over instance: it is delivered to only while the consumer has at
/// least `min_pending` messages not yet delivered, or at least `min_ack_pending` delivered and
/// unacknowledged (either suffices).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Overflow {
    /// Messages not yet delivered.
    pub min_pending: Option<i64>,
    /// Messages delivered and not yet acknowledged.
    pub min_ack_pending: Option<i64>,
}

impl Overflow {
    /// No threshold yet (a declaration needs at least one).
    pub const fn new() -> Self {
        Overflow {
            min_pending: None,
            min_ack_pending: None,
        }
    }
    /// Sets the backlog of undelivered messages from which spill-over instances take work.
    pub const fn min_pending(mut self, n: i64) -> Self {
        self.min_pending = Some(n);
        self
    }
    /// Sets the number of unacknowledged messages from which spill-over instances take work.
    pub const fn min_ack_pending(mut self, n: i64) -> Self {
        self.min_ack_pending = Some(n);
        self
    }
}

impl Priority {
    /// The policy's name in the server's configuration (`priority_policy`).
    pub const fn policy(&self) -> &'static str {
        match self {
            Priority::PinnedClient { .. } => "pinned_client",
            Priority::Overflow(_) => "overflow",
        }
    }
}

/// `min_pending` and `min_ack_pending`: at least 1.
pub const THRESHOLD: IntRange = IntRange {
    min: 1,
    max: i64::MAX as i128,
};

/// The shortest `pinned_ttl`: the pinned instance keeps its pin by asking again within half
/// of it, and a pull request lasts at least 100 ms; a second leaves room for a round trip.
pub const MIN_PINNED_TTL: Duration = Duration::from_secs(1);

/// The first nats-server version with priority groups.
pub const PRIORITY_SINCE: (u64, u64, u64) = (2, 11, 0);

/// What is wrong with a priority declaration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PriorityError {
    /// A pinned ttl shorter than [`MIN_PINNED_TTL`], or too long.
    PinnedTtl,
    /// Overflow without `min_pending` nor `min_ack_pending`.
    OverflowWithoutThreshold,
    /// A threshold below 1.
    Threshold,
    /// Priority groups on a push consumer (the server refuses it).
    Push,
}

impl PriorityError {
    /// What is wrong, in lowercase.
    pub const fn message(&self) -> &'static str {
        match self {
            PriorityError::PinnedTtl => {
                "pinned_ttl must be at least 1s (the pinned instance renews its pin by asking again within half of it) and at most about 292 years"
            }
            PriorityError::OverflowWithoutThreshold => {
                "overflow needs a threshold: `min_pending` or `min_ack_pending` (spill-over instances take work only past it)"
            }
            PriorityError::Threshold => "min_pending and min_ack_pending must be at least 1",
            PriorityError::Push => {
                "priority groups are for pull consumers; the server refuses them on a push consumer"
            }
        }
    }
}

/// Checks a queue consumer's priority against its delivery.
pub const fn check_priority(priority: &Priority, delivery: Delivery) -> Result<(), PriorityError> {
    if let Delivery::Push = delivery {
        return Err(PriorityError::Push);
    }
    match priority {
        Priority::PinnedClient { ttl } => {
            if ttl.as_nanos() < MIN_PINNED_TTL.as_nanos() || !duration::fits(*ttl) {
                return Err(PriorityError::PinnedTtl);
            }
        }
        Priority::Overflow(overflow) => {
            if overflow.min_pending.is_none() && overflow.min_ack_pending.is_none() {
                return Err(PriorityError::OverflowWithoutThreshold);
            }
            if let Some(n) = overflow.min_pending
                && !THRESHOLD.contains(n as i128)
            {
                return Err(PriorityError::Threshold);
            }
            if let Some(n) = overflow.min_ack_pending
                && !THRESHOLD.contains(n as i128)
            {
                return Err(PriorityError::Threshold);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rules() {
        let ttl = Priority::PinnedClient {
            ttl: Duration::from_secs(10),
        };
        assert_eq!(check_priority(&ttl, Delivery::Pull), Ok(()));
        assert_eq!(
            check_priority(&ttl, Delivery::Push),
            Err(PriorityError::Push)
        );
        let zero = Priority::PinnedClient {
            ttl: Duration::ZERO,
        };
        assert_eq!(
            check_priority(&zero, Delivery::Pull),
            Err(PriorityError::PinnedTtl)
        );
        let short = Priority::PinnedClient {
            ttl: Duration::from_millis(999),
        };
        assert_eq!(
            check_priority(&short, Delivery::Pull),
            Err(PriorityError::PinnedTtl)
        );
        let bare = Priority::Overflow(Overflow::new());
        assert_eq!(
            check_priority(&bare, Delivery::Pull),
            Err(PriorityError::OverflowWithoutThreshold)
        );
        let negative = Priority::Overflow(Overflow::new().min_ack_pending(0));
        assert_eq!(
            check_priority(&negative, Delivery::Pull),
            Err(PriorityError::Threshold)
        );
        let fine = Priority::Overflow(Overflow::new().min_pending(5));
        assert_eq!(check_priority(&fine, Delivery::Pull), Ok(()));
    }
}
