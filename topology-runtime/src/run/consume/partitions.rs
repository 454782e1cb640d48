//! Partitioned queue consumers at run time (docs/PARTITIONS.md):
//!
//! - [`share`]: the group's membership, one task per partitioned group. Each replica keeps a
//!   key of its own in the members' bucket (`MEMBERS_BUCKET`, whose `max_age` drops the key
//!   of a replica that stops renewing it), reads the group's keys every beat, and holds the
//!   partitions [`crate::run::shares::assign`] gives it among them.
//! - [`hold`]: one partition's supervisor, run while this replica holds the partition and
//!   drained (in-flight messages settled, the pin released) when it no longer does.
//!
//! Exclusivity is the server's: every partition is a pinned client, so two replicas that
//! both believe they hold it (their views of the members differ for a beat) have one pinned
//! and the other standing by; order is the server's too: one delivery at a time per partition
//! (what a session runs before its delivery keeps it: see `early_run`).

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, kv};
use futures::StreamExt;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::supervise::supervise;
use crate::health::ConsumerState;
use crate::provision::ProvisionError;
use crate::registry::{MEMBER_BEAT, MEMBER_TTL, MEMBERS_BUCKET};
use crate::run::Inner;
use crate::run::shares::{Group, Migration, assign};

/// Beats in a row whose membership read fails before it is said (WARN, and in the health of
/// partitions not assigned yet): the members' bucket is created beside the streams at start-up.
const FAILED_BEATS: u32 = 5;

/// How long a drained replica waits for its key's removal before leaving it to `MEMBER_TTL`.
const LEAVE_WAIT: Duration = Duration::from_secs(1);

/// Runs the membership of `inner.shares.groups[group]` until `cancel`: renews this replica's
/// key, reads the members, holds this replica's share. On `cancel`, removes the key first, so
/// that the others take its partitions as soon as its drains release them.
pub(in crate::run) async fn share(inner: Arc<Inner>, group: usize, cancel: CancellationToken) {
    let group = &inner.shares.groups[group];
    let key = format!("{}.{}.{}", group.stream, group.group, inner.instance);
    let js = inner.ensurer.provisioner().jetstream().clone();
    let mut beat = tokio::time::interval(MEMBER_BEAT);
    beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    if let Some(migration) = &group.migrates_from
        && !Box::pin(migrated(&inner, group, migration, &mut beat, &cancel)).await
    {
        return;
    }
    let mut bucket: Option<kv::Store> = None;
    // Beats in a row that could not renew this replica's key or read the others'.
    let mut failed = 0u32;
    loop {
        tokio::select! {
            _ = beat.tick() => {}
            _ = cancel.cancelled() => break,
        }
        let store = match &bucket {
            Some(store) => Ok(store),
            // The bucket is ensured beside the streams at start-up: not there yet at first.
            None => match Box::pin(open_bucket(&js)).await {
                Ok(store) => Ok(&*bucket.insert(store)),
                Err(error) => Err(format!(
                    "cannot open the members' bucket `{MEMBERS_BUCKET}`: {error}"
                )),
            },
        };
        let read = match store {
            Ok(store) => match store.put(key.as_str(), inner.instance.clone().into()).await {
                Ok(_) => Box::pin(members(&js, group)).await,
                Err(e) => Err(format!(
                    "cannot renew this replica's key `{key}` in `{MEMBERS_BUCKET}`: {e}"
                )),
            },
            Err(error) => Err(error),
        };
        match read {
            Ok(members) => {
                failed = 0;
                apply(&inner, group, &members);
            }
            Err(error) => {
                failed += 1;
                if failed == FAILED_BEATS {
                    tracing::warn!(
                        stream = group.stream,
                        group = group.group,
                        error,
                        "the partitioned group's membership fails; this replica keeps the partitions it holds (the server pins each to one replica) and asks again every beat"
                    );
                } else {
                    tracing::debug!(
                        stream = group.stream,
                        group = group.group,
                        error,
                        "could not read the partition members; keeping the current share"
                    );
                }
                if failed >= FAILED_BEATS {
                    // A partition never assigned here says why, rather than `starting`.
                    let unheld = group.consumers.iter().filter(|&&index| {
                        inner
                            .shares
                            .follow(index)
                            .is_some_and(|held| !*held.borrow())
                    });
                    for &index in unheld {
                        let slot = &inner.health.slots[index];
                        if matches!(
                            slot.state(),
                            ConsumerState::Starting | ConsumerState::Retrying { .. }
                        ) {
                            slot.transition(ConsumerState::Retrying {
                                attempt: failed,
                                error: error.clone(),
                            });
                        }
                    }
                }
            }
        }
    }
    if bucket.is_some() {
        // Purged rather than deleted: a delete leaves a marker under the key until `max_age`,
        // which the others would read as a member.
        let subject = format!("$KV.{MEMBERS_BUCKET}.{key}");
        let purge = async {
            let stream = js.get_stream(format!("KV_{MEMBERS_BUCKET}")).await?;
            stream.purge().filter(subject).await?;
            Ok::<_, async_nats::Error>(())
        };
        match tokio::time::timeout(LEAVE_WAIT, purge).await {
            Ok(Ok(())) => tracing::info!(
                stream = group.stream,
                group = group.group,
                "left the partitioned group: the others take this replica's partitions"
            ),
            Ok(Err(e)) => {
                tracing::warn!(stream = group.stream, group = group.group, error = %e, "could not leave the partitioned group; the others take its partitions after {MEMBER_TTL:?}")
            }
            Err(_) => tracing::warn!(
                stream = group.stream,
                group = group.group,
                "no answer leaving the partitioned group; the others take its partitions after {MEMBER_TTL:?}"
            ),
        }
    }
}

