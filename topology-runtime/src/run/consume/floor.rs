//! A queue consumer's ack floor on the server, followed while its session runs: the resume
//! point of a consumer re-created after a loss, its lag gauges, and whether this server leads
//! it while cut off from its peers.

use std::sync::atomic::Ordering;

use super::resume::Resume;
use crate::health::Slot;
use crate::provision::StreamInstance;
use crate::run::Inner;
use crate::telemetry::LagGauges;

/// An idle consumer's ack floor is read every this many heartbeats (see [`follow_ack_floor`]).
pub(super) const IDLE_READ_EVERY: u32 = 4;

/// Keeps the resume point at the consumer's ack floor on the server, read every heartbeat
/// (5 s by default) while the consumer has work, so that a consumer deleted out of band is
/// re-created where it was acknowledged, not at the start of its stream. Only a floor of the
/// consumer this session bound (the same `created` time) counts: it lives in the session's
/// stream instance. The same read sets the consumer's lag gauges (pending, ack pending), and
/// tells the reach watch when this server leads the consumer's group while cut off from its
/// peers.
///
/// An idle consumer (nothing settled here since the last read, which found nothing pending
/// or unacknowledged) is read every [`IDLE_READ_EVERY`] heartbeats instead: its floor has not
/// moved, and its lag is nil. Every heartbeat again as soon as it has work, JetStream does not
/// answer through this connection (a partition: the read tells whether this server is cut
/// off), the last read went unanswered, or this server is cut off. A lost or stalled consumer
/// is noticed by its pull session (its idle heartbeats), not by this read. Never returns.
pub(super) async fn follow_ack_floor(
    inner: &Inner,
    (stream, consumer, created): (&str, &str, &str),
    instance: &StreamInstance,
    resume: &Resume,
    slot: &Slot,
) -> std::convert::Infallible {
    let mut every = tokio::time::interval(inner.settings.heartbeat);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Registered at the first read: no series shows a lag of 0 before the server was asked.
    let mut lag: Option<LagGauges> = None;
    // What the last read found: work at the consumer (or no answer); how much had been
    // settled here then; heartbeats since.
    let mut busy = true;
    let mut settled_then = u64::MAX;
    let mut idle_ticks = 0;
    every.tick().await;
    loop {
        every.tick().await;
        let settled = [
            &slot.handled,
            &slot.failed,
            &slot.retried,
            &slot.dead_lettered,
        ]
        .iter()
        .map(|n| n.load(Ordering::Relaxed))
        .sum::<u64>();
        idle_ticks += 1;
        let wanted = busy
            || settled != settled_then
            || slot.is_cut_off()
            || !inner.health.shared.reach.is_reachable()
            || idle_ticks >= IDLE_READ_EVERY;
        if !wanted {
            continue;
        }
        idle_ticks = 0;
        settled_then = settled;
        busy = true;
        let read = Box::pin(inner.ensurer.provisioner().read_consumer(stream, consumer));
        if let Ok(Some(info)) = read.await
            && info.created.to_string() == created
        {
            busy = info.num_pending > 0 || info.num_ack_pending > 0;
            // A leader here that hears nothing from its peers: this server is cut off, and
            // this consumer with it (its idle heartbeats still come: the pull session alone
            // would call it running). Marked before the reach watch is woken to move.
            let server = inner.common.client.server_info().server_name;
            let cut_off = crate::run::watchers::cut_off(info.cluster.as_ref(), &server);
            slot.cut_off(cut_off.as_ref());
            inner
                .health
                .shared
                .reach
                .leads_cut_off(&server, cut_off.map(|(_, why)| why));
            lag.get_or_insert_with(|| LagGauges::new(stream, consumer))
                .set(&info);
            let floor = resume.follow(instance, info.ack_floor.stream_sequence);
            slot.ack_floor.store(floor, Ordering::Relaxed);
        }
    }
}
