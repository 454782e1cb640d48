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

use std::future::Future;
use std::pin::Pin;
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

    /// `fetched` if the consumer's latest delivery is this one (the fence is lifted); `None`
    /// if the server moved past it, or did not say within `timeout` (it is delivered again
    /// after its `ack_wait` if it was current, and checked again then).
    pub(super) async fn admit(
        &mut self,
        client: &async_nats::Client,
        fetched: Fetched,
        timeout: Duration,
    ) -> Option<Fetched> {
        let delivery = fetched.meta.consumer_sequence;
        let latest = tokio::time::timeout(timeout, client.request(self.info.clone(), "".into()))
            .await
            .ok()
            .and_then(Result::ok)
            .and_then(|answer| latest_delivery(&answer.payload));
        match latest {
            Some(latest) if latest == delivery => {
                self.suspect = false;
                Some(fetched)
            }
            Some(latest) => {
                tracing::warn!(
                    consumer = %self.info,
                    delivery,
                    latest,
                    stream_sequence = fetched.meta.stream_sequence,
                    "a delivery arrived after the partition's consumer moved past it (held in a \
                     stalled link or a partitioned route): not handled, so that its key's order \
                     holds"
                );
                None
            }
            None => {
                tracing::debug!(
                    consumer = %self.info,
                    delivery,
                    "could not ask whether this delivery is the partition's latest; leaving it \
                     to be delivered again"
                );
                None
            }
        }
    }
}

impl Puller {
    /// The next delivery of a partition's session is checked with the server first.
    pub(super) fn suspect(&mut self) {
        if let Some(fence) = &mut self.fence {
            fence.suspect();
        }
    }

    /// `Ok(fetched)` at once, unless a partition's session checks it with the server first
    /// (see `fence`): then the check, which gives it back if it may be handled, or leaves it
    /// unsettled, for the server to deliver again where the partition is now. Boxed, and
    /// holding the delivery itself: the session's future (alive as long as the consumer)
    /// then reserves no room for a delivery waiting on a check that most sessions never make.
    pub(super) fn admit(&mut self, fetched: Fetched) -> Result<Fetched, Check<'_>> {
        match &mut self.fence {
            Some(fence) if fence.is_suspect() => {
                let timeout = (self.heartbeat * 2).max(Duration::from_secs(1));
                Err(Box::pin(fence.admit(&self.common.client, fetched, timeout)))
            }
            _ => Ok(fetched),
        }
    }
}

/// A delivery's check with the server (see [`Puller::admit`]).
pub(super) type Check<'a> = Pin<Box<dyn Future<Output = Option<Fetched>> + Send + 'a>>;

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
