//! Refused: stream names: no `.`, no path separators.

#![allow(unused_imports)]

use nats_topology::{HandlerError, broadcast, queue_consumer, stream};

#[stream(name = "orders.eu", subjects = ["orders.>"])]
pub struct Orders;

#[stream(name = "ORDERS/EU", subjects = ["eu.>"])]
pub struct OrdersEu;

fn main() {}
