//! What an endpoint's or a subscription's handler knows about the message it handles
//! ([`RequestContext`]) and what generated code hands it ([`Request`]).

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use async_nats::{HeaderMap, Subject};
use bytes::Bytes;

use crate::state::StateMap;

/// What an endpoint's (or a core subscription's) handler knows about the message it handles,
/// and what it can reach: take it as the optional second argument.
///
/// ```
/// use nats_topology::{RequestContext, ServiceError};
///
/// struct Db;
///
/// async fn get_member(id: String, cx: RequestContext) -> Result<String, ServiceError> {
///     let _db: &Db = cx.state::<Db>().expect("Db given to Runtime::builder().state(..)");
///     Ok(format!("{} asked {} for {id}", cx.subject(), cx.endpoint()))
/// }
/// ```
#[derive(Clone)]
pub struct RequestContext {
    pub(crate) subject: Subject,
    pub(crate) headers: Option<HeaderMap>,
    pub(crate) reply: Option<Subject>,
    pub(crate) scope: Arc<RequestScope>,
}

/// What every message of one endpoint or subscription shares.
pub(crate) struct RequestScope {
    /// The service (empty for a subscription).
    pub(crate) service: String,
    /// The endpoint's name, or the subscription's handler path.
    pub(crate) endpoint: String,
    pub(crate) state: StateMap,
    pub(crate) client: async_nats::Client,
    pub(crate) jetstream: async_nats::jetstream::Context,
}

impl RequestScope {
    pub(crate) fn new(
        service: &str,
        endpoint: &str,
        state: StateMap,
        client: async_nats::Client,
        jetstream: async_nats::jetstream::Context,
    ) -> Self {
        RequestScope {
            service: service.to_owned(),
            endpoint: endpoint.to_owned(),
            state,
            client,
            jetstream,
        }
    }
}

impl RequestContext {
    pub(crate) fn new(message: &async_nats::Message, scope: Arc<RequestScope>) -> Self {
        RequestContext {
            subject: message.subject.clone(),
            headers: message.headers.clone(),
            reply: message.reply.clone(),
            scope,
        }
    }

    /// The subject the request was sent to.
    pub fn subject(&self) -> &str {
        &self.subject
    }

    /// The request's headers, if any.
    pub fn headers(&self) -> Option<&HeaderMap> {
        self.headers.as_ref()
    }

    /// Where the reply goes (`None` for a message sent without one).
    pub fn reply(&self) -> Option<&str> {
        self.reply.as_deref()
    }

    /// The service the endpoint belongs to (empty for a subscription).
    pub fn service(&self) -> &str {
        &self.scope.service
    }

    /// The endpoint's name (a subscription's handler path).
    pub fn endpoint(&self) -> &str {
        &self.scope.endpoint
    }

    /// Application state of type `T`, if the builder was given one.
    pub fn state<T: Any + Send + Sync>(&self) -> Option<&T> {
        self.scope.state.get::<T>()
    }

    /// The runtime's connection, to publish or send requests of its own.
    pub fn client(&self) -> &async_nats::Client {
        &self.scope.client
    }

    /// A JetStream context on the runtime's connection, talking to the runtime's JetStream
    /// (see [`Runtime::jetstream`](crate::Runtime::jetstream)): to read a stream's messages in
    /// a reply.
    pub fn jetstream(&self) -> &async_nats::jetstream::Context {
        &self.scope.jetstream
    }

    pub(crate) fn state_map(&self) -> &StateMap {
        &self.scope.state
    }
}

impl fmt::Debug for RequestContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RequestContext")
            .field("subject", &self.subject)
            .field("service", &self.scope.service)
            .field("endpoint", &self.scope.endpoint)
            .finish_non_exhaustive()
    }
}

/// One request (or subscription message) on its way to a handler: its payload and its
/// [`RequestContext`].
pub struct Request {
    pub(crate) payload: Bytes,
    pub(crate) context: RequestContext,
}

impl Request {
    /// A request with `payload` in `context` (the runtime makes them; tests of a hand-built
    /// handler may too).
    pub(crate) fn new(payload: Bytes, context: RequestContext) -> Self {
        Request { payload, context }
    }

    /// The raw payload.
    pub fn payload(&self) -> &Bytes {
        &self.payload
    }

    /// The request's context.
    pub fn context(&self) -> &RequestContext {
        &self.context
    }
}
