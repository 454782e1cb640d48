//! How a handler publishes: the [`Publish`] builder behind [`Context::publisher`] and its
//! shorthands, the headers every publish carries (trace context, message id), and the send
//! that is repeated while the stream does not answer.

use std::sync::atomic::Ordering;

use async_nats::HeaderMap;
use async_nats::jetstream;
use bytes::Bytes;

use super::{Context, HandlerError};
use crate::codec::{CONTENT_TYPE, Encode, Json};

impl Context {
    /// Publishes `value` as JSON to `subject` and waits for the stream's acknowledgement,
    /// with a `Nats-Msg-Id` derived from the message being handled (see
    /// [deduplicated outputs](Context#deduplicated-outputs)).
    pub async fn publish<T: serde::Serialize + ?Sized>(
        &self,
        subject: impl Into<async_nats::Subject>,
        value: &T,
    ) -> Result<jetstream::publish::PublishAck, HandlerError> {
        self.publisher(subject).json(value).await
    }

    /// Publishes raw bytes to `subject` and waits for the stream's acknowledgement, with a
    /// derived `Nats-Msg-Id` (see [deduplicated outputs](Context#deduplicated-outputs)). A
    /// publish that finds no stream makes the runtime check at once the streams it owns and
    /// are not consumed here (one deleted out of band is created again). With the `otel` feature, every publish of a
    /// handler carries the current span's trace context (`traceparent`, `tracestate`), which
    /// the handler that receives it continues.
    pub async fn publish_bytes(
        &self,
        subject: impl Into<async_nats::Subject>,
        payload: Bytes,
    ) -> Result<jetstream::publish::PublishAck, HandlerError> {
        self.publisher(subject).bytes(payload).await
    }

    /// Publishes raw bytes with `headers` to `subject` and waits for the stream's
    /// acknowledgement. A `Nats-Msg-Id` among `headers` is kept; without one, the derived id
    /// is added (see [deduplicated outputs](Context#deduplicated-outputs)).
    pub async fn publish_with_headers(
        &self,
        subject: impl Into<async_nats::Subject>,
        headers: HeaderMap,
        payload: Bytes,
    ) -> Result<jetstream::publish::PublishAck, HandlerError> {
        self.publisher(subject)
            .headers(headers)
            .bytes(payload)
            .await
    }

    /// A publish to `subject` to set up: headers, an explicit message id, or no id at all.
    ///
    /// ```
    /// use nats_topology::{Context, HandlerError};
    ///
    /// async fn on_order(order: serde_json::Value, cx: Context) -> Result<(), HandlerError> {
    ///     // Deduplicated by a business key rather than by position.
    ///     cx.publisher("orders.billed")
    ///         .header("Order-Source", "web")
    ///         .msg_id(format!("billed-{}", order["id"]))
    ///         .json(&order)
    ///         .await?;
    ///     // A notification that may go out twice: no message id.
    ///     cx.publisher("orders.seen").without_dedup().bytes("seen".into()).await?;
    ///     Ok(())
    /// }
    /// ```
    pub fn publisher(&self, subject: impl Into<async_nats::Subject>) -> Publish<'_> {
        Publish {
            cx: self,
            subject: subject.into(),
            headers: HeaderMap::new(),
            msg_id: MsgId::Derived,
        }
    }

    /// The headers of an outgoing message: the one place they are built, so that any header
    /// the runtime adds (the trace context, the message id) is added to every publish of a
    /// handler.
    fn outgoing_headers(&self, mut headers: HeaderMap, id: MsgId) -> HeaderMap {
        // Counted whether or not this publish carries a derived id: the id is positional,
        // and a handler that gives one publish its own id keeps the others' positions.
        let n = self.received.publishes.fetch_add(1, Ordering::Relaxed) + 1;
        // The current span's W3C trace context (with the `otel` feature).
        crate::telemetry::inject_current(&mut headers);
        if headers.get(async_nats::header::NATS_MESSAGE_ID).is_some() {
            return headers;
        }
        let id = match id {
            MsgId::Derived => self.derived_msg_id(n),
            MsgId::Given(id) => Some(id),
            MsgId::Without => None,
        };
        if let Some(id) = id {
            headers.insert(async_nats::header::NATS_MESSAGE_ID, id.as_str());
        }
        headers
    }

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
        let js = &self.scope.common.jetstream;
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
                self.scope.common.stream_missing.notify_waiters();
                self.scope.common.publish_unanswered.notify_one();
                true
            }
            PublishErrorKind::BrokenPipe => true,
            PublishErrorKind::TimedOut => {
                // The stream may take no writes (no leader, no quorum): read whether it does.
                self.scope.common.publish_unanswered.notify_one();
                deduplicated
            }
            _ => false,
        };
        match self
            .scope
            .common
            .publish_retry
            .backoff()
            .run(publish, transient)
            .await
        {
            Ok((ack, _)) => Ok(ack),
            Err(failed) => {
                // A stream without a leader answers nothing: "no stream found" then means
                // the stream the runtime read without one.
                let why = match (self.scope.common.refusing)(&subject) {
                    Some(refusing) => format!("; {refusing}"),
                    None if failed.error.kind() == PublishErrorKind::StreamNotFound => {
                        " (no stream answers for this subject: check that a stream captures it)"
                            .to_owned()
                    }
                    None => String::new(),
                };
                Err(HandlerError::new(format!(
                    "publishing to `{subject}` failed after {} attempts: {}{why}",
                    failed.attempts, failed.error,
                )))
            }
        }
    }
}

