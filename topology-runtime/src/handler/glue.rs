//! What generated code calls to turn an [`Incoming`] message into the user's handler
//! arguments and its return value into a [`HandlerError`]. Not public API: the facade
//! re-exports it under `__private`. Each bound carries an `on_unimplemented` message, so a
//! wrong handler signature is reported at the user's tokens in the user's terms.

use std::future::Future;

use bytes::Bytes;
use serde::de::DeserializeOwned;

use super::{Context, DecodeError, HandlerError, Incoming};
use crate::codec::{CodecError, Decode, Json, check_content_type};
use crate::state::{State, StateKey};

/// Decodes a JSON payload (the default codec); a failure is permanent.
pub fn decode_json<T: DeserializeOwned + 'static>(incoming: &Incoming) -> Result<T, HandlerError> {
    decode_with::<Json, T>(incoming)
}

/// Decodes the payload with the codec `C`, once its `Content-Type` (if any) says it is
/// `C`'s (or takes the value a layer decoded, [`Incoming::decode`]); a failure is permanent.
pub fn decode_with<C: Decode<T>, T: 'static>(incoming: &Incoming) -> Result<T, HandlerError> {
    let failed = |source: CodecError| {
        HandlerError::permanent(DecodeError {
            type_name: std::any::type_name::<T>(),
            codec: C::ID,
            source,
        })
    };
    if let Some(value) = incoming.take_decoded::<T>() {
        return Ok(value);
    }
    check_content_type(C::ID, incoming.context.headers()).map_err(|m| failed(m.into()))?;
    C::decode(incoming.payload()).map_err(failed)
}

/// Passes a raw payload through (`Vec<u8>` or `Bytes`).
pub fn decode_raw<T: RawPayload>(incoming: &Incoming) -> Result<T, HandlerError> {
    Ok(T::from_bytes(incoming.payload().clone()))
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

/// The handler arguments after the payload that are application state: `State<T>` alone.
#[diagnostic::on_unimplemented(
    message = "a handler's arguments after the payload are its `Context` and `State<T>` values, not `{Self}`",
    label = "expected `nats_topology::State<T>` here",
    note = "a handler takes one payload argument, then optionally `cx: Context`, then any number of `State<T>` (state given to `Runtime::builder(..).state(..)`): to receive several values in the message, make the payload a struct that holds them"
)]
pub trait StateArg: Sized {
    /// What the runtime must have been given.
    const KEY: StateKey;

    /// The value, from the runtime's state.
    fn from_incoming(incoming: &Incoming) -> Result<Self, HandlerError>;
}

impl<T: std::any::Any + Send + Sync> StateArg for State<T> {
    const KEY: StateKey = StateKey::of::<T>();

    fn from_incoming(incoming: &Incoming) -> Result<Self, HandlerError> {
        // `RuntimeBuilder::build` refuses a runtime that lacks it, so this is found; the
        // error is for a handler registered behind the builder's back.
        match incoming.context().state_arc::<T>() {
            Some(value) => Ok(State(value)),
            None => Err(HandlerError::permanent(format!(
                "the handler takes `State<{}>` but the runtime was given no such state: add `.state(..)` with a value of that type to `Runtime::builder`",
                std::any::type_name::<T>()
            ))),
        }
    }
}

/// A handler's `State` argument.
pub fn state<S: StateArg>(incoming: &Incoming) -> Result<S, HandlerError> {
    S::from_incoming(incoming)
}

/// A batch handler's `State<T>` argument, from the first message of the batch (every message
/// of a batch comes from one session, which holds the state).
pub fn batch_state<S: StateArg>(input: &super::BatchInput) -> Result<S, HandlerError> {
    match input.incoming().first() {
        Some(incoming) => S::from_incoming(incoming),
        None => Err(HandlerError::new("an empty batch has no state")),
    }
}

/// A batch handler's result as the runtime settles it.
#[diagnostic::on_unimplemented(
    message = "a batch handler's error type must convert into `BatchError`; `{Self}` does not",
    label = "not an error type a batch handler can return",
    note = "return `Result<(), BatchError>` (built with `Failures` to fail some messages only), or `Result<(), E>` with `E: Into<HandlerError>` to fail the whole batch"
)]
pub trait IntoBatchError {
    /// The conversion.
    fn into_batch_error(self) -> super::BatchError;
}

impl<E: Into<super::BatchError>> IntoBatchError for E {
    fn into_batch_error(self) -> super::BatchError {
        self.into()
    }
}

/// Converts a batch handler's result.
pub fn into_batch_result<E: IntoBatchError>(
    result: Result<(), E>,
) -> Result<(), super::BatchError> {
    result.map_err(IntoBatchError::into_batch_error)
}
