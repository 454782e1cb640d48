//! The declarations that `#[stream]`, `#[queue_consumer]` and `#[broadcast]` register through
//! `inventory`, read once into a sorted, deterministic [`Topology`].

use crate::handler::HandlerFn;
use crate::state::StateKey;
use topology_core::model::{ConsumerDecl, StreamDecl};

/// A stream registered by `#[stream]`.
#[doc(hidden)]
pub struct StreamRegistration {
    pub decl: &'static StreamDecl,
}

/// A consumer registered by `#[queue_consumer]` or `#[broadcast]`.
#[doc(hidden)]
pub struct ConsumerRegistration {
    pub decl: &'static ConsumerDecl,
    pub handler: HandlerFn,
    /// The application state the handler's `State<T>` arguments need.
    pub states: &'static [StateKey],
}

inventory::collect!(StreamRegistration);
inventory::collect!(ConsumerRegistration);

use std::fmt;
use std::sync::Arc;

use crate::handler::{HandlerFuture, Incoming};

/// A handler as the runtime holds it: a registered `fn` or any closure.
pub type SharedHandler = Arc<dyn Fn(Incoming) -> HandlerFuture + Send + Sync + 'static>;

/// A consumer declaration with its handler.
#[derive(Clone)]
pub struct Consumer {
    /// The declaration.
    pub decl: ConsumerDecl,
    pub(crate) handler: SharedHandler,
    /// What the handler's `State<T>` arguments need; checked by `RuntimeBuilder::build`.
    pub(crate) states: &'static [StateKey],
}

impl fmt::Debug for Consumer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Consumer")
            .field("decl", &self.decl)
            .field("states", &self.states)
            .finish_non_exhaustive()
    }
}

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
#[derive(Clone, Default, Debug)]
pub struct Topology {
    streams: Vec<StreamDecl>,
    consumers: Vec<Consumer>,
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
        // In inventory's (arbitrary) order: collected first, then sorted once.
        let mut topology = Topology::new();
        for registration in inventory::iter::<StreamRegistration> {
            topology.streams.push(*registration.decl);
        }
        for registration in inventory::iter::<ConsumerRegistration> {
            let decl = *registration.decl;
            if let topology_core::model::StreamRef::Declared(stream) = decl.stream {
                topology.streams.push(*stream);
            }
            let handler = registration.handler;
            topology.consumers.push(Consumer {
                decl,
                handler: Arc::new(handler),
                states: registration.states,
            });
        }
        topology.sort();
        topology
    }

    /// Adds a stream.
    pub fn stream(mut self, decl: StreamDecl) -> Self {
        self.add_stream(decl);
        self
    }

    /// Adds a consumer and its handler.
    pub fn consumer<F>(mut self, decl: ConsumerDecl, handler: F) -> Self
    where
        F: Fn(Incoming) -> HandlerFuture + Send + Sync + 'static,
    {
        self.add_consumer(decl, Arc::new(handler));
        self
    }

    /// The streams, sorted by name.
    pub fn streams(&self) -> &[StreamDecl] {
        &self.streams
    }

    /// The consumers, sorted by stream, then handler.
    pub fn consumers(&self) -> &[Consumer] {
        &self.consumers
    }

    /// The subjects this topology's consumers consume from the stream named `stream`: what
    /// that stream must carry.
    pub fn consumed_subjects(&self, stream: &str) -> Vec<&'static str> {
        self.consumers
            .iter()
            .filter(|c| c.decl.stream.name() == stream)
            .flat_map(|c| c.decl.subjects.iter().copied())
            .collect()
    }

    /// The stream declared under `name`, if any.
    pub fn find_stream(&self, name: &str) -> Option<&StreamDecl> {
        let first = self.streams.partition_point(|s| s.name < name);
        self.streams.get(first).filter(|s| s.name == name)
    }

    // Both lists stay sorted as they grow: each declaration goes where a stable sort would
    // put it (after those with the same key), found by binary search, so adding n
    // declarations costs O(n log n) comparisons instead of a sort per addition.

    fn add_stream(&mut self, decl: StreamDecl) {
        // A stream seen twice (registered and referenced) is one stream; two *different*
        // declarations under one name stay, so that validation can report them.
        let first = self.streams.partition_point(|s| s.name < decl.name);
        let end = first + self.streams[first..].partition_point(|s| s.name == decl.name);
        if !self.streams[first..end].contains(&decl) {
            self.streams.insert(end, decl);
        }
    }

    fn add_consumer(&mut self, decl: ConsumerDecl, handler: SharedHandler) {
        if let topology_core::model::StreamRef::Declared(stream) = decl.stream {
            self.add_stream(*stream);
        }
        let key = (decl.stream.name(), decl.handler);
        let at = self
            .consumers
            .partition_point(|c| (c.decl.stream.name(), c.decl.handler) <= key);
        self.consumers.insert(
            at,
            Consumer {
                decl,
                handler,
                states: &[],
            },
        );
    }

    /// Sorts both lists (stably) and keeps one of each identical stream declaration.
    fn sort(&mut self) {
        self.streams.sort_by(|a, b| a.name.cmp(b.name));
        let mut kept: Vec<StreamDecl> = Vec::with_capacity(self.streams.len());
        for decl in self.streams.drain(..) {
            let first = kept.partition_point(|s| s.name < decl.name);
            if !kept[first..].contains(&decl) {
                kept.push(decl);
            }
        }
        self.streams = kept;
        self.consumers.sort_by(|a, b| {
            (a.decl.stream.name(), a.decl.handler).cmp(&(b.decl.stream.name(), b.decl.handler))
        });
    }
}
