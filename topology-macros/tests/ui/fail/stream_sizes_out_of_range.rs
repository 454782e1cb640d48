//! Refused: limits below 1, or above the field's type.

#![allow(unused_imports)]

use nats_topology::{HandlerError, broadcast, queue_consumer, stream};

#[stream(name = "ORDERS", subjects = ["orders.>"], max_msgs = 0, max_bytes = -1, max_msg_size = 4294967296)]
pub struct Orders;

fn main() {}
