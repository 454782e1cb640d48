//! Refused: a struct with fields.

#![allow(unused_imports)]

use nats_topology::{HandlerError, broadcast, queue_consumer, stream};

#[stream(name = "ORDERS", subjects = ["orders.>"])]
pub struct Orders {
    pub id: u64,
}

fn main() {}
