//! Refused: duration syntax.

#![allow(unused_imports)]

use nats_topology::{HandlerError, broadcast, queue_consumer, stream};

#[stream(name = "ORDERS", subjects = ["orders.>"], max_age = "7 days", duplicate_window = "1.5m")]
pub struct Orders;

#[stream(name = "EU", subjects = ["eu.>"], max_age = "30m1h", duplicate_window = "2")]
pub struct Eu;

fn main() {}
