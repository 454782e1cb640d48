//! Refused: no payload argument; more than a payload and a `Context`; `impl Trait` arguments.

use nats_topology::{Context, HandlerError, queue_consumer};

#[queue_consumer(stream = "ORDERS", group = "billing")]
async fn on_order() -> Result<(), HandlerError> {
    Ok(())
}

#[queue_consumer(stream = "ORDERS", group = "shipping")]
async fn on_order_shipped(event: String, cx: Context, retries: u32) -> Result<(), HandlerError> {
    let _ = (event, cx, retries);
    Ok(())
}

#[queue_consumer(stream = "ORDERS", group = "audit")]
async fn on_order_audited(event: impl serde::de::DeserializeOwned) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

fn main() {}
