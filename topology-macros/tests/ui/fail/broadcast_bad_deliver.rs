//! Refused: an unknown deliver policy (suggestion).

#![allow(unused_imports)]

use nats_topology::{HandlerError, broadcast, queue_consumer, stream};

#[broadcast(stream = "STATUS", deliver = "last-per-subject")]
async fn relay_status(event: String) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

fn main() {}
