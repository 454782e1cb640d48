//! Refused: a dead-letter subject with a wildcard.

#![allow(unused_imports)]

use nats_topology::{HandlerError, broadcast, queue_consumer, stream};

#[queue_consumer(stream = "ORDERS", group = "billing", dead_letter = "dead.>")]
async fn on_order(event: String) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

fn main() {}
