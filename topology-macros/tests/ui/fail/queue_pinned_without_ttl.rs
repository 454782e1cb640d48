//! Refused: a pinned client without `pinned_ttl` (how long before another instance takes over).

use nats_topology::{HandlerError, queue_consumer};

#[queue_consumer(stream = "SYNC", group = "sync", priority = "pinned_client")]
async fn on_sync(event: String) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

fn main() {}
