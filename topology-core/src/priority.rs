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

pub use crate::error::PriorityError;
pub use crate::model::{Overflow, Priority};

use crate::duration;
use crate::model::Delivery;
use crate::prim::IntRange;

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
