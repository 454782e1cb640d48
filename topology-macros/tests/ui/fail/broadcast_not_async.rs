//! Refused: a broadcast handler without `async`.

use nats_topology::{HandlerError, broadcast};

#[broadcast(stream = "STATUS")]
fn relay_status(event: String) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

fn main() {}
