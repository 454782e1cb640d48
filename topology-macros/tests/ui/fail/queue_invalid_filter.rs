//! Refused: an invalid filter; an empty `subjects` list.

#![allow(unused_imports)]

use nats_topology::{HandlerError, broadcast, queue_consumer, stream};

#[queue_consumer(stream = "ORDERS", group = "billing", subject = "orders.>.created")]
async fn on_order(event: String) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

#[queue_consumer(stream = "ORDERS", group = "shipping", subjects = [])]
async fn on_order_shipped(event: String) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

fn main() {}
