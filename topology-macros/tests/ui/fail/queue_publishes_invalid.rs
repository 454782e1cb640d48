//! Refused: what a handler publishes to, each mistake at its subject: an empty token, a
//! partial wildcard, the same subject twice.

#![allow(unused_imports)]

use nats_topology::{HandlerError, broadcast, queue_consumer, stream};

#[queue_consumer(
    stream = "ORDERS",
    group = "billing",
    publishes = ["orders..billed", "invoices.a*", "orders.paid", "orders.paid"]
)]
async fn on_order(event: String) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

fn main() {}
