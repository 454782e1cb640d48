//! Refused: subject syntax: empty token, `>` not last, partial wildcard, whitespace.

#![allow(unused_imports)]

use nats_topology::{HandlerError, broadcast, queue_consumer, stream};

#[stream(name = "ORDERS", subjects = ["orders..created", "orders.>.eu", "orders.eu*", "orders. eu"])]
pub struct Orders;

fn main() {}
