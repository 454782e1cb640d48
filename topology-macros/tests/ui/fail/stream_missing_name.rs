//! Refused: no `name`.

#![allow(unused_imports)]

use nats_topology::{HandlerError, broadcast, queue_consumer, stream};

#[stream(subjects = ["orders.>"])]
pub struct Orders;

fn main() {}