/// Waits, every beat, until what `group` migrates from is read to its end: a plain queue
/// consumer, or the partitions of a group of another count. Each is deleted once its stream
/// routes by the group's partitions (`routed_by`: nothing new reaches it then) and it has
/// nothing left to deliver or to be acknowledged; the partitions start once every one is gone
/// (or, for old partitions no new one names, left read to its end: an old instance that found
/// one gone would create it again). What they held was stored before the routing, so no
/// partition of this group can read it: handled through them (by the old fleet, and here by
/// their consumers `superseded_by` the group), all of it before any partition starts, so that
/// a key's later messages follow its earlier ones. The partitions stand by (ready) meanwhile.
/// False when cancelled first.
async fn migrated(
    inner: &Inner,
    group: &Group,
    migration: &Migration,
    beat: &mut tokio::time::Interval,
    cancel: &CancellationToken,
) -> bool {
    let provisioner = inner.ensurer.provisioner();
    let (src, dest) = migration.routed_by;
    for &index in &group.consumers {
        let slot = &inner.health.slots[index];
        slot.standby(true);
        slot.transition(ConsumerState::Standby);
    }
    let mut said = false;
    // Beats in a row that found them routed around and read to their end: two, so that a
    // message stored just before the routing, which a replica of a consumer's may count a
    // moment later than the stream's leader stores it, is counted before the deletion.
    let mut drained = 0u32;
    loop {
        tokio::select! {
            _ = beat.tick() => {}
            _ = cancel.cancelled() => return false,
        }
        // The routing first: a consumer found drained after it stays drained.
        let routed = match provisioner.read_stream(group.stream).await {
            Ok(Some(info)) => info
                .config
                .subject_transform
                .is_some_and(|t| t.source == src && t.destination == dest),
            _ => false,
        };
        let Some(left) = Box::pin(still_there(inner, group, &migration.old)).await else {
            continue;
        };
        if left.iter().all(|(_, _, deleted)| !deleted) && (drained >= 2 || left.is_empty()) {
            if !left.is_empty() {
                let names: Vec<&str> = left.iter().map(|(name, _, _)| *name).collect();
                tracing::warn!(
                    stream = group.stream,
                    group = group.group,
                    left = ?names,
                    "the old partitions no new partition names are read to their end and left in \
                     place (an old instance that found one deleted would create it again): \
                     delete them once the old fleet is gone (`nats consumer rm`)"
                );
            }
            tracing::info!(
                stream = group.stream,
                group = group.group,
                "what the group migrates from is read to its end; the partitions start"
            );
            return true;
        }
        if !said {
            said = true;
            let pending: u64 = left.iter().map(|(_, info, _)| info.num_pending).sum();
            let ack_pending: usize = left.iter().map(|(_, info, _)| info.num_ack_pending).sum();
            let from: Vec<&str> = left.iter().map(|(name, _, _)| *name).collect();
            tracing::info!(
                stream = group.stream,
                group = group.group,
                from = ?from,
                pending,
                ack_pending,
                "migrating onto partitions: what the group migrates from is read to its end first (here and by the old fleet); the partitions stand by until then"
            );
        }
        let read_through = routed
            && left
                .iter()
                .all(|(_, info, _)| info.num_pending == 0 && info.num_ack_pending == 0);
        drained = if read_through { drained + 1 } else { 0 };
        // Bind-only: deleting them is an operator's (as every provisioning step).
        if drained < 2 || provisioner.is_bind_only() {
            continue;
        }
        for (old, _, _) in left.iter().filter(|(_, _, deleted)| *deleted) {
            match provisioner.delete_consumer(group.stream, old).await {
                Ok(()) => tracing::info!(
                    stream = group.stream,
                    group = group.group,
                    consumer = old,
                    "deleted a consumer migrated from: read to its end, and the stream routes by partition"
                ),
                Err(e) => {
                    tracing::warn!(stream = group.stream, consumer = old, error = %e, "could not delete the consumer migrated from; trying again next beat")
                }
            }
        }
    }
}

