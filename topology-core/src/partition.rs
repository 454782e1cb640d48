//! Partitioned queue consumers: the messages of one key (a member, an order, an account)
//! handled one at a time in stream order, different keys in parallel, across every replica.
//!
//! The stream routes by key: its `subject_transform` writes a `{{partition(n, k..)}}` token
//! into each stored subject (nats-server computes it from the key's wildcard tokens), and the
//! group reads it through one durable consumer per partition, filtered on that token. Each
//! partition's consumer delivers one message at a time (`max_ack_pending = 1`) to the one
//! replica the server pins (a priority group with a pinned client), so a message is handled
//! only after the one before it in its partition is settled, whichever replica holds it.
//!
//! ```
//! use topology_core::partition::{check_partitioning, Partitioning, PartitionError};
//!
//! let by_member = Partitioning::new(16, &[1]);
//! assert_eq!(check_partitioning("orders.*.paid", &by_member), Ok(()));
//! assert_eq!(
//!     check_partitioning("orders.paid", &by_member),
//!     Err(PartitionError::KeyPastWildcards { position: 1, wildcards: 0 })
//! );
//! ```

pub use crate::error::PartitionError;
pub use crate::model::Partitioning;

use crate::model::{ConsumerDecl, ConsumerKind, Delivery};
use crate::prim::IntRange;

/// How many partitions a group may have: each is a consumer on the server, and a replica
/// holds its share of them.
pub const PARTITIONS: IntRange = IntRange { min: 1, max: 1024 };

/// The first nats-server version a partitioned consumer runs on: it needs priority groups
/// with a pinned client.
pub const PARTITIONS_SINCE: (u64, u64, u64) = crate::priority::PRIORITY_SINCE;

/// Checks a partitioning against the consumer's filter `subject`: a count in [`PARTITIONS`],
/// a key of distinct `*` positions the subject has.
pub const fn check_partitioning(
    subject: &str,
    partitioning: &Partitioning,
) -> Result<(), PartitionError> {
    if !PARTITIONS.contains(partitioning.partitions as i128) {
        return Err(PartitionError::Count);
    }
    if partitioning.key.is_empty() {
        return Err(PartitionError::EmptyKey);
    }
    let wildcards = wildcards(subject);
    let mut i = 0;
    while i < partitioning.key.len() {
        let position = partitioning.key[i];
        if position == 0 || position as usize > wildcards {
            return Err(PartitionError::KeyPastWildcards {
                position,
                wildcards: wildcards as u8,
            });
        }
        let mut j = 0;
        while j < i {
            if partitioning.key[j] == position {
                return Err(PartitionError::KeyRepeated { position });
            }
            j += 1;
        }
        i += 1;
    }
    Ok(())
}

/// Checks what a partitioned consumer leaves to the partitions: one filter subject, a pull
/// queue consumer, no priority policy, `max_ack_pending`, batch nor `concurrency` of its own;
/// `migrate_from_partitions` only beside `migrate_from` on a partitioned consumer. `Ok` for a
/// consumer that is neither partitioned nor says what it migrates from is.
pub const fn check_partitioned_consumer(decl: &ConsumerDecl) -> Result<(), PartitionError> {
    let queue = match &decl.kind {
        ConsumerKind::Queue(queue) => queue,
        ConsumerKind::Broadcast(_) => return Ok(()),
    };
    let Some(partitioning) = &queue.partitioned else {
        if queue.migrate_from_partitions.is_some() {
            return Err(PartitionError::MigrateFromPartitionsAlone);
        }
        return Ok(());
    };
    if let Some(old) = queue.migrate_from_partitions {
        if queue.migrate_from.is_none() {
            return Err(PartitionError::MigrateFromPartitionsAlone);
        }
        if !PARTITIONS.contains(old as i128) {
            return Err(PartitionError::MigrateFromPartitionsCount);
        }
    }
    if decl.subjects.len() != 1 {
        return Err(PartitionError::OneSubject);
    }
    if let Err(error) = check_partitioning(decl.subjects[0], partitioning) {
        return Err(error);
    }
    if let Delivery::Push = queue.delivery {
        return Err(PartitionError::Push);
    }
    if queue.priority.is_some() {
        return Err(PartitionError::Priority);
    }
    if queue.max_ack_pending.is_some() {
        return Err(PartitionError::MaxAckPending);
    }
    if queue.batch.is_some() {
        return Err(PartitionError::Batch);
    }
    if decl.concurrency.is_some() {
        return Err(PartitionError::Concurrency);
    }
    Ok(())
}

/// How many `*` tokens `subject` has.
const fn wildcards(subject: &str) -> usize {
    let bytes = subject.as_bytes();
    let (mut count, mut start, mut i) = (0, 0, 0);
    while i <= bytes.len() {
        if i == bytes.len() || bytes[i] == b'.' {
            if i == start + 1 && bytes[start] == b'*' {
                count += 1;
            }
            start = i + 1;
        }
        i += 1;
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rules() {
        let ok = Partitioning::new(16, &[1]);
        assert_eq!(check_partitioning("orders.*.paid", &ok), Ok(()));
        assert_eq!(
            check_partitioning("orders.*.*", &Partitioning::new(4, &[2, 1])),
            Ok(())
        );
        assert_eq!(
            check_partitioning("orders.*.paid", &Partitioning::new(0, &[1])),
            Err(PartitionError::Count)
        );
        assert_eq!(
            check_partitioning("orders.*.paid", &Partitioning::new(1025, &[1])),
            Err(PartitionError::Count)
        );
        assert_eq!(
            check_partitioning("orders.*.paid", &Partitioning::new(4, &[])),
            Err(PartitionError::EmptyKey)
        );
        assert_eq!(
            check_partitioning("orders.*.paid", &Partitioning::new(4, &[2])),
            Err(PartitionError::KeyPastWildcards {
                position: 2,
                wildcards: 1
            })
        );
        assert_eq!(
            check_partitioning("orders.*.*", &Partitioning::new(4, &[1, 1])),
            Err(PartitionError::KeyRepeated { position: 1 })
        );
        // `>` is not a key token: the server's partition() reads `*` tokens only.
        assert_eq!(
            check_partitioning("orders.>", &ok),
            Err(PartitionError::KeyPastWildcards {
                position: 1,
                wildcards: 0
            })
        );
        assert_eq!(wildcards("*.a.*"), 2);
        assert_eq!(wildcards("a*.b"), 0);
    }

    #[test]
    fn the_old_count_goes_with_an_old_group_and_a_partitioned_consumer() {
        use crate::model::{ConsumerDecl, QueueDecl, StreamRef};
        let check = |queue: QueueDecl| {
            let decl = ConsumerDecl::queue("svc::h", StreamRef::Named("O"), queue)
                .subjects(&["orders.*.paid"]);
            check_partitioned_consumer(&decl)
        };
        let new = QueueDecl::new("v2").partitioned(8, &[1]);
        assert_eq!(
            check(new.migrate_from("v1").migrate_from_partitions(4)),
            Ok(())
        );
        assert_eq!(
            check(new.migrate_from_partitions(4)),
            Err(PartitionError::MigrateFromPartitionsAlone)
        );
        assert_eq!(
            check(
                QueueDecl::new("v2")
                    .migrate_from("v1")
                    .migrate_from_partitions(4)
            ),
            Err(PartitionError::MigrateFromPartitionsAlone)
        );
        assert_eq!(
            check(new.migrate_from("v1").migrate_from_partitions(0)),
            Err(PartitionError::MigrateFromPartitionsCount)
        );
    }
}
