//! Refused: consumer names: no whitespace, no wildcards.

#![allow(unused_imports)]

use nats_topology::{HandlerError, broadcast, queue_consumer, stream};

#[queue_consumer(stream = "ORDERS", group = "billing workers")]
async fn on_order(event: String) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

#[queue_consumer(stream = "ORDERS", group = "billing.*")]
async fn on_order_again(event: String) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

fn main() {}
