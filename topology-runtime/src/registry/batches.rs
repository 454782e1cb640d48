//! Batch handlers: a queue consumer whose handler takes its messages in batches, gathered
//! from single deliveries.

use std::sync::Arc;

use super::Topology;
use crate::handler::{BatchFuture, BatchInput, SharedBatchHandler, gathered};
use crate::state::StateKey;
use topology_core::model::ConsumerDecl;

impl Topology {
    /// Adds a queue consumer whose handler takes its messages in batches (its declaration's
    /// [`QueueDecl::batch`](topology_core::model::QueueDecl::batch)), and the consumer's stream.
    ///
    /// ```
    /// use nats_topology::{Batch, Failures, HandlerError, Topology};
    /// use nats_topology::model::{BatchDecl, ConsumerDecl, QueueDecl, StreamDecl, StreamRef};
    ///
    /// static ORDERS: StreamDecl = StreamDecl::new("ORDERS", &["orders.>"]);
    ///
    /// let topology = Topology::new().stream(ORDERS).batch_consumer(
    ///     ConsumerDecl::queue(
    ///         "billing::bill",
    ///         StreamRef::Declared(&ORDERS),
    ///         QueueDecl::new("billing").batch(BatchDecl::new(50)),
    ///     ),
    ///     |mut input| Box::pin(async move {
    ///         let batch: Batch<u64> = input.decode_json();
    ///         let mut failures = Failures::new();
    ///         for item in &batch {
    ///             if *item.value() == 0 {
    ///                 failures.fail(item.index(), HandlerError::permanent("order 0 is poison"));
    ///             }
    ///         }
    ///         input.finish(failures.into_result())
    ///     }),
    /// );
    /// assert_eq!(topology.consumers()[0].decl.effective_concurrency(), 50);
    /// ```
    ///
    /// # Panics
    ///
    /// If `decl` declares no batch: a handler of single messages takes [`Topology::consumer`].
    pub fn batch_consumer<F>(mut self, decl: ConsumerDecl, handler: F) -> Self
    where
        F: Fn(BatchInput) -> BatchFuture + Send + Sync + 'static,
    {
        self.add_batch_consumer(decl, Arc::new(handler), &[]);
        self
    }

    pub(super) fn add_batch_consumer(
        &mut self,
        decl: ConsumerDecl,
        handler: SharedBatchHandler,
        states: &'static [StateKey],
    ) {
        let Some(batch) = decl.as_queue().and_then(|q| q.batch) else {
            panic!(
                "consumer {}: a batch handler needs a batch in its declaration (`QueueDecl::batch`); a handler of single messages takes `Topology::consumer`",
                decl.handler
            );
        };
        self.add_consumer_of(
            decl,
            gathered(handler.clone(), batch),
            Some(handler),
            states,
        );
    }
}
