//! A partition's session handles no delivery the server has moved past.
//!
//! A partition's consumer delivers one message at a time (`max_ack_pending = 1`), so its latest
//! delivery is the only one that may be handled. A delivery can reach this instance late: held
//! in a stalled link or behind a partitioned route while its `ack_wait` ran out, the server
//! meanwhile delivering it again, and the messages after it, to the instance the partition
//! moved to. Handled now, it would run after later messages of its key. So after anything that
//! may have held deliveries back (a silence, a reconnect, a new consumer leader, a pin taken or
//! lost) and at the session's start, the next delivery is handled only once the consumer's info
//! says it is the latest one (its delivery sequence is the consumer's last); one the server
//! has moved past is dropped unsettled. One request per such event, none per message.

use std::time::Duration;

use super::super::ack::Fetched;
use super::Puller;

/// Whether the next delivery is checked, and where.
pub(super) struct Fence {
    /// `<api>.CONSUMER.INFO.<stream>.<consumer>`.
    info: String,
    suspect: bool,
}

impl Fence {
    /// A session's fence: its first delivery is checked.
    pub(super) fn new(info: String) -> Fence {
        Fence {
            info,
            suspect: true,
        }
    }

    pub(super) fn suspect(&mut self) {
        self.suspect = true;
    }

    pub(super) fn is_suspect(&self) -> bool {
        self.suspect
    }

    /// Whether the consumer's latest delivery is `delivery` (the fence is lifted): false if
    /// the server moved past it, or did not say within `timeout` (it is delivered again after
    /// its `ack_wait` if it was current, and checked again then). `stream_sequence` is said
    /// in the log.
    async fn admit(
        &mut self,
        client: &async_nats::Client,
        (delivery, stream_sequence): (u64, Option<u64>),
        timeout: Duration,
    ) -> bool {
        match self.latest(client, timeout).await {
            Some(latest) if latest == delivery => {
                self.suspect = false;
                true
            }
            Some(latest) => {
                tracing::warn!(
                    consumer = %self.info,
                    delivery,
                    latest,
                    stream_sequence,
                    "a delivery arrived after the partition's consumer moved past it (held in a \
                     stalled link or a partitioned route): not handled, so that its key's order \
                     holds"
                );
                false
            }
            None => {
                tracing::debug!(
                    consumer = %self.info,
                    delivery,
                    "could not ask whether this delivery is the partition's latest; leaving it \
                     to be delivered again"
                );
                false
            }
        }
    }

    /// The consumer's latest delivery sequence, if the server says within `timeout`.
    async fn latest(&self, client: &async_nats::Client, timeout: Duration) -> Option<u64> {
        tokio::time::timeout(timeout, client.request(self.info.clone(), "".into()))
            .await
            .ok()
            .and_then(Result::ok)
            .and_then(|answer| latest_delivery(&answer.payload))
    }
}

impl Puller {
    /// Whether this is a partition's session.
    pub(in crate::run) fn is_partition(&self) -> bool {
        self.fence.is_some()
    }

    /// Whether a partition's session has its next delivery checked with the server first
    /// (after a silence, a reconnect, a new leader or a pin change): it may have lost the
    /// partition meanwhile.
    pub(in crate::run) fn is_suspect(&self) -> bool {
        self.fence.as_ref().is_some_and(Fence::is_suspect)
    }

    /// The next delivery of a partition's session is checked with the server first.
    pub(super) fn suspect(&mut self) {
        if let Some(fence) = &mut self.fence {
            fence.suspect();
        }
    }

    /// How long a check with the server may take.
    fn check_timeout(&self) -> Duration {
        (self.heartbeat * 2).max(Duration::from_secs(1))
    }

    /// The first of `arrived`, once it may be handled: at once, unless a partition's session
    /// checks it with the server first (see `fence`), which leaves one the server moved past
    /// unsettled (for the server to deliver again where the partition is now) and goes on to
    /// the next. Cancel-safe: a delivery stays in `arrived` while it is checked (the check
    /// holds only its sequences), so a session that ends meanwhile still has it to hand back.
    pub(super) async fn next_arrived(&mut self) -> Option<Fetched> {
        loop {
            let front = self.arrived.front()?;
            let delivery = (front.meta.consumer_sequence, front.meta.stream_sequence);
            let timeout = self.check_timeout();
            let admitted = match &mut self.fence {
                Some(fence) if fence.is_suspect() => {
                    // Boxed: most sessions never check, and inline the check would stay in
                    // the session's future for its lifetime.
                    Box::pin(fence.admit(&self.common.client, delivery, timeout)).await
                }
                _ => true,
            };
            let fetched = self.arrived.pop_front();
            if admitted {
                return fetched;
            }
        }
    }

    /// Of what a closing session received and did not hand out (`unstarted`), what may be
    /// handed back: all of it, unless a partition's fence was still to check it. Then only
    /// the consumer's latest delivery, if the server says so: one it moved past is with
    /// another instance now, and a nak (applied by stream sequence) would deliver it once more
    /// while that instance runs it.
    pub(super) async fn may_hand_back(&mut self, mut unstarted: Vec<Fetched>) -> Vec<Fetched> {
        let Some(fence) = self.fence.as_ref().filter(|f| f.is_suspect()) else {
            return unstarted;
        };
        if unstarted.is_empty() {
            return unstarted;
        }
        let latest = Box::pin(fence.latest(&self.common.client, self.check_timeout())).await;
        unstarted.retain(|f| Some(f.meta.consumer_sequence) == latest);
        unstarted
    }
}

/// The consumer's last delivery sequence, from its info.
fn latest_delivery(payload: &[u8]) -> Option<u64> {
    #[derive(serde::Deserialize)]
    struct Delivered {
        consumer_seq: u64,
    }
    #[derive(serde::Deserialize)]
    struct Info {
        delivered: Delivered,
    }
    serde_json::from_slice::<Info>(payload)
        .ok()
        .map(|info| info.delivered.consumer_seq)
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_the_last_delivery() {
        let info = br#"{"type":"io.nats.jetstream.api.v1.consumer_info_response","delivered":{"consumer_seq":42,"stream_seq":40},"ack_floor":{"consumer_seq":41,"stream_seq":39}}"#;
        assert_eq!(super::latest_delivery(info), Some(42));
        let error =
            br#"{"error":{"code":404,"err_code":10014,"description":"consumer not found"}}"#;
        assert_eq!(super::latest_delivery(error), None);
    }
}
