//! What a handler knows about the message it handles ([`Context`], shared per consumer through
//! [`Scope`]) and what generated code hands it ([`Incoming`]).

use std::any::Any;
use std::fmt;
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex, PoisonError};

use async_nats::HeaderMap;
use async_nats::jetstream;
use bytes::Bytes;

use crate::state::StateMap;

/// What a handler knows about the message it handles, and what it can reach.
///
/// Take it as the optional second argument of a handler:
///
/// ```
/// use nats_topology::{Context, HandlerError};
///
/// struct Db;
///
/// async fn on_event(event: serde_json::Value, cx: Context) -> Result<(), HandlerError> {
///     let _db: &Db = cx.state::<Db>().expect("Db given to Runtime::builder().state(..)");
///     println!("{} #{} (attempt {})", cx.subject(), cx.stream_sequence(), cx.delivered());
///     Ok(())
/// }
/// ```
///
/// # Deduplicated outputs
///
/// A handler that publishes a result and is then redelivered (it failed after publishing,
/// its process was killed before its ack, its ack was lost) publishes the result again.
/// [`publish`](Context::publish), [`publish_bytes`](Context::publish_bytes),
/// [`publish_with_headers`](Context::publish_with_headers) and [`publisher`](Context::publisher)
/// therefore send a `Nats-Msg-Id` derived from the message being handled: its stream (and that
/// stream's instance), its stream sequence, the consumer, and *n*, the position of the publish
/// in this handler call (1 for the first). Every delivery of one message gives its n-th
/// publish the same id, so the target stream stores it once and acknowledges the repeats as
/// duplicates (`PublishAck::duplicate`).
///
/// - **The window.** The target stream drops a repeated id only within its
///   `duplicate_window` (`#[stream(duplicate_window = "..")]`; the server's default is
///   2 minutes). A redelivery later than that (a long `backoff`, an `ack_wait` longer than the
///   window, a consumer stopped for longer) publishes again, and the copy is stored. Keep the
///   window above `ack_wait` plus the longest backoff step.
/// - **Positions.** Ids are positional: a handler must publish its outputs in the same order
///   on every delivery. One that publishes a different number of messages on a redelivery
///   has its first outputs deduplicated by position, and any further ones stored; one whose
///   outputs differ between deliveries keeps the first delivery's output at each position.
///   When outputs are not deterministic, give each an id of its own ([`Publish::msg_id`], a
///   business key). Publishes of one call made concurrently (clones of one `Context`,
///   `join!`) take positions in the order they are sent: give them ids.
/// - **Broadcasts.** A relay's id names its own per-instance consumer, so the same message
///   relayed by every instance yields different ids: each instance's publish is kept. This is
///   deliberate: a relay publishes what its own instance knows (its sessions), and a shared id
///   would keep one instance's output and silently drop the others'. Work that must be
///   published once belongs in a `#[queue_consumer]`.
/// - **No stream.** The id is honoured by JetStream streams only. A subject no stream captures
///   is refused by these methods (the publish has no stream to acknowledge it); publishing it
///   on core NATS (`async_nats::Client::publish`) cannot be deduplicated at all.
/// - **Opting out.** [`Publish::without_dedup`] sends no id, and an explicit
///   `Nats-Msg-Id` (in [`Publish::msg_id`] or the headers) is sent as given.
///
/// # Permissions
///
/// The permissions `export --permissions` generates let a handler publish only where its
/// consumer declares it (`#[queue_consumer(.., publishes = ["orders.billed"])]`,
/// `ConsumerDecl::publishes`), into its streams or anywhere else: owning a stream grants no
/// publishing into it. A publish the server refuses gets no acknowledgement, so these methods
/// fail, and health names the subject (docs/PERMISSIONS.md).
///
/// [`Publish::msg_id`]: super::Publish::msg_id
/// [`Publish::without_dedup`]: super::Publish::without_dedup
#[derive(Clone)]
pub struct Context {
    /// The message being handled (shared by the clones of this context).
    pub(crate) received: Arc<Received>,
    pub(crate) scope: Arc<Scope>,
}

/// One delivery of a message, as its handler sees it: shared by its [`Incoming`], the clones
/// of its [`Context`] and the runtime settling it, so that a message costs one allocation
/// here (its subject, headers and payload are moved in, not cloned).
pub(crate) struct Received {
    pub(crate) subject: async_nats::Subject,
    pub(crate) headers: Option<HeaderMap>,
    pub(crate) payload: Bytes,
    pub(crate) delivered: u64,
    pub(crate) stream_sequence: u64,
    /// When the server stored the message, and how many messages the consumer had left
    /// after it when it was delivered.
    pub(crate) published: Option<std::time::SystemTime>,
    pub(crate) pending: u64,
    /// How many publishes this handler call made.
    pub(crate) publishes: AtomicU32,
}

/// What every message of one consumer shares: its names, and what every consumer of the
/// runtime shares.
pub(crate) struct Scope {
    pub(crate) stream: String,
    pub(crate) consumer: String,
    /// A token of the stream instance's creation time (see [`stream_epoch`](super::stream_epoch)), part of every
    /// derived message id.
    pub(crate) stream_epoch: String,
    pub(crate) common: Arc<Common>,
}

/// What the handlers and pull sessions of every consumer of one runtime share (built once:
/// each consumer holds a reference): the connection, application state, a JetStream context,
/// how publishes fail and are retried.
pub(crate) struct Common {
    pub(crate) client: async_nats::Client,
    pub(crate) state: StateMap,
    pub(crate) jetstream: jetstream::Context,
    /// Woken when a publish finds no stream: the runtime then checks the streams it owns.
    pub(crate) stream_missing: Arc<tokio::sync::Notify>,
    /// How a publish whose acknowledgement did not come is sent again.
    pub(crate) publish_retry: crate::retry::RetryPolicy,
    /// Woken when a publish gets no acknowledgement: the runtime then reads at once whether
    /// its streams take writes.
    pub(crate) publish_unanswered: Arc<tokio::sync::Notify>,
    /// Why the stream that captures a subject takes no writes, if the runtime last read so
    /// (what a failed publish's error says).
    pub(crate) refusing: Refusing,
}

