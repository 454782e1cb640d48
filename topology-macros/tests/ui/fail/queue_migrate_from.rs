//! Refused: migrate_from itself; an invalid consumer name.

#![allow(unused_imports)]

use nats_topology::{HandlerError, broadcast, queue_consumer, stream};

#[queue_consumer(stream = "ORDERS", group = "billing", migrate_from = "billing")]
async fn on_order(event: String) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

#[queue_consumer(stream = "ORDERS", group = "shipping", migrate_from = "shipping.v1")]
async fn on_order_shipped(event: String) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

fn main() {}
