//! Refused: an empty list of sources, a stream among its own sources, an element that is no
//! stream, an invalid filter, an empty transform, sources on an external stream, and a
//! subject transform without a destination or with an invalid source.

#![allow(unused_imports)]

use nats_topology::stream;

#[stream(name = "ORDERS", subjects = ["orders.>"])]
pub struct Orders;

#[stream(name = "EMPTY", sources = [])]
pub struct Empty;

#[stream(name = "ALL", sources = [Orders, "ALL"])]
pub struct All;

#[stream(name = "ODD", sources = [Orders, 42])]
pub struct Odd;

#[stream(name = "FILTERED", sources = [{ stream = Orders, filter = "orders.>.eu", transform = "" }])]
pub struct Filtered;

#[stream(name = "EMAIL", subjects = ["email.>"], external, sources = [Orders])]
pub struct Email;

#[stream(name = "IN", subjects = ["in.>"], subject_transform = { src = "in..x" })]
pub struct In;

fn main() {}
