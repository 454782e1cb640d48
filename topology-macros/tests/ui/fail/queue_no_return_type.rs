//! Refused: a handler that returns nothing (it could never ask for a redelivery).

use nats_topology::queue_consumer;

#[queue_consumer(stream = "ORDERS", group = "billing")]
async fn on_order(event: String) {
    let _ = event;
}

fn main() {}
