//! Refused: plain durable: a `deliver_group` key.

#![allow(unused_imports)]

use nats_topology::{HandlerError, broadcast, queue_consumer, stream};

#[queue_consumer(
    stream = "ORDERS",
    group = "billing",
    delivery = "push",
    deliver_group = "billing"
)]
async fn on_order(event: String) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

fn main() {}
