//! Request/reply on core NATS: what an endpoint's handler sees ([`Request`],
//! [`RequestContext`]) and answers with ([`ServiceError`] when it fails), and the glue generated
//! code calls. The runtime serves the declared services through the NATS micro protocol.

mod error;
#[doc(hidden)]
pub mod glue;
#[cfg(feature = "tower")]
pub mod layer;
mod request;

use std::future::Future;
use std::pin::Pin;

use bytes::Bytes;

pub use error::ServiceError;
pub(crate) use request::RequestScope;
pub use request::{Request, RequestContext};

use crate::handler::HandlerFuture;

/// The boxed future a registered endpoint handler returns: the reply's body, or the error.
pub type ReplyFuture = Pin<Box<dyn Future<Output = Result<Bytes, ServiceError>> + Send + 'static>>;

/// The type-erased entry point that generated code registers for each endpoint.
pub type EndpointFn = fn(Request) -> ReplyFuture;

/// The type-erased entry point that generated code registers for each core subscription.
pub type SubscriptionFn = fn(Request) -> HandlerFuture;
