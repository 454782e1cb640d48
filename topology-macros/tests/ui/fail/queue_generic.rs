//! Refused: a generic handler.

use nats_topology::{HandlerError, queue_consumer};

#[queue_consumer(stream = "ORDERS", group = "billing")]
async fn on_order<T: serde::de::DeserializeOwned>(event: T) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

fn main() {}
