//! Which partitions of each partitioned group this replica holds: the groups, one flag per
//! partition consumer (set by the group's membership task, read by the partition's
//! supervisor), and the assignment every replica computes alike from the same members.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::watch;

use crate::hash::fnv1a;
use crate::registry::Topology;

/// A partitioned group as this runtime runs it.
#[derive(Debug)]
pub(crate) struct Group {
    pub(crate) stream: &'static str,
    pub(crate) group: &'static str,
    /// The consumer index of each partition, by partition.
    pub(crate) consumers: Vec<usize>,
    /// What it migrates from (`migrate_from`): read to its end before the partitions start.
    pub(crate) migrates_from: Option<Migration>,
    /// How many handlers its partitions run at once here, against how many it holds.
    pub(crate) capacity: Arc<Capacity>,
}

/// How many handlers a partitioned group runs at once on this replica: as many as the
/// partitions it holds. A partition that reads ahead (see `consume::early_run`) runs a
/// message of another key beside the one it runs only while another partition held here
/// leaves its share unused (it ran dry), and a delivery waits while every seat is taken: the
/// replica's concurrency stays its share, as an unordered queue consumer's.
#[derive(Debug, Default)]
pub(crate) struct Capacity {
    limit: AtomicUsize,
    running: AtomicUsize,
    /// A seat was freed: a delivery waiting for one is started.
    freed: tokio::sync::Notify,
}

/// A handler counted by [`Capacity`] until this drops.
#[derive(Debug)]
pub(crate) struct Seat(Arc<Capacity>);

impl Drop for Seat {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::AcqRel);
        self.0.wake();
    }
}

impl Capacity {
    /// Every session waiting for a seat asks again, and so does the next to wait: a woken
    /// session that takes none (its delivery waits for another reason) leaves it to others.
    fn wake(&self) {
        self.freed.notify_waiters();
        self.freed.notify_one();
    }

    /// Waits until a seat may be free (see [`Seat`]'s drop).
    pub(crate) async fn freed(&self) {
        self.freed.notified().await;
    }

    /// A handler starts, if fewer than the limit run.
    pub(crate) fn try_enter(self: &Arc<Self>) -> Option<Seat> {
        let limit = self.limit.load(Ordering::Acquire);
        self.running
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |running| {
                (running < limit).then_some(running + 1)
            })
            .ok()?;
        Some(Seat(self.clone()))
    }
}

/// What a partitioned group migrates from: a plain queue consumer, or the partitions of a
/// group of another count.
#[derive(Debug)]
pub(crate) struct Migration {
    /// The old consumers, each with whether it is deleted once read to its end (see
    /// `Topology::deletes_once_read`).
    pub(crate) old: Vec<(&'static str, bool)>,
    /// The transform the stream routes by (`src`, `dest`): nothing new reaches the old
    /// consumers under it.
    pub(crate) routed_by: (&'static str, &'static str),
}

/// Every partitioned group, and whether this replica holds each partition.
#[derive(Debug, Default)]
pub(crate) struct Shares {
    pub(crate) groups: Vec<Group>,
    /// By consumer index: `Some` for a partition's consumer (true while this replica holds
    /// it), `None` for any other consumer.
    held: Vec<Option<watch::Sender<bool>>>,
}

impl Shares {
    /// The partitioned groups of a topology whose partitioned consumers were replaced by
    /// their partitions ([`Topology::partitioned`]). Nothing is held until membership says so.
    pub(crate) fn of(topology: &Topology) -> Shares {
        let mut groups: BTreeMap<(&str, &str), Group> = BTreeMap::new();
        let mut held = Vec::new();
        for (index, consumer) in topology.consumers().iter().enumerate() {
            // An old group's partitions are not this group's: each runs on its own (the
            // server pins one replica), held by no membership.
            let Some(partition) = consumer
                .partition
                .filter(|_| consumer.superseded_by.is_none())
            else {
                held.push(None);
                continue;
            };
            held.push(Some(watch::Sender::new(false)));
            let stream = consumer.decl.stream.name();
            let group = groups
                .entry((stream, partition.group))
                .or_insert_with(|| Group {
                    stream,
                    group: partition.group,
                    consumers: vec![usize::MAX; usize::from(partition.of)],
                    migrates_from: None,
                    capacity: Arc::default(),
                });
            group.consumers[usize::from(partition.index)] = index;
        }
        for consumer in topology.consumers() {
            let (Some(into), Some(queue)) = (consumer.superseded_by, consumer.decl.as_queue())
            else {
                continue;
            };
            let stream = consumer.decl.stream.name();
            let transform = topology
                .find_stream(stream)
                .and_then(|s| s.subject_transform);
            let (Some(group), Some(transform)) = (groups.get_mut(&(stream, into)), transform)
            else {
                continue;
            };
            let migration = group.migrates_from.get_or_insert_with(|| Migration {
                old: Vec::new(),
                routed_by: (transform.src, transform.dest),
            });
            migration
                .old
                .push((queue.group, topology.deletes_once_read(consumer)));
        }
        Shares {
            groups: groups.into_values().collect(),
            held,
        }
    }

