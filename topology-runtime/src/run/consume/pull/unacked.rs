//! A settlement (an ack, a term, a nak) lost with its connection, sent again. A consumer with
//! `max_ack_pending = 1` (a watch's, a partition's, a queue consumer declared so) delivers one
//! message at a time: an ack written to a connection just before it was lost never reaches the
//! server, which then delivers nothing more until the message's `ack_wait` runs out (and then
//! delivers it again), while its idle heartbeats say nothing is wrong; a lost nak holds it the same
//! way, for the `ack_wait` rather than the backoff's delay. So after a reconnection a session whose
//! handlers have all settled asks the consumer whether it still waits for the ack of this session's
//! last delivery; if it does and the session handled that message, the ack is sent again through
//! the new connection (the server takes a second ack of a delivery as a no-op), or the term if it
//! dead-lettered it; if its handler failed, the nak is sent again with what is left of its delay (a
//! nak the server had taken is then taken again, to the same end). A message delivered half its
//! `ack_wait` ago or more (see `Delivery::since`) is left to its redelivery: the server may
//! deliver it again (to another replica) before the ack sent again reaches it, and that ack would
//! then free the consumer's next message while the message runs there. All of it holds while the session outlives the
//! reconnection: a new session has no delivery to ask about until its first one arrives.

use std::time::{Duration, SystemTime};

use async_nats::jetstream::AckKind;
use bytes::Bytes;
use tokio::time::Instant;

use super::super::ack::Fetched;
use super::super::settled::{Again, LastSettled};
use super::Puller;

/// The longest a watch waits for the consumer's answer after a reconnection: a consumer whose
/// leader answers through the new connection does so within a round trip; one that does not
/// is left to the silence the heartbeats measure.
const ASK_WITHIN: Duration = Duration::from_secs(1);

/// A session's last delivery, and how the session last settled a message.
pub(super) struct Last {
    settled: LastSettled,
    /// The consumer's only reader is this session (a watch).
    only_reader: bool,
    /// The consumer's `ack_wait`.
    ack_wait: Duration,
    /// The last delivery.
    delivery: Option<Delivery>,
}

/// A delivery, as [`Puller::ack_lost`] needs it.
#[derive(Clone)]
struct Delivery {
    /// The message's stream sequence and stored time.
    message: (u64, Option<SystemTime>),
    /// The consumer's sequence of this delivery.
    delivered: u64,
    /// Where its settlement goes.
    reply: async_nats::Subject,
    /// How old it is, at most, counted from: for a consumer with other readers, when the pull
    /// request it answers was sent (no later than the server delivered it; it may have waited
    /// in a stalled link long after); for a watch, the consumer's only reader, when it arrived
    /// (an ack sent again that crosses its redelivery frees nothing beside it: the redelivery
    /// comes here and is acknowledged again, and a watch's request may have waited at the
    /// server for most of its expiry before the delivery).
    since: Instant,
}

impl Last {
    pub(super) fn new(settled: LastSettled, ack_wait: Duration, only_reader: bool) -> Last {
        Last {
            settled,
            only_reader,
            ack_wait,
            delivery: None,
        }
    }

    /// A delivery arrived.
    pub(super) fn received(&mut self, fetched: &Fetched) {
        if let (Some(sequence), Some(reply)) = (
            fetched.meta.stream_sequence,
            fetched.message.message.reply.as_ref(),
        ) {
            self.delivery = Some(Delivery {
                message: (sequence, fetched.meta.published),
                delivered: fetched.meta.consumer_sequence,
                reply: reply.clone(),
                since: match self.only_reader {
                    true => Instant::now(),
                    false => fetched.delivered_after,
                },
            });
        }
    }
}

impl Puller {
    /// See the module documentation; `held`: how many messages this instance runs or holds
    /// (a handler still running acks through the new connection).
    pub(super) async fn ack_lost(&mut self, held: usize) {
        let Some(last) = &self.unacked else {
            return;
        };
        let Some(Delivery {
            message: (sequence, published),
            delivered,
            reply,
            since,
        }) = last.delivery.clone()
        else {
            return;
        };
        // Its ack_wait runs from its delivery (or later, from a progress ack).
        let half = last.ack_wait / 2;
        let fresh = || since.elapsed() < half;
        // An ack (a term) if the session handled (dead-lettered) it; the nak if its handler
        // failed, with the rest of the delay it asked for, while a second of it is left: a nak
        // the server took is followed by the message's redelivery once its delay is over,
        // which a nak sent again then would send back (the server naks by stream sequence,
        // whatever the delivery).
        let again = || -> Option<Bytes> {
            match last.settled.again(sequence, published)? {
                Again::Ack => Some(Bytes::from_static(b"+ACK")),
                Again::Term => Some(AckKind::Term.into()),
                Again::Nak { left } => (left > ASK_WITHIN).then(|| AckKind::Nak(Some(left)).into()),
            }
        };
        if held > 0 || !fresh() || again().is_none() {
            return;
        }
        let request = async_nats::Request::new().timeout(Some(ASK_WITHIN.min(self.heartbeat)));
        let (client, info) = (
            self.common.client.clone(),
            self.liveness.info_subject().clone(),
        );
        let Ok(answer) = client.send_request(info, request).await else {
            return;
        };
        // Waiting for this session's last delivery, and nothing delivered since (elsewhere).
        if waits_for_ack(&answer.payload) != Some(delivered) || !fresh() {
            return;
        }
        let Some(again) = again() else {
            return;
        };
        tracing::debug!(subject = %self.subject, sequence, settlement = %String::from_utf8_lossy(&again), "the consumer waits for a settlement sent on the lost connection; sending it again");
        if let Err(e) = client.publish(reply, again).await {
            tracing::debug!(subject = %self.subject, error = %e, "could not send the settlement again; the server delivers the message again after its ack_wait");
        }
    }
}

/// From a consumer's info: the consumer sequence of its last delivery, when it is not
/// acknowledged (its ack floor is below it).
fn waits_for_ack(payload: &[u8]) -> Option<u64> {
    #[derive(serde::Deserialize)]
    struct Sequences {
        consumer_seq: u64,
    }
    #[derive(serde::Deserialize)]
    struct Info {
        delivered: Sequences,
        ack_floor: Sequences,
    }
    let info = serde_json::from_slice::<Info>(payload).ok()?;
    (info.ack_floor.consumer_seq < info.delivered.consumer_seq)
        .then_some(info.delivered.consumer_seq)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_delivery_not_yet_acknowledged() {
        let waiting = br#"{"delivered":{"consumer_seq":200,"stream_seq":200},"ack_floor":{"consumer_seq":199,"stream_seq":199},"num_ack_pending":1}"#;
        assert_eq!(waits_for_ack(waiting), Some(200));
        let settled = br#"{"delivered":{"consumer_seq":200,"stream_seq":200},"ack_floor":{"consumer_seq":200,"stream_seq":200}}"#;
        assert_eq!(waits_for_ack(settled), None);
        let error =
            br#"{"error":{"code":404,"err_code":10014,"description":"consumer not found"}}"#;
        assert_eq!(waits_for_ack(error), None);
    }
}
