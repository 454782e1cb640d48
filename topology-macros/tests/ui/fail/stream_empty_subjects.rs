//! Refused: an empty `subjects` list.

#![allow(unused_imports)]

use nats_topology::{HandlerError, broadcast, queue_consumer, stream};

#[stream(name = "ORDERS", subjects = [])]
pub struct Orders;

fn main() {}
