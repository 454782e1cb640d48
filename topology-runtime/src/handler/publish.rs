//! How a handler's publish is sent, and sent again while the stream does not answer.

use async_nats::HeaderMap;
use async_nats::jetstream;
use bytes::Bytes;

use super::{Context, HandlerError};

impl Context {
    /// Publishes and waits for the stream's acknowledgement, sending the publish again under
    /// the runtime's publish retry policy while the stream does not answer: no responder (a
    /// stream leader being elected, the stream being created again) or, for a publish with a
    /// message id (which the stream's duplicate window drops if it was stored after all), no
    /// acknowledgement in time. A publish without an id is not sent again after a lost
    /// acknowledgement: it may have been stored.
    pub(super) async fn send(
        &self,
        subject: async_nats::Subject,
        headers: HeaderMap,
        payload: Bytes,
    ) -> Result<jetstream::publish::PublishAck, HandlerError> {
        use jetstream::context::PublishErrorKind;
        let js = &self.scope.jetstream;
        let deduplicated = headers.get(async_nats::header::NATS_MESSAGE_ID).is_some();
        let publish = || async {
            let ack = if headers.is_empty() {
                js.publish(subject.clone(), payload.clone()).await?
            } else {
                js.publish_with_headers(subject.clone(), headers.clone(), payload.clone())
                    .await?
            };
            ack.await
        };
        let transient = |e: &jetstream::context::PublishError| match e.kind() {
            PublishErrorKind::StreamNotFound => {
                self.scope.stream_missing.notify_waiters();
                true
            }
            PublishErrorKind::BrokenPipe => true,
            PublishErrorKind::TimedOut => deduplicated,
            _ => false,
        };
        match self
            .scope
            .publish_retry
            .backoff()
            .run(publish, transient)
            .await
        {
            Ok((ack, _)) => Ok(ack),
            Err(failed) => Err(HandlerError::new(format!(
                "publishing to `{subject}` failed after {} attempts: {}{}",
                failed.attempts,
                failed.error,
                if failed.error.kind() == PublishErrorKind::StreamNotFound {
                    " (no stream answers for this subject: check that a stream captures it)"
                } else {
                    ""
                }
            ))),
        }
    }
}
