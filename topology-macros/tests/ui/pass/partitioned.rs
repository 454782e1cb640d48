//! A partitioned queue consumer: its key (the subject's `*` tokens) and partition count, on a
//! stream that routes by them; a key of two tokens; `migrate_from` a plain queue consumer, and
//! a partitioned group of another count (`migrate_from_partitions`).

use nats_topology::model::Partitioning;
use nats_topology::{HandlerError, Topology, queue_consumer, stream};

#[stream(
    name = "ORDERS",
    subjects = ["orders.*.paid"],
    subject_transform = { src = "orders.*.paid", dest = "{{partition(16,1)}}.orders.{{wildcard(1)}}.paid" }
)]
pub struct Orders;

#[queue_consumer(stream = Orders, group = "billing", subject = "orders.*.paid", key = "{1}", partitions = 16, migrate_from = "billing_v1")]
async fn on_paid(event: String) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

#[stream(
    name = "LEDGER",
    subjects = ["ledger.*.paid"],
    subject_transform = { src = "ledger.*.paid", dest = "{{partition(8,1)}}.v2.ledger.{{wildcard(1)}}.paid" }
)]
pub struct Ledger;

#[queue_consumer(stream = Ledger, group = "ledger-v2", subject = "ledger.*.paid", key = "{1}", partitions = 8, migrate_from = "ledger", migrate_from_partitions = 4)]
async fn on_ledger(event: String) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

#[queue_consumer(stream = "MOVES", group = "moves", subject = "moves.*.*", key = "{2}.{1}", partitions = 4)]
async fn on_move(event: String) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

fn main() {
    let topology = Topology::from_registry();
    let partitioned = |group: &str| {
        topology
            .consumers()
            .iter()
            .find_map(|c| c.decl.as_queue().filter(|q| q.group == group))
            .and_then(|q| q.partitioned)
    };
    assert_eq!(partitioned("billing"), Some(Partitioning::new(16, &[1])));
    assert_eq!(partitioned("moves"), Some(Partitioning::new(4, &[2, 1])));
    // Run as one consumer per partition.
    let running = topology.partitioned();
    let groups: Vec<&str> = running
        .consumers()
        .iter()
        .filter_map(|c| c.decl.as_queue().map(|q| q.group))
        .filter(|g| g.starts_with("billing-p"))
        .collect();
    assert_eq!(groups.len(), 16);
    assert!(groups.contains(&"billing-p0") && groups.contains(&"billing-p15"));
    // The plain consumer `billing` migrates from is read beside its partitions, then retired.
    let old = running
        .consumers()
        .iter()
        .find(|c| c.decl.as_queue().is_some_and(|q| q.group == "billing_v1"))
        .expect("the consumer migrated from runs");
    assert_eq!(old.superseded_by, Some("billing"));
    assert_eq!(old.decl.subjects, ["orders.*.paid"]);
    // The old count's partitions are read beside the new ones, then retired.
    let olds: Vec<&str> = running
        .consumers()
        .iter()
        .filter(|c| c.superseded_by == Some("ledger-v2"))
        .filter_map(|c| c.decl.as_queue().map(|q| q.group))
        .collect();
    assert_eq!(olds, ["ledger-p0", "ledger-p1", "ledger-p2", "ledger-p3"]);
}
