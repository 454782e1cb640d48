//! Key-value watches (`#[kv_watch]`): a watch is a relay on its bucket's stream `KV_<name>`,
//! filtered on `$KV.<name>.<keys>`, created by every instance. The revision is the stream
//! sequence, so the relay's resume point (the last revision handled) is where a watch
//! re-created after a loss starts again. It handles one change at a time
//! (`max_ack_pending = 1`): a handler error is retried before any later revision is delivered.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use super::Topology;
use super::buckets::stream_of;
use crate::handler::{HandlerFuture, Incoming, SharedHandler};
use crate::state::StateKey;
use topology_core::model::{BroadcastDecl, ConsumerDecl, DeliverPolicy, StreamRef};
use topology_core::watch::{WatchDecl, WatchFrom};

impl Topology {
    /// Adds a watch of a key-value bucket (and the bucket) with its handler: a relay on the
    /// bucket's stream, run by every instance, that hands each change of the watched keys to
    /// the handler in revision order (see `#[kv_watch]`).
    ///
    /// ```
    /// use nats_topology::{HandlerError, Topology};
    /// use nats_topology::model::{BucketDecl, WatchDecl};
    ///
    /// static FLAGS: BucketDecl = BucketDecl::kv("FLAGS");
    ///
    /// let topology = Topology::new().watch(
    ///     WatchDecl::new("app::on_flag", &FLAGS, "flag.>"),
    ///     |incoming| Box::pin(async move {
    ///         println!("{} changed", incoming.context().subject());
    ///         Ok::<(), HandlerError>(())
    ///     }),
    /// );
    /// assert_eq!(topology.consumers()[0].decl.subjects, ["$KV.FLAGS.flag.>"]);
    /// assert!(topology.find_stream("KV_FLAGS").is_some());
    /// ```
    pub fn watch<F>(mut self, decl: WatchDecl, handler: F) -> Self
    where
        F: Fn(Incoming) -> HandlerFuture + Send + Sync + 'static,
    {
        self.add_watch(decl, Arc::new(handler), &[]);
        self
    }

    pub(super) fn add_watch(
        &mut self,
        decl: WatchDecl,
        handler: SharedHandler,
        states: &'static [StateKey],
    ) {
        self.add_bucket(*decl.bucket);
        self.add_consumer(watch_consumer(&decl), handler, states);
    }
}

/// The relay a watch runs as: on the bucket's stream, filtered on its keys, one change at a
/// time; from each key's last revision, or from new changes only.
pub(crate) fn watch_consumer(decl: &WatchDecl) -> ConsumerDecl {
    let stream = stream_of(decl.bucket).name;
    let deliver = match decl.from {
        WatchFrom::Current => DeliverPolicy::LastPerSubject,
        WatchFrom::Now => DeliverPolicy::New,
    };
    let relay = BroadcastDecl::new()
        .deliver(deliver)
        .kv_watch(decl.bucket.name);
    let mut consumer = ConsumerDecl::broadcast(decl.handler, StreamRef::Named(stream), relay)
        .subjects(filter(decl.bucket.name, decl.keys))
        .concurrency(1);
    consumer.version = decl.version;
    consumer
}

/// `[$KV.<bucket>.<keys>]`, made once per watch and kept for the program's life.
fn filter(bucket: &'static str, keys: &'static str) -> &'static [&'static str] {
    type Filters = HashMap<(&'static str, &'static str), &'static [&'static str]>;
    static FILTERS: OnceLock<Mutex<Filters>> = OnceLock::new();
    let mut filters = FILTERS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    filters.entry((bucket, keys)).or_insert_with(|| {
        let subject: &'static str = Box::leak(format!("$KV.{bucket}.{keys}").into_boxed_str());
        Vec::leak(vec![subject])
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use topology_core::bucket::BucketDecl;

    #[test]
    fn a_watch_is_a_relay_on_the_buckets_stream() {
        static FLAGS: BucketDecl = BucketDecl::kv("FLAGS");
        let watch = WatchDecl::new("app::on_flag", &FLAGS, "flag.>");
        let consumer = watch_consumer(&watch);
        assert_eq!(consumer.stream.name(), "KV_FLAGS");
        assert_eq!(consumer.subjects, ["$KV.FLAGS.flag.>"]);
        assert_eq!(consumer.effective_concurrency(), 1);
        let topology_core::model::ConsumerKind::Broadcast(relay) = consumer.kind else {
            panic!("a watch is a relay");
        };
        assert_eq!(relay.deliver, DeliverPolicy::LastPerSubject);
        assert_eq!(relay.kv_watch, Some("FLAGS"));
        let now = watch_consumer(&watch.from(WatchFrom::Now));
        assert!(
            matches!(now.kind, topology_core::model::ConsumerKind::Broadcast(r) if r.deliver == DeliverPolicy::New)
        );
        assert!(std::ptr::eq(
            consumer.subjects,
            watch_consumer(&watch).subjects
        ));
    }
}
