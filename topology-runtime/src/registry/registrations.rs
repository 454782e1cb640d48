//! What the macros submit to `inventory` (one registration per declaration) and the shapes in
//! which a [`Topology`](super::Topology) holds handlers.

use std::sync::Arc;

use crate::handler::{BatchFn, HandlerFn, HandlerFuture};
use crate::service::{EndpointFn, ReplyFuture, Request, SubscriptionFn};
use crate::state::StateKey;
use topology_core::bucket::BucketDecl;
use topology_core::model::{ConsumerDecl, StreamDecl};
use topology_core::service::{EndpointDecl, ServiceDecl, SubscriptionDecl};
use topology_core::watch::WatchDecl;

/// A stream registered by `#[stream]`.
#[doc(hidden)]
pub struct StreamRegistration {
    pub decl: &'static StreamDecl,
}

/// A key-value bucket or object store registered by `#[kv_bucket]` or `#[object_store]`.
#[doc(hidden)]
pub struct BucketRegistration {
    pub decl: &'static BucketDecl,
}

/// A consumer registered by `#[queue_consumer]` or `#[broadcast]`.
#[doc(hidden)]
pub struct ConsumerRegistration {
    pub decl: &'static ConsumerDecl,
    pub handler: HandlerFn,
    /// The application state the handler's `State<T>` arguments need.
    pub states: &'static [StateKey],
}

/// A queue consumer with a batch handler, registered by `#[queue_consumer(batch = N)]`.
#[doc(hidden)]
pub struct BatchConsumerRegistration {
    pub decl: &'static ConsumerDecl,
    pub handler: BatchFn,
    /// The application state the handler's `State<T>` arguments need.
    pub states: &'static [StateKey],
}

/// A watch registered by `#[kv_watch]`.
#[doc(hidden)]
pub struct WatchRegistration {
    pub decl: &'static WatchDecl,
    pub handler: HandlerFn,
    /// The application state the handler's `State<T>` arguments need.
    pub states: &'static [StateKey],
}

/// A service registered by `#[service]`.
#[doc(hidden)]
pub struct ServiceRegistration {
    pub decl: &'static ServiceDecl,
}

/// An endpoint registered by `#[endpoint]`.
#[doc(hidden)]
pub struct EndpointRegistration {
    pub decl: &'static EndpointDecl,
    pub handler: EndpointFn,
    /// The application state the handler's `State<T>` arguments need.
    pub states: &'static [StateKey],
}

/// A core subscription registered by `#[subscription]`.
#[doc(hidden)]
pub struct SubscriptionRegistration {
    pub decl: &'static SubscriptionDecl,
    pub handler: SubscriptionFn,
    /// The application state the handler's `State<T>` arguments need.
    pub states: &'static [StateKey],
}

inventory::collect!(StreamRegistration);
inventory::collect!(BucketRegistration);
inventory::collect!(ConsumerRegistration);
inventory::collect!(BatchConsumerRegistration);
inventory::collect!(WatchRegistration);
inventory::collect!(ServiceRegistration);
inventory::collect!(EndpointRegistration);
inventory::collect!(SubscriptionRegistration);

pub use crate::handler::SharedHandler;

/// An endpoint handler as the runtime holds it.
pub type SharedEndpointHandler = Arc<dyn Fn(Request) -> ReplyFuture + Send + Sync + 'static>;

/// A subscription handler as the runtime holds it.
pub type SharedSubscriptionHandler = Arc<dyn Fn(Request) -> HandlerFuture + Send + Sync + 'static>;
