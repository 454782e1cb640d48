//! Refused: a handler taking `self`.

use nats_topology::{HandlerError, queue_consumer};

#[queue_consumer(stream = "ORDERS", group = "billing")]
async fn on_order(self, event: String) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

fn main() {}