    /// Whether the consumer at `index` is a partition's.
    pub(crate) fn is_partition(&self, index: usize) -> bool {
        matches!(self.held.get(index), Some(Some(_)))
    }

    /// The capacity of the group whose partition the consumer at `index` reads.
    pub(crate) fn capacity(&self, index: usize) -> Option<Arc<Capacity>> {
        let group = self.groups.iter().find(|g| g.consumers.contains(&index))?;
        Some(group.capacity.clone())
    }

    /// Follows whether this replica holds the partition read by the consumer at `index`.
    pub(crate) fn follow(&self, index: usize) -> Option<watch::Receiver<bool>> {
        self.held.get(index)?.as_ref().map(watch::Sender::subscribe)
    }

    /// Sets which of `group`'s partitions this replica holds (`held[p]` for partition `p`);
    /// returns how many changed hands here (taken or released).
    pub(crate) fn hold(&self, group: &Group, held: &[bool]) -> usize {
        // Before any partition starts: its first delivery takes a seat.
        let holding = held.iter().filter(|held| **held).count();
        group.capacity.limit.store(holding, Ordering::Release);
        group.capacity.wake();
        let mut changed = 0;
        for (partition, &index) in group.consumers.iter().enumerate() {
            let Some(Some(flag)) = self.held.get(index) else {
                continue;
            };
            let now = held.get(partition).copied().unwrap_or(false);
            if flag.send_if_modified(|was| std::mem::replace(was, now) != now) {
                changed += 1;
            }
        }
        changed
    }

    /// Which partitions of `group` this replica holds now.
    pub(crate) fn held(&self, group: &Group) -> Vec<u16> {
        let held = group.consumers.iter().enumerate().filter(
            |(_, index)| matches!(self.held.get(**index), Some(Some(flag)) if *flag.borrow()),
        );
        held.map(|(p, _)| p as u16).collect()
    }
}

/// Who holds each of `partitions` partitions among `members` (sorted, distinct): the index
/// of a member per partition. Every replica computes the same from the same members. Even:
/// no member holds more than `ceil(partitions / members)`; sticky: a member joining or
/// leaving moves few partitions beyond those it takes or frees (each partition goes to the
/// member ranking it highest that has room, ranks hashed from member and partition).
pub(crate) fn assign(members: &[String], partitions: u16) -> Vec<usize> {
    if members.is_empty() {
        return Vec::new();
    }
    let room = usize::from(partitions).div_ceil(members.len());
    let mut load = vec![0usize; members.len()];
    (0..partitions)
        .map(|partition| {
            let rank = |m: &usize| {
                let mut bytes = members[*m].as_bytes().to_vec();
                bytes.extend_from_slice(&partition.to_be_bytes());
                fnv1a(&bytes)
            };
            let mut order: Vec<usize> = (0..members.len()).collect();
            order.sort_by_key(|m| std::cmp::Reverse(rank(m)));
            let member = order
                .into_iter()
                .find(|m| load[*m] < room)
                .unwrap_or_default();
            load[member] += 1;
            member
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(n: usize) -> Vec<String> {
        let mut members: Vec<String> = (0..n).map(|i| format!("{:016x}", i * 7919 + 13)).collect();
        members.sort();
        members
    }

    #[test]
    fn every_partition_has_one_holder_and_shares_are_even() {
        for n in 1..=7 {
            let members = members(n);
            let holders = assign(&members, 16);
            assert_eq!(holders.len(), 16);
            let room = 16usize.div_ceil(n);
            for m in 0..n {
                let load = holders.iter().filter(|h| **h == m).count();
                assert!(
                    load <= room,
                    "{n} members: member {m} holds {load} > {room}"
                );
            }
        }
    }

    #[test]
    fn a_member_leaving_moves_little_besides_its_own() {
        let four = members(4);
        let before = assign(&four, 16);
        let three: Vec<String> = four[..3].to_vec();
        let after = assign(&three, 16);
        let moved = (0..16)
            .filter(|&p| before[p] != 3 && four[before[p]] != three[after[p]])
            .count();
        // Even shares may move a few more than the leaver's; never most of them.
        assert!(
            moved <= 4,
            "{moved} partitions moved between members that stayed"
        );
    }
}
