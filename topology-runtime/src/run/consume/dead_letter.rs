//! Dead letters: a message that failed for good is published, with headers saying where it
//! came from and why, to the consumer's dead-letter subject before it is terminated.

use async_nats::jetstream;

use super::ack::{AckDeadline, Acks};
use crate::handler::{HandlerError, Received, Scope};
use crate::retry::{Failed, RetryPolicy};

/// Where a consumer's dead letters go, and how a failed publish of one is retried.
pub(in crate::run) struct DeadLetter {
    /// The declared dead-letter subject.
    pub(in crate::run) subject: &'static str,
    /// How publishing a dead letter is retried.
    pub(in crate::run) retry: RetryPolicy,
    /// How many attempts at most.
    pub(in crate::run) attempts: u32,
}

/// The delivery a dead letter is made of: its number, and its stream sequence (`None` if the
/// reply subject could not be read).
pub(in crate::run) struct Delivery {
    pub(in crate::run) delivered: u64,
    pub(in crate::run) stream_sequence: Option<u64>,
}

/// Publishes the message, with headers saying where it came from and why it failed, to
/// `target`'s subject, and waits for the stream's ack. A failed publish is retried under the
/// dead-letter policy while the message is held with progress acks (through `acks`, so a
/// consumer without acks sends none, and confirmed acks push `deadline`): on its last delivery
/// a nak would not bring it back.
pub(in crate::run) async fn publish_dead_letter(
    (message, received): (&jetstream::Message, &Received),
    (scope, acks): (&Scope, &Acks),
    target: &DeadLetter,
    (meta, deadline): (Delivery, &mut AckDeadline),
    error: &HandlerError,
) -> Result<(), Failed<async_nats::jetstream::context::PublishError>> {
    let subject = target.subject;
    let mut headers = received.headers.clone().unwrap_or_default();
    headers.insert("Nats-Topology-Subject", received.subject.as_str());
    headers.insert("Nats-Topology-Stream", scope.stream.as_str());
    headers.insert("Nats-Topology-Consumer", scope.consumer.as_str());
    if let Some(sequence) = meta.stream_sequence {
        headers.insert("Nats-Topology-Sequence", sequence.to_string().as_str());
        // A dead letter published again (its term lost, or its publish retried after a reply
        // that timed out) is dropped by the target stream's duplicate window. Position 0: no
        // handler publish has it.
        if headers.get(async_nats::header::NATS_MESSAGE_ID).is_none() {
            let id = crate::handler::msg_id(scope, sequence, 0);
            headers.insert(async_nats::header::NATS_MESSAGE_ID, id.as_str());
        }
    }
    let delivered = meta.delivered.to_string();
    headers.insert("Nats-Topology-Delivered", delivered.as_str());
    let error = error.to_string().replace(['\r', '\n'], " ");
    headers.insert("Nats-Topology-Error", error.as_str());
    // The progress acks sent between attempts move the deadline the later term is held to.
    let held = std::sync::Mutex::new(*deadline);
    let publish = || async {
        let js = &scope.common.jetstream;
        let published = async {
            js.publish_with_headers(subject, headers.clone(), received.payload.clone())
                .await?
                .await
        }
        .await;
        if published.is_err() {
            // Keep holding the message while the next attempt waits.
            let mut until = *held.lock().unwrap_or_else(|e| e.into_inner());
            acks.keep_alive(message, &mut until).await;
            *held.lock().unwrap_or_else(|e| e.into_inner()) = until;
        }
        published
    };
    let published = target
        .retry
        .backoff()
        .max_attempts(target.attempts)
        .run(publish, |_| true)
        .await
        .map(|_| ());
    *deadline = held.into_inner().unwrap_or_else(|e| e.into_inner());
    published
}
