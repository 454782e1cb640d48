//! Dead letters: a message that failed for good is published, with headers saying where it
//! came from and why, to the consumer's dead-letter subject before it is terminated.

use async_nats::jetstream;

use super::dispatch::{MessageMeta, Session};
use crate::handler::HandlerError;
use crate::retry::Failed;

/// Publishes the message, with headers saying where it came from and why it failed, to
/// `subject`, and waits for the stream's ack. A failed publish is retried under the
/// dead-letter policy while the message is held with progress acks: on its last delivery a
/// nak would not bring it back.
pub(super) async fn publish_dead_letter(
    message: &jetstream::Message,
    session: &Session,
    subject: &'static str,
    meta: MessageMeta,
    error: &HandlerError,
) -> Result<(), Failed<async_nats::jetstream::context::PublishError>> {
    let mut headers = message.headers.clone().unwrap_or_default();
    headers.insert("Nats-Topology-Subject", message.subject.as_str());
    headers.insert("Nats-Topology-Stream", session.scope.stream.as_str());
    headers.insert("Nats-Topology-Consumer", session.scope.consumer.as_str());
    if let Some(sequence) = meta.stream_sequence {
        headers.insert("Nats-Topology-Sequence", sequence.to_string().as_str());
        // A dead letter published again (its term lost, or its publish retried after a reply
        // that timed out) is dropped by the target stream's duplicate window. Position 0: no
        // handler publish has it.
        if headers.get(async_nats::header::NATS_MESSAGE_ID).is_none() {
            let id = crate::handler::msg_id(&session.scope, sequence, 0);
            headers.insert(async_nats::header::NATS_MESSAGE_ID, id.as_str());
        }
    }
    let delivered = meta.delivered.to_string();
    headers.insert("Nats-Topology-Delivered", delivered.as_str());
    let error = error.to_string().replace(['\r', '\n'], " ");
    headers.insert("Nats-Topology-Error", error.as_str());
    let publish = || async {
        let js = &session.scope.jetstream;
        let published = async {
            js.publish_with_headers(subject, headers.clone(), message.payload.clone())
                .await?
                .await
        }
        .await;
        if published.is_err() {
            // Keep holding the message while the next attempt waits.
            super::ack::progress(message).await;
        }
        published
    };
    session
        .dead_letter_retry
        .backoff()
        .max_attempts(session.dead_letter_attempts)
        .run(publish, |_| true)
        .await
        .map(|_| ())
}
