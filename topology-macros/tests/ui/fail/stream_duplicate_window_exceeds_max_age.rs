//! Refused: a duplicate window longer than max_age.

#![allow(unused_imports)]

use nats_topology::{HandlerError, broadcast, queue_consumer, stream};

#[stream(name = "ORDERS", subjects = ["orders.>"], max_age = "1m", duplicate_window = "2m")]
pub struct Orders;

fn main() {}
