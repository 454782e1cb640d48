//! Refused: an `ack` that is not a string.

#![allow(unused_imports)]

use nats_topology::{HandlerError, broadcast, queue_consumer, stream};

#[queue_consumer(stream = "ORDERS", group = "billing", ack = true)]
async fn on_order(event: String) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

fn main() {}
