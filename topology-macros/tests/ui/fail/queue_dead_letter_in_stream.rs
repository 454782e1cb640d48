//! Refused: dead letters into the stream a filterless consumer reads (const assertion).

#![allow(unused_imports)]

use nats_topology::{HandlerError, broadcast, queue_consumer, stream};

#[stream(name = "ORDERS", subjects = ["orders.>"])]
pub struct Orders;

#[queue_consumer(stream = Orders, group = "billing", dead_letter = "orders.dead")]
async fn on_order(event: String) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

fn main() {}
