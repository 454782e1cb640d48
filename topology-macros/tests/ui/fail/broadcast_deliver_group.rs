//! Refused: plain durable: `deliver_group` on a broadcast.

#![allow(unused_imports)]

use nats_topology::{HandlerError, broadcast, queue_consumer, stream};

#[broadcast(stream = "STATUS", deliver_group = "relays")]
async fn relay_status(event: String) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

fn main() {}
