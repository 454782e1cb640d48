//! Refused: replicas outside 1..=5.

#![allow(unused_imports)]

use nats_topology::{HandlerError, broadcast, queue_consumer, stream};

#[stream(name = "ORDERS", subjects = ["orders.>"], replicas = 7)]
pub struct Orders;

#[stream(name = "EU", subjects = ["eu.>"], replicas = 0)]
pub struct Eu;

fn main() {}
