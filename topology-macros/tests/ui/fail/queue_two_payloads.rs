//! Refused: a second payload argument; the second argument of a handler is its `Context`.

use nats_topology::{HandlerError, queue_consumer};
use serde::Deserialize;

#[derive(Deserialize)]
pub struct Order {
    pub id: u64,
}

#[derive(Deserialize)]
pub struct Customer {
    pub name: String,
}

#[queue_consumer(stream = "ORDERS", group = "billing")]
async fn on_order(order: Order, customer: Customer) -> Result<(), HandlerError> {
    let _ = (order.id, customer.name);
    Ok(())
}

fn main() {}