/// Which message id a [`Publish`] sends.
#[derive(Debug, Clone)]
enum MsgId {
    /// Derived from the message being handled (the default).
    Derived,
    /// Given by the caller.
    Given(String),
    /// None: the target stream keeps every copy.
    Without,
}

/// A publish being set up by a handler; see [`Context::publisher`]. Nothing is sent until
/// [`json`](Publish::json) or [`bytes`](Publish::bytes) is awaited.
#[must_use = "a publish is sent only by `.json(..)` or `.bytes(..)`"]
pub struct Publish<'a> {
    cx: &'a Context,
    subject: async_nats::Subject,
    headers: HeaderMap,
    msg_id: MsgId,
}

impl Publish<'_> {
    /// Adds a header (a second value of a name is appended).
    pub fn header(
        mut self,
        name: impl async_nats::header::IntoHeaderName,
        value: impl async_nats::header::IntoHeaderValue,
    ) -> Self {
        self.headers.append(name, value);
        self
    }

    /// Adds every header of `headers`. A `Nats-Msg-Id` among them is the message id.
    pub fn headers(mut self, headers: HeaderMap) -> Self {
        for (name, values) in headers.iter() {
            for value in values {
                self.headers.append(name.clone(), value.clone());
            }
        }
        self
    }

    /// Sends `id` as the `Nats-Msg-Id`: the target stream drops a later message with the same
    /// id within its `duplicate_window`. Use an id of the output itself (a business key) when
    /// a handler's outputs do not come in the same order on every delivery.
    pub fn msg_id(mut self, id: impl Into<String>) -> Self {
        self.msg_id = MsgId::Given(id.into());
        self
    }

    /// Sends no `Nats-Msg-Id`: the target stream keeps every copy, so a redelivered handler
    /// publishes this output again.
    pub fn without_dedup(mut self) -> Self {
        self.msg_id = MsgId::Without;
        self
    }

    /// Gives the message its own time to live (`Nats-TTL`, in whole seconds, rounded up, at
    /// least one): the stream removes it when it runs out. The target stream must allow it
    /// (`#[stream(allow_msg_ttl = true)]`, nats-server 2.11); a stream that does not refuses
    /// the publish.
    ///
    /// ```
    /// use std::time::Duration;
    /// use nats_topology::{Context, HandlerError};
    ///
    /// async fn on_login(user: String, cx: Context) -> Result<(), HandlerError> {
    ///     // The session is forgotten an hour after the login, whatever the stream's limits.
    ///     cx.publisher(format!("sessions.{user}"))
    ///         .ttl(Duration::from_secs(3600))
    ///         .json(&user)
    ///         .await?;
    ///     Ok(())
    /// }
    /// ```
    pub fn ttl(mut self, ttl: std::time::Duration) -> Self {
        let seconds = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
        self.headers
            .insert("Nats-TTL", format!("{}s", seconds.max(1)).as_str());
        self
    }

    /// Schedules the message: stored on this publish's subject (the schedule's own subject;
    /// a later schedule on it replaces this one), it is published by the server to `target`,
    /// a subject of the same stream, at `at` (`Nats-Schedule: @at ..`, whole seconds, UTC).
    /// The stream must allow it (`#[stream(allow_msg_schedules = true)]`, nats-server 2.12); a
    /// stream that does not refuses the publish.
    ///
    /// ```
    /// use std::time::{Duration, SystemTime};
    /// use nats_topology::{Context, HandlerError};
    ///
    /// async fn on_order(id: u64, cx: Context) -> Result<(), HandlerError> {
    ///     // A reminder on `orders.remind.<id>` a day from now, scheduled on its own subject.
    ///     let at = SystemTime::now() + Duration::from_secs(86_400);
    ///     cx.publisher(format!("orders.schedule.{id}"))
    ///         .schedule_at(at, format!("orders.remind.{id}"))
    ///         .json(&id)
    ///         .await?;
    ///     Ok(())
    /// }
    /// ```
    pub fn schedule_at(mut self, at: std::time::SystemTime, target: impl Into<String>) -> Self {
        self.headers.insert(
            "Nats-Schedule",
            format!("@at {}", rfc3339_seconds(at)).as_str(),
        );
        self.headers
            .insert("Nats-Schedule-Target", target.into().as_str());
        self
    }

    /// Sends `value` as JSON (`Content-Type: application/json`) and waits for the stream's
    /// acknowledgement.
    pub async fn json<T: serde::Serialize + ?Sized>(
        self,
        value: &T,
    ) -> Result<jetstream::publish::PublishAck, HandlerError> {
        self.encode(Json, value).await
    }

    /// Sends `value` written by `codec`, with the codec's `Content-Type`, and waits for the
    /// stream's acknowledgement: what a handler declared with the same `codec` reads (see
    /// [`codec`](crate::codec)).
    ///
    /// ```
    /// use nats_topology::codec::MsgPack;
    /// use nats_topology::{Context, HandlerError};
    ///
    /// #[derive(serde::Serialize)]
    /// struct Billed {
    ///     order: u64,
    ///     cents: u64,
    /// }
    ///
    /// async fn bill(order: u64, cx: Context) -> Result<(), HandlerError> {
    ///     cx.publisher("orders.billed")
    ///         .encode(MsgPack, &Billed { order, cents: 1250 })
    ///         .await?;
    ///     Ok(())
    /// }
    /// ```
    pub async fn encode<C: Encode<T>, T: ?Sized>(
        mut self,
        codec: C,
        value: &T,
    ) -> Result<jetstream::publish::PublishAck, HandlerError> {
        let _ = codec;
        let payload = C::encode(value).map_err(|e| {
            HandlerError::new(format!(
                "cannot encode {} as {}: {e}",
                std::any::type_name::<T>(),
                C::ID.content_type()
            ))
        })?;
        self.headers.insert(CONTENT_TYPE, C::ID.content_type());
        self.bytes(payload).await
    }

    /// Sends `payload` and waits for the stream's acknowledgement.
    pub async fn bytes(
        self,
        payload: Bytes,
    ) -> Result<jetstream::publish::PublishAck, HandlerError> {
        let headers = self.cx.outgoing_headers(self.headers, self.msg_id);
        self.cx.send(self.subject, headers, payload).await
    }
}

/// `at` in RFC 3339, UTC, whole seconds (`2026-12-03T07:00:00Z`): what `Nats-Schedule: @at`
/// takes.
fn rfc3339_seconds(at: std::time::SystemTime) -> String {
    let at = time::OffsetDateTime::from(at);
    let at = at.replace_nanosecond(0).unwrap_or(at);
    at.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|_| at.unix_timestamp().to_string())
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn schedule_times_are_rfc3339_in_whole_seconds() {
        let at = UNIX_EPOCH + Duration::from_millis(1_796_281_200_750);
        assert_eq!(super::rfc3339_seconds(at), "2026-12-03T07:00:00Z");
    }
}
