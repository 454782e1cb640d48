//! The declarations that `#[stream]`, `#[queue_consumer]`, `#[broadcast]`, `#[kv_bucket]`,
//! `#[kv_watch]`, `#[object_store]`, `#[service]`, `#[endpoint]` and `#[subscription]`
//! register through `inventory`, read once into a sorted, deterministic [`Topology`].

mod batches;
mod buckets;
mod handlers;
mod keys;
mod layers;
mod partitions;
mod registrations;
mod sorted;
mod watches;

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::fmt;
use std::sync::Arc;

use crate::handler::{HandlerFuture, Incoming, SharedBatchHandler};
use crate::service::{ReplyFuture, Request};
use crate::state::StateKey;
pub(crate) use buckets::is_reserved_subject;
pub use buckets::stream_of;
pub use handlers::{Consumer, Endpoint, Subscription};
#[cfg(feature = "tower")]
pub(crate) use layers::declared as declared_layer;
pub use layers::{
    AnyLayer, IntoBatchLayer, IntoEndpointLayer, IntoHandlerLayer, LayerRegistration,
};
pub use partitions::{
    MEMBER_BEAT, MEMBER_TTL, MEMBERS_BUCKET, PARTITION_PIN_TTL, PartitionOf, Route,
    route as partition_route,
};
pub use registrations::{
    BatchConsumerRegistration, BucketRegistration, ConsumerRegistration, EndpointRegistration,
    ServiceRegistration, SharedEndpointHandler, SharedHandler, SharedSubscriptionHandler,
    StreamRegistration, SubscriptionRegistration, WatchRegistration,
};
use sorted::SortedList;
use topology_core::bucket::BucketDecl;
use topology_core::model::{ConsumerDecl, StreamDecl};
use topology_core::service::{EndpointDecl, ServiceDecl, SubscriptionDecl};

/// Every stream and consumer a runtime provisions and runs.
///
/// [`Topology::from_registry`] reads what the macros registered, sorted by name so that
/// iteration is deterministic; a topology can also be built by hand:
///
/// ```
/// use nats_topology::{HandlerError, Topology};
/// use nats_topology::model::{ConsumerDecl, QueueDecl, StreamDecl, StreamRef};
///
/// static ORDERS: StreamDecl = StreamDecl::new("ORDERS", &["orders.>"]);
///
/// let topology = Topology::new().stream(ORDERS).consumer(
///     ConsumerDecl::queue("billing::on_order", StreamRef::Declared(&ORDERS), QueueDecl::new("billing"))
///         .subjects(&["orders.created"]),
///     |incoming| Box::pin(async move {
///         println!("{} bytes", incoming.payload().len());
///         Ok::<(), HandlerError>(())
///     }),
/// );
/// assert_eq!(topology.consumers().len(), 1);
/// ```
#[derive(Clone, Default)]
pub struct Topology {
    /// By name; two *different* declarations under one name stay, so that validation can
    /// report them.
    streams: SortedList<StreamDecl>,
    /// The first declaration in `streams` under each name: a stream seen twice (registered,
    /// and referenced by each of its consumers) is one stream.
    declared: HashMap<&'static str, StreamDecl>,
    /// Key-value buckets and object stores by name; each also adds its stream to `streams`.
    /// As for streams, two different declarations under one name stay.
    buckets: SortedList<BucketDecl>,
    /// By stream, then handler.
    consumers: SortedList<Consumer>,
    /// By name; as for streams, two different declarations under one name stay.
    services: SortedList<ServiceDecl>,
    /// By service, then subject, then handler.
    endpoints: SortedList<Endpoint>,
    /// By subject, then handler.
    subscriptions: SortedList<Subscription>,
}

impl fmt::Debug for Topology {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Topology")
            .field("streams", &self.streams())
            .field("buckets", &self.buckets())
            .field("consumers", &self.consumers())
            .field("services", &self.services())
            .field("endpoints", &self.endpoints())
            .field("subscriptions", &self.subscriptions())
            .finish()
    }
}

impl Topology {
    /// An empty topology.
    pub fn new() -> Self {
        Topology::default()
    }

    /// Everything the macros registered in this program: streams sorted by name, consumers by
    /// stream, then handler path. Streams referenced by a consumer's type path are included
    /// even if nothing else registered them.
    pub fn from_registry() -> Self {
        // In inventory's (arbitrary) order, then sorted once.
        let mut topology = Topology::new();
        for registration in inventory::iter::<StreamRegistration> {
            topology.add_stream(*registration.decl);
        }
        for registration in inventory::iter::<BucketRegistration> {
            topology.add_bucket(*registration.decl);
        }
        for registration in inventory::iter::<ConsumerRegistration> {
            let handler = registration.handler;
            topology.add_consumer(*registration.decl, Arc::new(handler), registration.states);
        }
        for registration in inventory::iter::<BatchConsumerRegistration> {
            let handler = registration.handler;
            topology.add_batch_consumer(*registration.decl, Arc::new(handler), registration.states);
        }
        for registration in inventory::iter::<WatchRegistration> {
            let handler = registration.handler;
            topology.add_watch(*registration.decl, Arc::new(handler), registration.states);
        }
        for registration in inventory::iter::<ServiceRegistration> {
            topology.add_service(*registration.decl);
        }
        for registration in inventory::iter::<EndpointRegistration> {
            let handler = registration.handler;
            topology.add_endpoint(*registration.decl, Arc::new(handler), registration.states);
        }
        for registration in inventory::iter::<SubscriptionRegistration> {
            let handler = registration.handler;
            topology.add_subscription(*registration.decl, Arc::new(handler), registration.states);
        }
        topology.sort_in_place();
        topology
    }

