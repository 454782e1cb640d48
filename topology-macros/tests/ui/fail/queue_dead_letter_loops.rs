//! Refused: dead letters matching the consumer's own filter.

#![allow(unused_imports)]

use nats_topology::{HandlerError, broadcast, queue_consumer, stream};

#[queue_consumer(
    stream = "ORDERS",
    group = "billing",
    subject = "orders.*",
    dead_letter = "orders.dead"
)]
async fn on_order(event: String) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

fn main() {}
