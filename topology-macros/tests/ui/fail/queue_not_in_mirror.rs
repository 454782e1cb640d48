//! Refused: a queue consumer on a mirror whose filter is outside what the mirror holds (the
//! origin's subjects within the mirror's filter).

use nats_topology::{Context, HandlerError, queue_consumer, stream};

#[stream(name = "ORDERS", subjects = ["orders.>"])]
pub struct Orders;

#[stream(name = "ORDERS_EU", mirror = { stream = Orders, filter = "orders.eu.>" })]
pub struct OrdersEu;

#[queue_consumer(stream = OrdersEu, group = "us-shipping", subject = "orders.us.paid")]
async fn ship_us(_order: Vec<u8>, _cx: Context) -> Result<(), HandlerError> {
    Ok(())
}

fn main() {}
