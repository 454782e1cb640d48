//! Refused: no `subjects`.

#![allow(unused_imports)]

use nats_topology::{HandlerError, broadcast, queue_consumer, stream};

#[stream(name = "ORDERS")]
pub struct Orders;

fn main() {}
