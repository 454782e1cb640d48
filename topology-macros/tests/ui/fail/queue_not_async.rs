//! Refused: a handler without `async`.

use nats_topology::{HandlerError, queue_consumer};

#[queue_consumer(stream = "ORDERS", group = "billing")]
fn on_order(event: String) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

fn main() {}
