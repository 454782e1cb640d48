//! What generated code calls to turn a [`Request`] into the user's endpoint or subscription
//! arguments, and the return value into a reply. Not public API: the facade re-exports it under
//! `__private`. Each bound carries an `on_unimplemented` message, so a wrong signature is
//! reported at the user's tokens in the user's terms.

use std::future::Future;

use bytes::Bytes;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{Request, RequestContext, ServiceError};
use crate::codec::{Decode, Encode, Json, check_content_type};
use crate::handler::HandlerError;
use crate::handler::glue::RawPayload;
use crate::state::{State, StateKey};

/// Decodes a JSON request (the default codec); a failure is a 400 naming the type.
pub fn decode_request_json<T: DeserializeOwned>(request: &Request) -> Result<T, ServiceError> {
    decode_request_with::<Json, T>(request)
}

/// Decodes a request with the codec `C`, once its `Content-Type` (if any) says it is `C`'s; a
/// failure is a 400 naming the type and the content types.
pub fn decode_request_with<C: Decode<T>, T>(request: &Request) -> Result<T, ServiceError> {
    let failed = |e: &dyn std::fmt::Display| {
        ServiceError::bad_request(format!(
            "cannot decode the request as {} ({}): {e}",
            std::any::type_name::<T>(),
            C::ID.content_type()
        ))
    };
    check_content_type(C::ID, request.context.headers()).map_err(|m| failed(&m))?;
    C::decode(&request.payload).map_err(|e| failed(&e))
}

/// Passes a raw request through (`Vec<u8>` or `Bytes`).
pub fn decode_request_raw<T: RawPayload>(request: &Request) -> Result<T, ServiceError> {
    Ok(T::from_bytes(request.payload.clone()))
}

/// The handler's context: the second argument, which must be a [`RequestContext`].
pub fn request_context<C: EndpointContext>(request: &Request) -> C {
    C::from_request(request)
}

/// The types an endpoint's second argument may have: [`RequestContext`] alone.
#[diagnostic::on_unimplemented(
    message = "the second argument of an endpoint or subscription handler is its `RequestContext`, not `{Self}`",
    label = "expected `nats_topology::RequestContext` here",
    note = "a handler takes one payload argument, then optionally `cx: RequestContext` (by value), then any number of `State<T>`: to receive several values, make the payload a struct that holds them"
)]
pub trait EndpointContext: Sized {
    /// The context of `request`.
    fn from_request(request: &Request) -> Self;
}

impl EndpointContext for RequestContext {
    fn from_request(request: &Request) -> Self {
        request.context.clone()
    }
}

/// The arguments of an endpoint or subscription handler after the payload that are
/// application state: `State<T>` alone.
#[diagnostic::on_unimplemented(
    message = "an endpoint's or subscription's arguments after the payload are its `RequestContext` and `State<T>` values, not `{Self}`",
    label = "expected `nats_topology::State<T>` here",
    note = "a handler takes one payload argument, then optionally `cx: RequestContext`, then any number of `State<T>` (state given to `Runtime::builder(..).state(..)`): to receive several values in the request, make the payload a struct that holds them"
)]
pub trait RequestStateArg: Sized {
    /// What the runtime must have been given.
    const KEY: StateKey;

    /// The value, from the runtime's state.
    fn from_request(request: &Request) -> Result<Self, ServiceError>;
}

impl<T: std::any::Any + Send + Sync> RequestStateArg for State<T> {
    const KEY: StateKey = StateKey::of::<T>();

    fn from_request(request: &Request) -> Result<Self, ServiceError> {
        // `RuntimeBuilder::build` refuses a runtime that lacks it, so this is found; the
        // error is for a handler registered behind the builder's back.
        match request.context.state_map().get_arc::<T>() {
            Some(value) => Ok(State(value)),
            None => Err(ServiceError::internal(format!(
                "the handler takes `State<{}>` but the runtime was given no such state",
                std::any::type_name::<T>()
            ))),
        }
    }
}

/// An endpoint handler's `State<T>` argument.
pub fn request_state<S: RequestStateArg>(request: &Request) -> Result<S, ServiceError> {
    S::from_request(request)
}

/// An endpoint's result as the reply's body: `Ok` encoded as JSON, `Err` converted.
pub fn reply_json<T: ReplyBody, E: IntoServiceError>(
    result: Result<T, E>,
) -> Result<Bytes, ServiceError> {
    match result {
        Ok(value) => encode_json(&value),
        Err(error) => Err(error.into_service_error()),
    }
}

