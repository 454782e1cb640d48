//! Ordered replays (`#[broadcast(ordered)]`): a relay that rebuilds a read model on every
//! instance from what the stream holds, one message at a time in stream order. Their rules,
//! shared by the macro (at the tokens) and the start-up checks (for a hand-built topology).

pub use crate::error::{ORDERED_CONCURRENCY, ORDERED_DELIVER};

use crate::error::ConsumerError;
use crate::model::{BroadcastDecl, ConsumerDecl, DeliverPolicy};

/// The rules of an ordered replay: one message at a time, from what the stream holds.
pub(crate) const fn check_ordered(
    decl: &ConsumerDecl,
    relay: &BroadcastDecl,
) -> Result<(), ConsumerError> {
    if !relay.ordered {
        return Ok(());
    }
    if let Err(e) = check_concurrency(decl.concurrency) {
        return Err(e);
    }
    check_deliver(relay.deliver)
}

/// An ordered replay's `concurrency`: none, or 1.
pub const fn check_concurrency(concurrency: Option<u32>) -> Result<(), ConsumerError> {
    match concurrency {
        Some(n) if n > 1 => Err(ConsumerError::OrderedConcurrency),
        _ => Ok(()),
    }
}

/// Where an ordered replay starts: from what the stream holds (`All` or `LastPerSubject`).
pub const fn check_deliver(deliver: DeliverPolicy) -> Result<(), ConsumerError> {
    match deliver {
        DeliverPolicy::All | DeliverPolicy::LastPerSubject => Ok(()),
        DeliverPolicy::New | DeliverPolicy::Last => Err(ConsumerError::OrderedDeliver),
    }
}

#[cfg(test)]
mod tests {
    use crate::model::{BroadcastDecl, ConsumerDecl, DeliverPolicy, StreamRef};
    use crate::rules::{ConsumerError, check_consumer};

    fn relay(relay: BroadcastDecl) -> ConsumerDecl {
        ConsumerDecl::broadcast("app::balances", StreamRef::Named("LEDGER"), relay)
    }

    #[test]
    fn an_ordered_replay_is_one_at_a_time_from_what_the_stream_holds() {
        let ordered = BroadcastDecl::new().ordered();
        assert_eq!(
            ordered.deliver,
            DeliverPolicy::All,
            "from the start by default"
        );
        assert!(ordered.in_order());
        assert_eq!(check_consumer(&relay(ordered)), Ok(()));
        assert_eq!(check_consumer(&relay(ordered).concurrency(1)), Ok(()));
        assert_eq!(
            check_consumer(&relay(ordered).concurrency(2)),
            Err(ConsumerError::OrderedConcurrency)
        );
        let latest = ordered.deliver(DeliverPolicy::LastPerSubject);
        assert_eq!(check_consumer(&relay(latest)), Ok(()));
        for deliver in [DeliverPolicy::New, DeliverPolicy::Last] {
            assert_eq!(
                check_consumer(&relay(ordered.deliver(deliver))),
                Err(ConsumerError::OrderedDeliver)
            );
        }
        // Not ordered: any start, any concurrency.
        let plain = BroadcastDecl::new();
        assert!(!plain.in_order());
        assert_eq!(check_consumer(&relay(plain).concurrency(8)), Ok(()));
    }
}
