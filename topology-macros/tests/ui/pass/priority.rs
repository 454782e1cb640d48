//! Priority groups: a pinned client with its ttl, overflow with one or both thresholds.

use std::time::Duration;

use nats_topology::model::{Overflow, Priority};
use nats_topology::{HandlerError, Topology, queue_consumer};

#[queue_consumer(stream = "SYNC", group = "sync", priority = "pinned_client", pinned_ttl = "10s")]
async fn on_sync(event: String) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

#[queue_consumer(stream = "BULK", group = "bulk", priority = "overflow", min_pending = 100)]
async fn on_bulk(event: String) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

#[queue_consumer(
    stream = "BULK",
    group = "both",
    subject = "bulk.both",
    priority = "overflow",
    min_pending = 100,
    min_ack_pending = 20
)]
async fn on_both(event: String) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

fn main() {
    let topology = Topology::from_registry();
    let priority = |group: &str| {
        topology
            .consumers()
            .iter()
            .find_map(|c| c.decl.as_queue().filter(|q| q.group == group))
            .and_then(|q| q.priority)
    };
    assert_eq!(
        priority("sync"),
        Some(Priority::PinnedClient {
            ttl: Duration::from_secs(10)
        })
    );
    assert_eq!(
        priority("bulk"),
        Some(Priority::Overflow(Overflow::new().min_pending(100)))
    );
    assert_eq!(
        priority("both"),
        Some(Priority::Overflow(
            Overflow::new().min_pending(100).min_ack_pending(20)
        ))
    );
}