/// Why the stream that captures a subject takes no writes (`None` while it does, or while
/// nothing is known of it).
pub(crate) type Refusing = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

impl Context {
    /// The subject the message was published to.
    pub fn subject(&self) -> &str {
        &self.received.subject
    }

    /// The message's headers, if any.
    pub fn headers(&self) -> Option<&HeaderMap> {
        self.received.headers.as_ref()
    }

    /// Which delivery this is, starting at 1.
    pub fn delivered(&self) -> u64 {
        self.received.delivered
    }

    /// The message's sequence number in its stream.
    pub fn stream_sequence(&self) -> u64 {
        self.received.stream_sequence
    }

    /// When the server stored the message (`None` if its delivery did not say).
    pub fn published(&self) -> Option<std::time::SystemTime> {
        self.received.published
    }

    /// How many messages the consumer had left to deliver after this one, when it was
    /// delivered (0: it was the latest).
    pub fn pending(&self) -> u64 {
        self.received.pending
    }

    /// The stream the message came from.
    pub fn stream(&self) -> &str {
        &self.scope.stream
    }

    /// The consumer that delivered it.
    pub fn consumer(&self) -> &str {
        &self.scope.consumer
    }

    /// Application state of type `T`, if the builder was given one.
    pub fn state<T: Any + Send + Sync>(&self) -> Option<&T> {
        self.scope.common.state.get::<T>()
    }

    /// Application state of type `T`, shared (what a [`State<T>`](crate::State) argument holds).
    pub(crate) fn state_arc<T: Any + Send + Sync>(&self) -> Option<Arc<T>> {
        self.scope.common.state.get_arc::<T>()
    }
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context")
            .field("subject", &self.received.subject)
            .field("stream", &self.scope.stream)
            .field("consumer", &self.scope.consumer)
            .field("stream_sequence", &self.received.stream_sequence)
            .field("delivered", &self.received.delivered)
            .finish_non_exhaustive()
    }
}

/// One message on its way to a handler: its payload and its [`Context`].
pub struct Incoming {
    pub(crate) context: Context,
    /// The payload as a layer decoded it ([`Incoming::decode`]), which the handler's decoding
    /// takes instead of decoding again. Behind a lock (uncontended: one owner at a time) so
    /// that `Incoming` stays `Sync` and a layer may hold `&Incoming` across an `.await`.
    pub(crate) decoded: Mutex<Option<Box<dyn Any + Send>>>,
}

impl Incoming {
    /// A message in `context`, not decoded yet.
    pub(crate) fn new(context: Context) -> Self {
        Incoming {
            context,
            decoded: Mutex::new(None),
        }
    }

    /// The raw payload.
    pub fn payload(&self) -> &Bytes {
        &self.context.received.payload
    }

    /// The message's context.
    pub fn context(&self) -> &Context {
        &self.context
    }

    /// The payload decoded as `T` by `codec`, its `Content-Type` checked as the handler's is
    /// (a mismatch or a payload that does not decode is a permanent error): what a `tower`
    /// layer reads of the message. Decoded once: the handler, taking `T` with the same codec,
    /// takes this value rather than decoding again.
    ///
    /// ```
    /// use nats_topology::codec::Json;
    /// use nats_topology::{HandlerError, Incoming};
    ///
    /// #[derive(serde::Deserialize)]
    /// struct Order {
    ///     total: i64,
    /// }
    ///
    /// /// What a layer of one's own might check before the handler runs.
    /// fn refuse_negative(incoming: &mut Incoming) -> Result<(), HandlerError> {
    ///     let order: &Order = incoming.decode(Json)?;
    ///     if order.total < 0 {
    ///         return Err(HandlerError::permanent("a negative total"));
    ///     }
    ///     Ok(())
    /// }
    /// ```
    pub fn decode<C, T>(&mut self, codec: C) -> Result<&T, super::HandlerError>
    where
        C: crate::codec::Decode<T>,
        T: Send + 'static,
    {
        let _ = codec;
        let cached = self
            .decoded
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        if !cached.as_ref().is_some_and(|value| value.is::<T>()) {
            let value = super::glue::decode_with::<C, T>(self)?;
            *self
                .decoded
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner) = Some(Box::new(value));
        }
        match self
            .decoded
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
        {
            Some(value) => Ok(value.downcast_ref::<T>().expect("decoded as `T` above")),
            None => unreachable!("decoded above"),
        }
    }

    /// The value a layer decoded, if it is a `T` (taken: the handler owns it).
    pub(crate) fn take_decoded<T: 'static>(&self) -> Option<T> {
        let mut decoded = self.decoded.lock().unwrap_or_else(PoisonError::into_inner);
        if !decoded.as_ref()?.is::<T>() {
            return None;
        }
        let value = decoded.take()?.downcast::<T>().ok()?;
        Some(*value)
    }
}

// A layer may hold `&Incoming` across an `.await` in a future that must be `Send`.
const _: fn() = || {
    fn send_and_sync<T: Send + Sync>() {}
    send_and_sync::<Incoming>();
};

/// When a change was written, from a message's timestamp.
pub(crate) fn system_time(nanos_since_epoch: i128) -> Option<std::time::SystemTime> {
    let nanos = u64::try_from(nanos_since_epoch).ok()?;
    Some(std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_nanos(nanos))
}
