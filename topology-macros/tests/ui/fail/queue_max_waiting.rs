//! Refused: a wait list out of range, and one on a push consumer (which has none).

#![allow(unused_imports)]

use nats_topology::{HandlerError, broadcast, queue_consumer, stream};

#[queue_consumer(stream = "ORDERS", group = "billing", max_waiting = 0)]
async fn on_order(event: String) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

#[queue_consumer(stream = "ORDERS", group = "shipping", max_waiting = 1000000)]
async fn on_shipping(event: String) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

#[queue_consumer(stream = "ORDERS", group = "audit", delivery = "push", max_waiting = 64)]
async fn on_audit(event: String) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

fn main() {}
