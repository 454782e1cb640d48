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
//! and the other standing by; order is the server's too: one message at a time per partition.

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
use crate::run::shares::{Group, assign};

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
    if let Some((old, routed_by)) = group.migrates_from
        && !Box::pin(migrated(
            &inner,
            group,
            (old, routed_by),
            &mut beat,
            &cancel,
        ))
        .await
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

/// Waits, every beat, until the plain queue consumer `old` that `group` migrates from is gone;
/// deletes it once its stream routes by partition (`routed_by`, the transform: nothing new
/// reaches `old` then) and it has nothing left to deliver or to be acknowledged. What it held
/// was stored before the partition token, so no partition can read it: handled through `old`
/// (by the old fleet, and here by its consumer `superseded_by` the group), all of it before any
/// partition starts, so that a key's later messages follow its earlier ones. The partitions
/// stand by (ready) meanwhile. False when cancelled first.
async fn migrated(
    inner: &Inner,
    group: &Group,
    (old, (src, dest)): (&str, (&str, &str)),
    beat: &mut tokio::time::Interval,
    cancel: &CancellationToken,
) -> bool {
    let provisioner = inner.ensurer.provisioner();
    for &index in &group.consumers {
        let slot = &inner.health.slots[index];
        slot.standby(true);
        slot.transition(ConsumerState::Standby);
    }
    let mut said = false;
    // Beats in a row that found it routed around and read to its end: two, so that a message
    // stored just before the routing, which a replica of the consumer's may count a moment
    // later than the stream's leader stores it, is counted before the deletion.
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
        let info = match provisioner.read_consumer(group.stream, old).await {
            Ok(Some(info)) => info,
            Ok(None) => {
                tracing::info!(
                    stream = group.stream,
                    group = group.group,
                    from = old,
                    "the consumer migrated from is gone; the partitions start"
                );
                return true;
            }
            Err(e) => {
                tracing::debug!(stream = group.stream, consumer = old, error = %e, "could not read the consumer migrated from; reading it again next beat");
                continue;
            }
        };
        if !said {
            said = true;
            tracing::info!(
                stream = group.stream,
                group = group.group,
                from = old,
                pending = info.num_pending,
                ack_pending = info.num_ack_pending,
                "migrating onto partitions: the consumer migrated from is read to its end first (here and by the old fleet); the partitions stand by until then"
            );
        }
        let read_through = routed && info.num_pending == 0 && info.num_ack_pending == 0;
        drained = if read_through { drained + 1 } else { 0 };
        // Bind-only: deleting it is an operator's (as every provisioning step).
        if drained >= 2 && !provisioner.is_bind_only() {
            match provisioner.delete_consumer(group.stream, old).await {
                Ok(()) => tracing::info!(
                    stream = group.stream,
                    group = group.group,
                    consumer = old,
                    "deleted the consumer migrated from: read to its end, and the stream routes by partition"
                ),
                Err(e) => {
                    tracing::warn!(stream = group.stream, consumer = old, error = %e, "could not delete the consumer migrated from; trying again next beat")
                }
            }
        }
    }
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
