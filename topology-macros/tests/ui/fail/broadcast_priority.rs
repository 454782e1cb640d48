//! Refused: priority groups on a broadcast (every instance has its own consumer).

use nats_topology::{HandlerError, broadcast};

#[broadcast(stream = "STATUS", priority = "pinned_client", pinned_ttl = "10s")]
async fn relay_status(event: String) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

fn main() {}