/// An endpoint's result as the reply's body: `Ok` encoded with the codec `C` (the runtime
/// writes its `Content-Type`), `Err` converted.
pub fn reply_with<C: Encode<T>, T, E: IntoServiceError>(
    result: Result<T, E>,
) -> Result<Bytes, ServiceError> {
    match result {
        Ok(value) => C::encode(&value).map_err(|e| {
            ServiceError::internal(format!(
                "cannot encode the reply ({}) as {}: {e}",
                std::any::type_name::<T>(),
                C::ID.content_type()
            ))
        }),
        Err(error) => Err(error.into_service_error()),
    }
}

/// An endpoint's raw result as the reply's body (`Bytes` or `Vec<u8>`, sent as they are).
pub fn reply_raw<T: RawReply, E: IntoServiceError>(
    result: Result<T, E>,
) -> Result<Bytes, ServiceError> {
    match result {
        Ok(value) => Ok(value.into_bytes()),
        Err(error) => Err(error.into_service_error()),
    }
}

/// What an endpoint returns, `Result<T, E>`, seen through a type alias: the reply type `T`,
/// whose schema the export describes.
#[diagnostic::on_unimplemented(
    message = "an endpoint returns `Result<T, E>` (the reply and the error), not `{Self}`",
    label = "not `Result<T, E>`",
    note = "return `Result<T, E>` with `T: serde::Serialize` (or `Bytes`, `Vec<u8>`) and `E: Into<ServiceError>`"
)]
pub trait EndpointReturn {
    /// The reply type.
    type Reply;
}

impl<T, E> EndpointReturn for Result<T, E> {
    type Reply = T;
}

/// The body of a reply: `Serialize` types as JSON, `Bytes` and `Vec<u8>` as they are (chosen
/// by the macro from the written type, as for payloads).
pub fn encode_json<T: ReplyBody>(value: &T) -> Result<Bytes, ServiceError> {
    serde_json::to_vec(value).map(Bytes::from).map_err(|e| {
        ServiceError::internal(format!(
            "cannot encode the reply ({}) as JSON: {e}",
            std::any::type_name::<T>()
        ))
    })
}

/// Reply types sent without encoding.
pub trait RawReply {
    /// The bytes.
    fn into_bytes(self) -> Bytes;
}

impl RawReply for Bytes {
    fn into_bytes(self) -> Bytes {
        self
    }
}

impl RawReply for Vec<u8> {
    fn into_bytes(self) -> Bytes {
        self.into()
    }
}

/// Converts an endpoint's error.
pub fn into_service_error<E: IntoServiceError>(error: E) -> ServiceError {
    error.into_service_error()
}

/// `Into<ServiceError>` under a name whose failure says what an endpoint may return.
#[diagnostic::on_unimplemented(
    message = "an endpoint's error type must convert into `ServiceError`; `{Self}` does not",
    label = "not an error type an endpoint can return",
    note = "return `Result<T, E>` with `E` = `ServiceError` (a code and a description), or any `std::error::Error + Send + Sync + 'static` (answered as a 500)"
)]
pub trait IntoServiceError {
    /// The conversion.
    fn into_service_error(self) -> ServiceError;
}

impl<E: Into<ServiceError>> IntoServiceError for E {
    fn into_service_error(self) -> ServiceError {
        self.into()
    }
}

/// Requires an endpoint's reply to be `Serialize` (or raw bytes).
#[diagnostic::on_unimplemented(
    message = "an endpoint's reply type must be `serde::Serialize` (sent as JSON), `Bytes` or `Vec<u8>`; `{Self}` is neither",
    label = "not a reply an endpoint can send",
    note = "return `Result<T, E>` with `T: serde::Serialize`"
)]
pub trait ReplyBody: Serialize {}

impl<T: Serialize> ReplyBody for T {}

/// A subscription handler's JSON payload; a decode failure is permanent.
pub fn decode_message_json<T: DeserializeOwned>(request: &Request) -> Result<T, HandlerError> {
    decode_message_with::<Json, T>(request)
}

/// A subscription handler's payload in the codec `C`; a decode failure is permanent.
pub fn decode_message_with<C: Decode<T>, T>(request: &Request) -> Result<T, HandlerError> {
    decode_request_with::<C, T>(request)
        .map_err(|e| HandlerError::permanent(e.description().to_owned()))
}

/// A subscription handler's raw payload (`Vec<u8>` or `Bytes`).
pub fn decode_message_raw<T: RawPayload>(request: &Request) -> Result<T, HandlerError> {
    Ok(T::from_bytes(request.payload.clone()))
}

/// A subscription handler's `State<T>` argument.
pub fn message_state<S: RequestStateArg>(request: &Request) -> Result<S, HandlerError> {
    S::from_request(request).map_err(|e| HandlerError::permanent(e.description().to_owned()))
}

/// Requires a handler's future to be `Send` (the runtime runs it on any worker thread).
pub fn assert_send_reply<F: Future + Send>(future: F) -> F {
    future
}
