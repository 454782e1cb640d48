//! Refused: an enum.

#![allow(unused_imports)]

use nats_topology::{HandlerError, broadcast, queue_consumer, stream};

#[stream(name = "ORDERS", subjects = ["orders.>"])]
pub enum Orders {
    Placed,
}

fn main() {}
