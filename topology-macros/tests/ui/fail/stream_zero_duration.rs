//! Refused: zero where zero means nothing.

#![allow(unused_imports)]

use nats_topology::{HandlerError, broadcast, queue_consumer, stream};

#[stream(name = "ORDERS", subjects = ["orders.>"], max_age = "0s", duplicate_window = "0ms")]
pub struct Orders;

fn main() {}
