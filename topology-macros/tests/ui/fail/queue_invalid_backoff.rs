//! Refused: backoff entries that are not durations; an empty backoff.

#![allow(unused_imports)]

use nats_topology::{HandlerError, broadcast, queue_consumer, stream};

#[queue_consumer(stream = "ORDERS", group = "billing", backoff = ["1s", "ten seconds", 30])]
async fn on_order(event: String) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

#[queue_consumer(stream = "ORDERS", group = "shipping", backoff = [])]
async fn on_order_shipped(event: String) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

fn main() {}