    /// Adds a stream.
    pub fn stream(mut self, decl: StreamDecl) -> Self {
        self.add_stream(decl);
        self
    }

    /// Adds a key-value bucket or an object store, and the stream it is.
    ///
    /// ```
    /// use nats_topology::Topology;
    /// use nats_topology::model::BucketDecl;
    ///
    /// let topology = Topology::new()
    ///     .bucket(BucketDecl::kv("MEMBER_STATUS").history(1).replicas(3))
    ///     .bucket(BucketDecl::object("UPLOADS"));
    /// assert_eq!(topology.buckets().len(), 2);
    /// assert!(topology.find_stream("KV_MEMBER_STATUS").is_some());
    /// assert!(topology.find_stream("OBJ_UPLOADS").is_some());
    /// ```
    pub fn bucket(mut self, decl: BucketDecl) -> Self {
        self.add_bucket(decl);
        self
    }

    /// Adds a consumer and its handler.
    ///
    /// # Panics
    ///
    /// If `decl` declares a batch: its handler takes [`Topology::batch_consumer`].
    pub fn consumer<F>(mut self, decl: ConsumerDecl, handler: F) -> Self
    where
        F: Fn(Incoming) -> HandlerFuture + Send + Sync + 'static,
    {
        assert!(
            decl.as_queue().and_then(|q| q.batch).is_none(),
            "consumer {}: its declaration has a batch, so its handler takes a batch: add it with `Topology::batch_consumer`",
            decl.handler
        );
        self.add_consumer(decl, Arc::new(handler), &[]);
        self
    }

    /// Adds a service (its endpoints add it too).
    pub fn service(mut self, decl: ServiceDecl) -> Self {
        self.add_service(decl);
        self
    }

    /// Adds an endpoint and its handler (and the endpoint's service).
    ///
    /// ```
    /// use nats_topology::{ServiceError, Topology};
    /// use nats_topology::model::{EndpointDecl, ServiceDecl};
    ///
    /// static MEMBERS: ServiceDecl = ServiceDecl::new("members", "1.0.0");
    ///
    /// let topology = Topology::new().endpoint(
    ///     EndpointDecl::new("app::get_member", &MEMBERS, "get", "members.get"),
    ///     |request| Box::pin(async move {
    ///         Ok::<_, ServiceError>(request.payload().clone()) // an echo
    ///     }),
    /// );
    /// assert_eq!(topology.services().len(), 1);
    /// ```
    pub fn endpoint<F>(mut self, decl: EndpointDecl, handler: F) -> Self
    where
        F: Fn(Request) -> ReplyFuture + Send + Sync + 'static,
    {
        self.add_endpoint(decl, Arc::new(handler), &[]);
        self
    }

    /// Adds a core subscription and its handler.
    pub fn subscription<F>(mut self, decl: SubscriptionDecl, handler: F) -> Self
    where
        F: Fn(Request) -> HandlerFuture + Send + Sync + 'static,
    {
        self.add_subscription(decl, Arc::new(handler), &[]);
        self
    }

    /// The services, sorted by name.
    pub fn services(&self) -> &[ServiceDecl] {
        self.services.get()
    }

    /// The endpoints, sorted by service, then subject, then handler.
    pub fn endpoints(&self) -> &[Endpoint] {
        self.endpoints.get()
    }

    /// The core subscriptions that are not endpoints, sorted by subject, then handler.
    pub fn subscriptions(&self) -> &[Subscription] {
        self.subscriptions.get()
    }

    /// The streams, sorted by name.
    pub fn streams(&self) -> &[StreamDecl] {
        self.streams.get()
    }

    /// The key-value buckets and object stores, sorted by name.
    pub fn buckets(&self) -> &[BucketDecl] {
        self.buckets.get()
    }

    /// The bucket whose stream is named `stream` (`KV_<name>` or `OBJ_<name>`), if declared.
    pub fn bucket_of_stream(&self, stream: &str) -> Option<&BucketDecl> {
        self.buckets().iter().find(|b| {
            stream
                .strip_prefix(b.kind.stream_prefix())
                .is_some_and(|name| name == b.name)
        })
    }

    /// The consumers, sorted by stream, then handler.
    pub fn consumers(&self) -> &[Consumer] {
        self.consumers.get()
    }

