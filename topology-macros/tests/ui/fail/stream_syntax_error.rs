//! Refused: malformed arguments: no comma, parentheses, empty argument, no value; no "missing key" noise.

#![allow(unused_imports)]

use nats_topology::{HandlerError, broadcast, queue_consumer, stream};

#[stream(name = "ORDERS" subjects = ["orders.>"], replicas(3), , max_age =)]
pub struct Orders;

fn main() {}
