//! The declarations with their handlers, as a [`Topology`](super::Topology) holds them.

use std::fmt;

use super::{SharedEndpointHandler, SharedHandler, SharedSubscriptionHandler};
use crate::handler::SharedBatchHandler;
use crate::state::StateKey;
use topology_core::model::ConsumerDecl;
use topology_core::service::{EndpointDecl, SubscriptionDecl};

/// An endpoint declaration with its handler.
#[derive(Clone)]
pub struct Endpoint {
    /// The declaration.
    pub decl: EndpointDecl,
    pub(crate) handler: SharedEndpointHandler,
    pub(crate) states: &'static [StateKey],
}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Endpoint")
            .field("decl", &self.decl)
            .field("states", &self.states)
            .finish_non_exhaustive()
    }
}

/// A core subscription declaration with its handler.
#[derive(Clone)]
pub struct Subscription {
    /// The declaration.
    pub decl: SubscriptionDecl,
    pub(crate) handler: SharedSubscriptionHandler,
    pub(crate) states: &'static [StateKey],
}

impl fmt::Debug for Subscription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Subscription")
            .field("decl", &self.decl)
            .field("states", &self.states)
            .finish_non_exhaustive()
    }
}

/// A consumer declaration with its handler.
#[derive(Clone)]
pub struct Consumer {
    /// The declaration.
    pub decl: ConsumerDecl,
    pub(crate) handler: SharedHandler,
    /// A batch consumer's batch handler, which `handler` gathers messages for (the runtime's
    /// layers wrap it and gather again).
    #[cfg_attr(not(feature = "tower"), allow(dead_code))]
    pub(crate) batch: Option<SharedBatchHandler>,
    /// What the handler's `State<T>` arguments need; checked by `RuntimeBuilder::build`.
    pub(crate) states: &'static [StateKey],
    /// The partition it reads, when it is one partition of a partitioned group (see
    /// [`Topology::partitioned`](super::Topology::partitioned)).
    pub partition: Option<super::partitions::PartitionOf>,
    /// When it is the consumer a partitioned group migrates from (`migrate_from` on a
    /// partitioned consumer), the group: the runtime never creates or updates it, handles
    /// what it still holds, and deletes it once drained; the group's partitions start then
    /// (see [`Topology::partitioned`](super::Topology::partitioned)).
    pub superseded_by: Option<&'static str>,
}

impl fmt::Debug for Consumer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Consumer")
            .field("decl", &self.decl)
            .field("states", &self.states)
            .field("partition", &self.partition)
            .field("superseded_by", &self.superseded_by)
            .finish_non_exhaustive()
    }
}
