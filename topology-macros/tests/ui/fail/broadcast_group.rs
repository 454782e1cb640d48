//! Refused: plain durable: `group` on a broadcast.

#![allow(unused_imports)]

use nats_topology::{HandlerError, broadcast, queue_consumer, stream};

#[broadcast(stream = "STATUS", group = "relays")]
async fn relay_status(event: String) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

fn main() {}
