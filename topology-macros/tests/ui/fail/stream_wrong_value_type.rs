//! Refused: values of the wrong kind.

#![allow(unused_imports)]

use nats_topology::{HandlerError, broadcast, queue_consumer, stream};

#[stream(name = ORDERS, subjects = "orders.>", replicas = "3", external = "yes")]
pub struct Orders;

fn main() {}
