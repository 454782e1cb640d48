//! Refused: a typo (suggestion), a consumer key (where it belongs).

#![allow(unused_imports)]

use nats_topology::{HandlerError, broadcast, queue_consumer, stream};

#[stream(name = "ORDERS", subjects = ["orders.>"], replica = 3, group = "billing")]
pub struct Orders;

fn main() {}
