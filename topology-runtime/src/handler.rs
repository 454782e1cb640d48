//! What a handler sees and returns: [`Context`], [`HandlerError`], and the glue that generated
//! code uses to decode a payload and call the user's function.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use async_nats::HeaderMap;
use async_nats::jetstream;
use bytes::Bytes;
use serde::de::DeserializeOwned;

/// The error a handler returns.
///
/// A handler returns `Result<(), E>` for any `E` that converts into
/// `Box<dyn std::error::Error + Send + Sync>`: every std error, `anyhow::Error`,
/// `eyre::Report`, `String` and `&str`, or `HandlerError` itself. Each of them also converts
/// into `HandlerError` with `?`. By default an error is *transient*: the message is negatively
/// acknowledged and redelivered after the consumer's backoff. [`HandlerError::permanent`] marks
/// it as one that no retry will fix: the message is dead-lettered (if the consumer declares a
/// `dead_letter` subject) and terminated.
///
/// ```
/// use nats_topology::HandlerError;
///
/// fn check(amount: i64) -> Result<(), HandlerError> {
///     if amount < 0 {
///         return Err(HandlerError::permanent("negative amount"));
///     }
///     let _parsed: u32 = "42".parse()?; // any std error converts
///     Ok(())
/// }
/// assert!(check(-1).unwrap_err().is_permanent());
/// assert!(check(1).is_ok());
/// ```
///
/// # Why `HandlerError` does not implement `std::error::Error`
///
/// For the same reason `anyhow::Error` does not: `?` relies on the blanket
/// `impl<E: Into<Box<dyn Error + Send + Sync>>> From<E> for HandlerError`, which would overlap
/// with the standard library's `impl<T> From<T> for T` if `HandlerError` were itself an error
/// (rustc rejects the pair). Keeping `?` for every error type is worth more. Where a
/// `dyn Error` is needed, use [`HandlerError::source`] or [`HandlerError::into_source`]; its
/// `Display` and `Debug` are those of the underlying error.
pub struct HandlerError {
    source: Box<dyn std::error::Error + Send + Sync + 'static>,
    permanent: bool,
}

impl HandlerError {
    /// A transient failure: the message is redelivered after a delay.
    pub fn new(error: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>) -> Self {
        HandlerError {
            source: error.into(),
            permanent: false,
        }
    }

    /// A failure no retry will fix: the message is dead-lettered and terminated at once.
    pub fn permanent(error: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>) -> Self {
        HandlerError {
            source: error.into(),
            permanent: true,
        }
    }

    /// Whether this failure is permanent.
    pub fn is_permanent(&self) -> bool {
        self.permanent
    }

    /// The underlying error.
    pub fn source(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        &*self.source
    }

    /// The underlying error, by value (for a caller that needs a `dyn Error`).
    pub fn into_source(self) -> Box<dyn std::error::Error + Send + Sync + 'static> {
        self.source
    }
}

impl<E> From<E> for HandlerError
where
    E: Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
{
    fn from(error: E) -> Self {
        HandlerError::new(error)
    }
}

impl fmt::Display for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.source, f)
    }
}

impl fmt::Debug for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HandlerError")
            .field("source", &self.source)
            .field("permanent", &self.permanent)
            .finish()
    }
}

/// Application state given to [`RuntimeBuilder::state`](crate::RuntimeBuilder::state), one value
/// per type.
#[derive(Clone, Default)]
pub(crate) struct StateMap(Arc<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>);

impl StateMap {
    pub(crate) fn insert<T: Any + Send + Sync>(&mut self, value: T) {
        Arc::make_mut(&mut self.0).insert(TypeId::of::<T>(), Arc::new(value));
    }

    fn get<T: Any + Send + Sync>(&self) -> Option<&T> {
        self.0.get(&TypeId::of::<T>())?.downcast_ref::<T>()
    }

    pub(crate) fn get_arc<T: Any + Send + Sync>(&self) -> Option<Arc<T>> {
        self.0.get(&TypeId::of::<T>())?.clone().downcast::<T>().ok()
    }

