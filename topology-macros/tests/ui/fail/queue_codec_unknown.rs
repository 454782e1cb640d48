//! Refused: a codec that does not exist (a near name is suggested), and raw bytes given a codec
//! (they are passed through, nothing is decoded).

use bytes::Bytes;
use nats_topology::{HandlerError, queue_consumer};

#[derive(serde::Deserialize)]
struct Order {
    id: u64,
}

#[queue_consumer(stream = "ORDERS", group = "billing", codec = "msgpak")]
async fn on_order(order: Order) -> Result<(), HandlerError> {
    let _ = order.id;
    Ok(())
}

#[queue_consumer(stream = "ORDERS", group = "audit", codec = "cbor")]
async fn on_audit(raw: Bytes) -> Result<(), HandlerError> {
    let _ = raw;
    Ok(())
}

fn main() {}
