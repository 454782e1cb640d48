//! Refused: a key given twice.

#![allow(unused_imports)]

use nats_topology::{HandlerError, broadcast, queue_consumer, stream};

#[stream(name = "ORDERS", subjects = ["orders.>"], name = "ORDERS2")]
pub struct Orders;

fn main() {}
