//! Batch handlers: typed and raw items, `State<T>` arguments, per-message failures or a whole
//! batch's error, and the consumer's concurrency following the batch.

use std::time::Duration;

use nats_topology::{
    Batch, BatchError, Failures, HandlerError, State, Topology, queue_consumer,
};

#[derive(serde::Deserialize)]
struct Order {
    id: u64,
}

struct Ledger;

#[queue_consumer(stream = "ORDERS", group = "billing", subject = "orders.paid", batch = 50)]
async fn bill(orders: Batch<Order>, ledger: State<Ledger>) -> Result<(), BatchError> {
    let _ = ledger;
    let mut failures = Failures::new();
    for order in &orders {
        if order.value().id == 0 {
            failures.fail(order.index(), HandlerError::permanent("order 0"));
        }
    }
    failures.into_result()
}

#[queue_consumer(
    stream = "ORDERS",
    group = "archive",
    subject = "orders.archived",
    batch = 100,
    batch_wait = "1s",
    concurrency = 200
)]
async fn archive(raw: Batch<Vec<u8>>) -> Result<(), HandlerError> {
    for item in raw {
        let _ = item.context().subject();
        let _ = item.into_value().len();
    }
    Ok(())
}

fn main() {
    // The registry lists consumers in handler-path order: `archive` before `bill`.
    let topology = Topology::from_registry();
    let archive = &topology.consumers()[0].decl;
    assert!(archive.handler.ends_with("::archive"), "{}", archive.handler);
    let batch = archive.as_queue().unwrap().batch.unwrap();
    assert_eq!((batch.size, batch.wait), (100, Duration::from_secs(1)));
    assert_eq!(archive.effective_concurrency(), 200);
    let bill = &topology.consumers()[1].decl;
    assert!(bill.handler.ends_with("::bill"), "{}", bill.handler);
    let batch = bill.as_queue().unwrap().batch.unwrap();
    assert_eq!((batch.size, batch.wait), (50, Duration::from_millis(100)));
    assert_eq!(bill.effective_concurrency(), 50);
}
