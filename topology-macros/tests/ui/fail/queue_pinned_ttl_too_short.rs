//! Refused: a `pinned_ttl` under a second (the pin is renewed within half of it).

use nats_topology::{HandlerError, queue_consumer};

#[queue_consumer(stream = "SYNC", group = "sync", priority = "pinned_client", pinned_ttl = "500ms")]
async fn on_sync(event: String) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

fn main() {}
