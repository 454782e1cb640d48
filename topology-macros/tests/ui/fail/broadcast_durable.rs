//! Refused: plain durable: `durable` on a broadcast.

#![allow(unused_imports)]

use nats_topology::{HandlerError, broadcast, queue_consumer, stream};

#[broadcast(stream = "STATUS", durable = "relay")]
async fn relay_status(event: String) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

fn main() {}
