//! A stream with a mistake reports it once: consumers naming the stream add no "is not a
//! stream" or coverage errors of their own.

use nats_topology::{HandlerError, broadcast, queue_consumer, stream};

#[stream(name = "ORDERS", subjects = ["orders.>"], replicas = 6)]
pub struct Orders;

#[queue_consumer(stream = Orders, group = "billing", subject = "orders.created")]
async fn on_order(event: String) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

#[broadcast(stream = Orders, subject = "elsewhere.>")]
async fn relay_order(event: String) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

fn main() {}