    pub(crate) fn contains(&self, id: TypeId) -> bool {
        self.0.contains_key(&id)
    }
}

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
#[derive(Clone)]
pub struct Context {
    pub(crate) subject: async_nats::Subject,
    pub(crate) headers: Option<HeaderMap>,
    pub(crate) delivered: u64,
    pub(crate) stream_sequence: u64,
    pub(crate) scope: Arc<Scope>,
}

/// What every message of one consumer shares: names, application state, a JetStream context.
pub(crate) struct Scope {
    pub(crate) stream: String,
    pub(crate) consumer: String,
    pub(crate) state: StateMap,
    pub(crate) jetstream: jetstream::Context,
    /// Woken when a publish finds no stream: the runtime then checks the streams it owns.
    pub(crate) stream_missing: Arc<tokio::sync::Notify>,
}

impl Context {
    /// The subject the message was published to.
    pub fn subject(&self) -> &str {
        &self.subject
    }

    /// The message's headers, if any.
    pub fn headers(&self) -> Option<&HeaderMap> {
        self.headers.as_ref()
    }

    /// Which delivery this is, starting at 1.
    pub fn delivered(&self) -> u64 {
        self.delivered
    }

    /// The message's sequence number in its stream.
    pub fn stream_sequence(&self) -> u64 {
        self.stream_sequence
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
        self.scope.state.get::<T>()
    }

    /// Application state of type `T`, shared (what a [`State<T>`](crate::State) argument holds).
    pub(crate) fn state_arc<T: Any + Send + Sync>(&self) -> Option<Arc<T>> {
        self.scope.state.get_arc::<T>()
    }

    /// Publishes `value` as JSON to `subject` and waits for the stream's acknowledgement.
    pub async fn publish<T: serde::Serialize + ?Sized>(
        &self,
        subject: impl Into<async_nats::Subject>,
        value: &T,
    ) -> Result<jetstream::publish::PublishAck, HandlerError> {
        let payload = serde_json::to_vec(value)?;
        self.publish_bytes(subject, payload.into()).await
    }

    /// Publishes raw bytes to `subject` and waits for the stream's acknowledgement. A publish
    /// that finds no stream makes the runtime check at once the streams it owns and are not
    /// consumed here (one deleted out of band is created again). With the `otel` feature, the
    /// message carries the current span's trace context (`traceparent`, `tracestate`), which
    /// the handler that receives it continues.
    pub async fn publish_bytes(
        &self,
        subject: impl Into<async_nats::Subject>,
        payload: Bytes,
    ) -> Result<jetstream::publish::PublishAck, HandlerError> {
        let (js, subject) = (&self.scope.jetstream, subject.into());
        let mut headers = HeaderMap::new();
        crate::telemetry::inject_current(&mut headers); // telemetry hook: W3C trace context
        let ack = if headers.is_empty() {
            js.publish(subject, payload).await?
        } else {
            js.publish_with_headers(subject, headers, payload).await?
        };
        match ack.await {
            Ok(ack) => Ok(ack),
            Err(e) => {
                if e.kind() == jetstream::context::PublishErrorKind::StreamNotFound {
                    self.scope.stream_missing.notify_waiters();
                }
                Err(e.into())
            }
        }
    }
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context")
            .field("subject", &self.subject)
            .field("stream", &self.scope.stream)
            .field("consumer", &self.scope.consumer)
            .field("stream_sequence", &self.stream_sequence)
            .field("delivered", &self.delivered)
            .finish_non_exhaustive()
    }
}

/// One message on its way to a handler: its payload and its [`Context`].
pub struct Incoming {
    pub(crate) payload: Bytes,
    pub(crate) context: Context,
}

impl Incoming {
    /// The raw payload.
    pub fn payload(&self) -> &Bytes {
        &self.payload
    }

    /// The message's context.
    pub fn context(&self) -> &Context {
        &self.context
    }
}

