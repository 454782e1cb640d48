//! Refused: overlapping and repeated subjects in one stream.

#![allow(unused_imports)]

use nats_topology::{HandlerError, broadcast, queue_consumer, stream};

#[stream(name = "ORDERS", subjects = ["orders.>", "orders.eu.*", "orders.>"])]
pub struct Orders;

fn main() {}
