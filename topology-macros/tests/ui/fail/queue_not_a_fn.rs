//! Refused: `#[queue_consumer]` on something other than a function.

use nats_topology::queue_consumer;

#[queue_consumer(stream = "ORDERS", group = "billing")]
pub struct OnOrder;

fn main() {}
