//! Refused: plain durable: a queue consumer without `group`.

#![allow(unused_imports)]

use nats_topology::{HandlerError, broadcast, queue_consumer, stream};

#[queue_consumer(stream = "ORDERS", subject = "orders.created")]
async fn on_order(event: String) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

fn main() {}
