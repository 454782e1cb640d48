//! Refused: `layer = f` with the `tower` feature off (this suite builds the facade with its
//! default features), on a consumer and an endpoint; and a string where the function goes.

use nats_topology::{HandlerError, ServiceError, endpoint, queue_consumer, service};

fn limits() -> u32 {
    50
}

#[queue_consumer(stream = "ORDERS", group = "billing", layer = limits)]
async fn on_order(order: u64) -> Result<(), HandlerError> {
    let _ = order;
    Ok(())
}

#[service(name = "orders", version = "1.0.0")]
struct Orders;

#[endpoint(service = Orders, subject = "orders.get", layer = limits)]
async fn get(id: u64) -> Result<u64, ServiceError> {
    Ok(id)
}

#[queue_consumer(stream = "ORDERS", group = "audit", layer = "limits")]
async fn on_audit(order: u64) -> Result<(), HandlerError> {
    let _ = order;
    Ok(())
}

fn main() {}
