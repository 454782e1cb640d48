//! Refused: `ack` on a broadcast (a relay dies with its instance; nothing to confirm for).

#![allow(unused_imports)]

use nats_topology::{HandlerError, broadcast, queue_consumer, stream};

#[broadcast(stream = "STATUS", ack = "confirmed")]
async fn relay_status(event: String) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

fn main() {}
