//! Generated code is quiet under strict crate lints.

#![forbid(unsafe_code)]
#![deny(missing_docs, warnings, rust_2018_idioms, unreachable_pub)]

use nats_topology::{HandlerError, Topology, broadcast, queue_consumer, stream};

/// The orders.
#[stream(name = "ORDERS", subjects = ["orders.>"])]
pub struct Orders;

#[queue_consumer(stream = Orders, group = "billing", subject = "orders.created", backoff = ["1s"], dead_letter = "dead.billing")]
async fn on_order(event: String) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

#[broadcast(stream = Orders)]
async fn relay_order(event: Vec<u8>) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

fn main() {
    assert_eq!(Topology::from_registry().consumers().len(), 2);
}
