//! A partition's next message, read from its stream before the server delivers it, so that it
//! runs as soon as the message before it is handled (docs/PARTITIONS.md, "Running ahead").
//!
//! A partition's consumer delivers one message at a time: its next message comes once the
//! server has the ack of the one before, a round trip after the handler returned. While a
//! message runs, its session reads the partition's next one from the stream
//! (`STREAM.MSG.GET`: the first message after it under the partition's filter, which is what
//! the consumer delivers next unless it delivers this one again). When the running message is
//! handled and its ack sent, and the next one's key differs from its key, the next one runs at
//! once ([`Early`] says whether it may); its delivery, which follows the ack, is acknowledged
//! without calling the handler again (`settled::LastSettled`). A message of the same key waits for
//! its delivery: it would otherwise run before a redelivery of the one before it, whose ack
//! may be lost. The consumer keeps `max_ack_pending = 1`, so what the server delivers, and to
//! whom, is unchanged: a replica of an older version beside this one keeps the order.

use std::sync::Arc;
use std::sync::atomic::AtomicU32;
use std::time::{Duration, SystemTime};

use async_nats::jetstream::{self, message::StreamMessage, stream::RawMessageErrorKind};
use futures::FutureExt;

use crate::handler::Received;
use crate::registry::PARTITION_PIN_TTL;
use crate::run::shares::Capacity;

/// How a partition's session reads its next messages from the stream.
pub(in crate::run) struct Early {
    stream: jetstream::stream::Stream<()>,
    /// The subject of the reads (`$JS.API.STREAM.MSG.GET.<stream>`): a denial of it stops
    /// them.
    read_subject: String,
    /// The partition's filter subject.
    filter: String,
    /// Where the key is in a stored subject (its tokens' positions).
    key: &'static [usize],
    /// How many handlers the partition's group runs at once here.
    capacity: Arc<Capacity>,
}

/// A message read from the stream before its delivery.
pub(in crate::run) struct Next {
    pub(in crate::run) sequence: u64,
    pub(in crate::run) published: Option<SystemTime>,
    message: StreamMessage,
}

/// What reading the next message found.
pub(in crate::run) enum Looked {
    Next(Box<Next>),
    /// The partition has nothing after it yet.
    Nothing,
    /// The read failed (a missing permission, a stream without a leader): why.
    Failed(String),
}

impl Early {
    /// Reads `filter`'s messages in `stream`, whose key is at `key` in a stored subject; the
    /// partition's group runs at most `capacity` handlers at once here.
    pub(in crate::run) fn new(
        (js, api_prefix): (&jetstream::Context, &str),
        (stream, filter): (&str, &str),
        key: &'static [usize],
        capacity: Arc<Capacity>,
    ) -> Option<Early> {
        // No request: a handle on the stream by its name.
        let read_subject = format!("{api_prefix}.STREAM.MSG.GET.{stream}");
        let stream = js.get_stream_no_info(stream).now_or_never()?.ok()?;
        Some(Early {
            stream,
            read_subject,
            filter: filter.to_owned(),
            key,
            capacity,
        })
    }

    /// The partition's first message after the stream sequence `after`.
    pub(in crate::run) async fn look(&self, after: u64) -> Looked {
        let read = self
            .stream
            .raw_message_builder()
            .sequence(after.saturating_add(1))
            .next_by_subject(self.filter.clone())
            .send();
        match read.await {
            Ok(message) => Looked::Next(Box::new(Next {
                sequence: message.sequence,
                published: Some(SystemTime::from(message.time)),
                message,
            })),
            Err(e) if e.kind() == RawMessageErrorKind::NoMessageFound => Looked::Nothing,
            Err(e) => Looked::Failed(e.to_string()),
        }
    }

    /// The subject of the reads.
    pub(in crate::run) fn read_subject(&self) -> &str {
        &self.read_subject
    }

    /// How many handlers the partition's group runs at once here.
    pub(in crate::run) fn capacity(&self) -> &Arc<Capacity> {
        &self.capacity
    }

    /// Whether the stored subjects `a` and `b` differ at a token of the key: their messages
    /// have different keys.
    pub(in crate::run) fn other_key(&self, a: &str, b: &str) -> bool {
        super::settled::other_key(self.key, a, b)
    }
}

impl Next {
    /// Its stored subject.
    pub(in crate::run) fn subject(&self) -> &str {
        self.message.subject.as_str()
    }

    /// What its handler is given: a first delivery of it, with `pending` messages after it.
    pub(in crate::run) fn received(self, pending: u64) -> Arc<Received> {
        let headers = self.message.headers;
        Arc::new(Received {
            subject: self.message.subject,
            headers: (!headers.is_empty()).then_some(headers),
            payload: self.message.payload,
            delivered: 1,
            stream_sequence: self.sequence,
            published: self.published,
            pending,
            publishes: AtomicU32::new(0),
        })
    }
}

/// How long after the arrival of the message before it a message may still run early, and is
/// stopped if its own delivery has not come: half the partition's `ack_wait`, after which the
/// server could deliver the message before it again to another replica, and a third of its
/// pin's time to live (its pull requests expire within half of it, so the server heard from
/// it at most that long before the arrival), after which the server could pin another
/// replica (a link cut just after the ack went through).
pub(in crate::run) fn fresh_within(ack_wait: Duration) -> Duration {
    (ack_wait / 2).min(PARTITION_PIN_TTL / 3)
}