/// The boxed future a registered handler returns.
pub type HandlerFuture = Pin<Box<dyn Future<Output = Result<(), HandlerError>> + Send + 'static>>;

/// The type-erased entry point that generated code registers for each handler.
pub type HandlerFn = fn(Incoming) -> HandlerFuture;

/// A payload that could not be decoded; always permanent (redelivery cannot fix it).
#[derive(Debug, thiserror::Error)]
#[error("cannot decode the payload as {type_name}: {source}")]
pub struct DecodeError {
    type_name: &'static str,
    #[source]
    source: serde_json::Error,
}

/// Helpers for generated code. Not public API.
#[doc(hidden)]
pub mod glue {
    use super::*;

    /// Decodes a JSON payload; a failure is permanent.
    pub fn decode_json<T: DeserializeOwned>(incoming: &Incoming) -> Result<T, HandlerError> {
        serde_json::from_slice(&incoming.payload).map_err(|source| {
            HandlerError::permanent(DecodeError {
                type_name: std::any::type_name::<T>(),
                source,
            })
        })
    }

    /// Passes a raw payload through (`Vec<u8>` or `Bytes`).
    pub fn decode_raw<T: RawPayload>(incoming: &Incoming) -> Result<T, HandlerError> {
        Ok(T::from_bytes(incoming.payload.clone()))
    }

    /// The handler's context: the second argument of a handler, which must be a [`Context`].
    pub fn context<C: HandlerContext>(incoming: &Incoming) -> C {
        C::from_incoming(incoming)
    }

    /// The types a handler's second argument may have: [`Context`] alone. The bound turns a
    /// second payload argument into an error that says what the argument must be.
    #[diagnostic::on_unimplemented(
        message = "the second argument of a handler is its `Context`, not `{Self}`",
        label = "expected `nats_topology::Context` here",
        note = "a handler takes one payload argument, then optionally `cx: Context` (by value): to receive several values, make the payload a struct that holds them"
    )]
    pub trait HandlerContext: Sized {
        /// The context of `incoming`.
        fn from_incoming(incoming: &Incoming) -> Self;
    }

    impl HandlerContext for Context {
        fn from_incoming(incoming: &Incoming) -> Self {
            incoming.context.clone()
        }
    }

    /// Converts a handler's result: `E` is `HandlerError` or anything that converts into
    /// `Box<dyn Error + Send + Sync>` (see [`HandlerError`]).
    pub fn into_result<E: IntoHandlerError>(result: Result<(), E>) -> Result<(), HandlerError> {
        result.map_err(IntoHandlerError::into_handler_error)
    }

    /// `Into<HandlerError>` under a name whose failure says what a handler may return (rustc
    /// reports the bound's message, not the `Box<dyn Error>` conversion under it).
    #[diagnostic::on_unimplemented(
        message = "a handler's error type must convert into `HandlerError`; `{Self}` does not",
        label = "not an error type a handler can return",
        note = "return `Result<(), E>` with `E` = `HandlerError`, `anyhow::Error`, `eyre::Report`, or any `std::error::Error + Send + Sync + 'static`"
    )]
    pub trait IntoHandlerError {
        /// The conversion.
        fn into_handler_error(self) -> HandlerError;
    }

    impl<E: Into<HandlerError>> IntoHandlerError for E {
        fn into_handler_error(self) -> HandlerError {
            self.into()
        }
    }

    /// Requires a handler's future to be `Send` (the runtime runs it on any worker thread).
    pub fn assert_send<F: Future + Send>(future: F) -> F {
        future
    }

    /// Payload types passed through without decoding.
    pub trait RawPayload {
        /// Wraps the raw bytes.
        fn from_bytes(bytes: Bytes) -> Self;
    }

    impl RawPayload for Bytes {
        fn from_bytes(bytes: Bytes) -> Self {
            bytes
        }
    }

    impl RawPayload for Vec<u8> {
        fn from_bytes(bytes: Bytes) -> Self {
            bytes.into()
        }
    }
}