/// The consumers of `old` still on the server, with their info and whether each is to be
/// deleted; `None` when one could not be read (read again next beat).
async fn still_there(
    inner: &Inner,
    group: &Group,
    old: &[(&'static str, bool)],
) -> Option<Vec<(&'static str, async_nats::jetstream::consumer::Info, bool)>> {
    let provisioner = inner.ensurer.provisioner();
    let mut left = Vec::new();
    for &(name, deleted) in old {
        match provisioner.read_consumer(group.stream, name).await {
            Ok(Some(info)) => left.push((name, info, deleted)),
            Ok(None) => {}
            Err(e) => {
                tracing::debug!(stream = group.stream, consumer = name, error = %e, "could not read a consumer migrated from; reading it again next beat");
                return None;
            }
        }
    }
    Some(left)
}

/// The members' bucket (declared with the partitioned consumers, provisioned as every bucket).
async fn open_bucket(js: &jetstream::Context) -> Result<kv::Store, String> {
    js.get_key_value(MEMBERS_BUCKET)
        .await
        .map_err(|e| e.to_string())
}

/// The group's members (instance ids, sorted): the keys under `<stream>.<group>.` in the
/// bucket, read from the stream's subjects in one request.
async fn members(js: &jetstream::Context, group: &Group) -> Result<Vec<String>, String> {
    let prefix = format!("$KV.{MEMBERS_BUCKET}.{}.{}.", group.stream, group.group);
    let stream = js
        .get_stream(format!("KV_{MEMBERS_BUCKET}"))
        .await
        .map_err(|e| e.to_string())?;
    let mut subjects = stream
        .info_with_subjects(format!("{prefix}*"))
        .await
        .map_err(|e| e.to_string())?;
    let mut members = Vec::new();
    while let Some(subject) = subjects.next().await {
        let (subject, _) = subject.map_err(|e| e.to_string())?;
        if let Some(member) = subject.strip_prefix(&prefix) {
            members.push(member.to_owned());
        }
    }
    members.sort();
    members.dedup();
    Ok(members)
}

/// Holds this replica's share of `group` among `members`.
fn apply(inner: &Inner, group: &Group, members: &[String]) {
    let Ok(me) = members.binary_search(&inner.instance) else {
        // Its own key not listed yet (the renewal failed): changes nothing.
        return;
    };
    let holders = assign(members, group.consumers.len() as u16);
    let held: Vec<bool> = holders.iter().map(|h| *h == me).collect();
    let changed = inner.shares.hold(group, &held);
    // The partitions another replica holds stand by here (ready to take them), from the
    // first read of the members on.
    for (&index, held) in group.consumers.iter().zip(&held) {
        let slot = &inner.health.slots[index];
        if !held
            && matches!(
                slot.state(),
                ConsumerState::Starting | ConsumerState::Retrying { .. }
            )
        {
            slot.standby(true);
            slot.transition(ConsumerState::Standby);
        }
    }
    let holding = inner.shares.held(group);
    if changed > 0 {
        tracing::info!(stream = group.stream, group = group.group, members = members.len(), partitions = ?holding, "partitions rebalanced: this replica holds {} of {}", holding.len(), group.consumers.len());
    }
    crate::telemetry::partitions_held(group.stream, group.group, holding.len(), changed > 0);
}

/// Supervises the partition read by the consumer at `index` while this replica holds it;
/// stands by (ready) while another does. A release drains the session: its in-flight message
/// is settled (or given back at the grace period), its pin released, before another replica
/// is delivered anything of the partition.
pub(in crate::run) async fn hold(
    inner: Arc<Inner>,
    index: usize,
    cancel: CancellationToken,
    fatal: mpsc::UnboundedSender<ProvisionError>,
) {
    let Some(mut held) = inner.shares.follow(index) else {
        return Box::pin(supervise(inner, index, cancel, fatal)).await;
    };
    let slot = inner.health.slots[index].clone();
    loop {
        tokio::select! {
            gone = async { held.wait_for(|held| *held).await.is_err() } => if gone { return },
            _ = cancel.cancelled() => {
                slot.transition(ConsumerState::Stopped { error: None });
                return;
            }
        }
        let session = cancel.child_token();
        let mut supervised = Box::pin(supervise(
            inner.clone(),
            index,
            session.clone(),
            fatal.clone(),
        ));
        tokio::select! {
            () = &mut supervised => return,
            gone = async { held.wait_for(|held| !*held).await.is_err() } => {
                session.cancel();
                supervised.await;
                if gone || cancel.is_cancelled() {
                    return;
                }
            }
        }
        if matches!(slot.state(), ConsumerState::Stopped { error: Some(_) }) {
            return;
        }
        slot.standby(true);
        slot.transition(ConsumerState::Standby);
    }
}
