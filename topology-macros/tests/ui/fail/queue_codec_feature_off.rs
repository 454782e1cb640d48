//! Refused: a codec whose cargo feature is off (this suite builds the facade with its default
//! features), on a consumer, an endpoint and a core subscription; the message names the feature.

use nats_topology::{HandlerError, ServiceError, endpoint, queue_consumer, service, subscription};

#[derive(serde::Deserialize, serde::Serialize)]
struct Order {
    id: u64,
}

#[queue_consumer(stream = "ORDERS", group = "billing", codec = "msgpack")]
async fn on_order(order: Order) -> Result<(), HandlerError> {
    let _ = order.id;
    Ok(())
}

#[service(name = "orders", version = "1.0.0")]
struct Orders;

#[endpoint(service = Orders, subject = "orders.get", codec = "cbor")]
async fn get(order: Order) -> Result<Order, ServiceError> {
    Ok(order)
}

#[subscription(subject = "orders.seen", group = "seen", codec = "protobuf")]
async fn seen(order: Order) -> Result<(), HandlerError> {
    let _ = order.id;
    Ok(())
}

fn main() {}