    /// The consumers of the stream named `stream` (adjacent, since sorted by stream).
    /// Replaces each consumer's handler by what `wrap` makes of it (the runtime's layers),
    /// and each batch consumer's batch handler by what `wrap_batch` makes of it (gathered
    /// again for its messages).
    #[cfg(feature = "tower")]
    pub(crate) fn wrap_consumer_handlers(
        &mut self,
        mut wrap: impl FnMut(&ConsumerDecl, SharedHandler) -> SharedHandler,
        mut wrap_batch: impl FnMut(&ConsumerDecl, SharedBatchHandler) -> SharedBatchHandler,
    ) {
        for consumer in self.consumers.get_mut() {
            let batch_decl = consumer.decl.as_queue().and_then(|q| q.batch);
            match (&consumer.batch, batch_decl) {
                (Some(batch), Some(decl)) => {
                    let wrapped = wrap_batch(&consumer.decl, batch.clone());
                    consumer.handler = crate::handler::gathered(wrapped, decl);
                }
                _ => consumer.handler = wrap(&consumer.decl, consumer.handler.clone()),
            }
        }
    }

    /// Replaces each endpoint's handler by what `wrap` makes of it (the runtime's layers).
    #[cfg(feature = "tower")]
    pub(crate) fn wrap_endpoint_handlers(
        &mut self,
        mut wrap: impl FnMut(&EndpointDecl, SharedEndpointHandler) -> SharedEndpointHandler,
    ) {
        for endpoint in self.endpoints.get_mut() {
            endpoint.handler = wrap(&endpoint.decl, endpoint.handler.clone());
        }
    }

    pub(crate) fn consumers_of(&self, stream: &str) -> &[Consumer] {
        let consumers = self.consumers();
        let first = consumers.partition_point(|c| c.decl.stream.name() < stream);
        let end = first + consumers[first..].partition_point(|c| c.decl.stream.name() == stream);
        &consumers[first..end]
    }

    /// The subjects this topology's consumers consume from the stream named `stream`: what
    /// that stream must carry.
    pub fn consumed_subjects(&self, stream: &str) -> Vec<&'static str> {
        self.consumers_of(stream)
            .iter()
            .flat_map(|c| c.decl.subjects.iter().copied())
            .collect()
    }

    /// The stream declared under `name`, if any.
    pub fn find_stream(&self, name: &str) -> Option<&StreamDecl> {
        let streams = self.streams();
        let first = streams.partition_point(|s| s.name < name);
        streams.get(first).filter(|s| s.name == name)
    }

    /// Sorts what was added out of order now, keeping one copy (a read sorts a copy).
    pub(crate) fn sort_in_place(&mut self) {
        self.streams.sort_in_place();
        self.buckets.sort_in_place();
        self.consumers.sort_in_place();
        self.services.sort_in_place();
        self.endpoints.sort_in_place();
        self.subscriptions.sort_in_place();
    }

    fn add_stream(&mut self, decl: StreamDecl) {
        let seen = match self.declared.entry(decl.name) {
            Entry::Vacant(first) => {
                first.insert(decl);
                false
            }
            Entry::Occupied(first) if *first.get() == decl => true,
            // A name declared differently (which validation reports): look at them all.
            Entry::Occupied(_) => self.streams.iter_added().any(|s| *s == decl),
        };
        if !seen {
            self.streams.push(decl);
        }
    }

    fn add_bucket(&mut self, decl: BucketDecl) {
        if !self.buckets.iter_added().any(|b| *b == decl) {
            self.buckets.push(decl);
            self.add_stream(stream_of(&decl));
        }
    }

    fn add_service(&mut self, decl: ServiceDecl) {
        if !self.services.iter_added().any(|s| *s == decl) {
            self.services.push(decl);
        }
    }

    fn add_endpoint(
        &mut self,
        decl: EndpointDecl,
        handler: SharedEndpointHandler,
        states: &'static [StateKey],
    ) {
        self.add_service(*decl.service);
        self.endpoints.push(Endpoint {
            decl,
            handler,
            states,
        });
    }

    fn add_subscription(
        &mut self,
        decl: SubscriptionDecl,
        handler: SharedSubscriptionHandler,
        states: &'static [StateKey],
    ) {
        self.subscriptions.push(Subscription {
            decl,
            handler,
            states,
        });
    }

    fn add_consumer(
        &mut self,
        decl: ConsumerDecl,
        handler: SharedHandler,
        states: &'static [StateKey],
    ) {
        self.add_consumer_of(decl, handler, None, states);
    }

    /// A consumer; `batch`: the batch handler `handler` gathers for.
    fn add_consumer_of(
        &mut self,
        decl: ConsumerDecl,
        handler: SharedHandler,
        batch: Option<SharedBatchHandler>,
        states: &'static [StateKey],
    ) {
        if let topology_core::model::StreamRef::Declared(stream) = decl.stream {
            self.add_stream(*stream);
        }
        self.consumers.push(Consumer {
            decl,
            handler,
            batch,
            states,
            partition: None,
            superseded_by: None,
        });
    }
}
