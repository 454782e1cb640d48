//! Refused: unknown values of `storage`, `retention`, `discard`, with the nearest suggested.

#![allow(unused_imports)]

use nats_topology::{HandlerError, broadcast, queue_consumer, stream};

#[stream(name = "ORDERS", subjects = ["orders.>"], storage = "disk", retention = "work_queue", discard = "Old")]
pub struct Orders;

fn main() {}
