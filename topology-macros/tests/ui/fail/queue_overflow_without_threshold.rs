//! Refused: overflow without a threshold (spill-over instances would take work at once).

use nats_topology::{HandlerError, queue_consumer};

#[queue_consumer(stream = "BULK", group = "bulk", priority = "overflow")]
async fn on_bulk(event: String) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

fn main() {}
