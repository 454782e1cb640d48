//! A watch's ack lost with its connection, sent again. A watch's consumer delivers one
//! revision at a time (`max_ack_pending = 1`): an ack written to a connection just before it
//! was lost never reaches the server, which then delivers nothing more until the revision's
//! `ack_wait` runs out, while its idle heartbeats (which name the last delivery, received here)
//! say nothing is wrong. So after a reconnection a watch whose handlers have all settled asks
//! the consumer whether it still waits for the ack of the last delivery; if it does and that
//! revision was handled here, the ack is sent again through the new connection (the server
//! takes an ack of a delivery it has recorded already as a no-op). A revision whose handler
//! failed is left to its redelivery.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::super::ack::Fetched;
use super::super::resume::Progress;
use super::Puller;

/// The longest a watch waits for the consumer's answer after a reconnection: a consumer whose
/// leader answers through the new connection does so within a round trip; one that does not
/// is left to the silence the heartbeats measure.
const ASK_WITHIN: Duration = Duration::from_secs(1);

/// A watch's last delivery, and what its session handled.
pub(super) struct Last {
    handled: Arc<Progress>,
    /// The stream sequence and the reply subject (where its ack goes) of the last delivery.
    delivery: Option<(u64, async_nats::Subject)>,
}

impl Last {
    pub(super) fn new(handled: Arc<Progress>) -> Last {
        Last {
            handled,
            delivery: None,
        }
    }

    /// A delivery arrived.
    pub(super) fn received(&mut self, fetched: &Fetched) {
        if let (Some(sequence), Some(reply)) = (
            fetched.meta.stream_sequence,
            fetched.message.message.reply.as_ref(),
        ) {
            self.delivery = Some((sequence, reply.clone()));
        }
    }
}

impl Puller {
    /// See the module documentation; `held`: how many messages this instance runs or holds
    /// (a handler still running acks through the new connection).
    pub(super) async fn ack_lost(&mut self, held: usize) {
        let (Some(last), Some(received)) = (&self.unacked, self.received) else {
            return;
        };
        let Some((sequence, reply)) = last.delivery.clone() else {
            return;
        };
        if held > 0 || !last.handled.handled_past(sequence) {
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
        if waits_for_ack(&answer.payload) != Some(received) {
            return;
        }
        tracing::debug!(subject = %self.subject, sequence, "the consumer waits for an ack sent on the lost connection; sending it again");
        if let Err(e) = client.publish(reply, Bytes::from_static(b"+ACK")).await {
            tracing::debug!(subject = %self.subject, error = %e, "could not send the ack again; the server delivers the revision again after its ack_wait");
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
