//! Refused: a generic struct.

#![allow(unused_imports)]

use nats_topology::{HandlerError, broadcast, queue_consumer, stream};

#[stream(name = "ORDERS", subjects = ["orders.>"])]
pub struct Orders<T>;

fn main() {}
