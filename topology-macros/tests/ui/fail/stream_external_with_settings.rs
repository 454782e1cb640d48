//! Refused: settings on an external stream.

#![allow(unused_imports)]

use nats_topology::{HandlerError, broadcast, queue_consumer, stream};

#[stream(name = "EMAIL", subjects = ["email.>"], external, replicas = 3, max_age = "7d")]
pub struct Email;

fn main() {}
