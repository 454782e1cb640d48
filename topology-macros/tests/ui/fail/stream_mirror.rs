//! Refused: a mirror with subjects, a mirror with sources, a stream mirroring itself (by type
//! and by name), an invalid origin name and filter, both `domain` and `api_prefix`, a block
//! without `stream`, an unknown key in the block, and a mirror on an external stream.

#![allow(unused_imports)]

use nats_topology::stream;

#[stream(name = "ORDERS", subjects = ["orders.>"])]
pub struct Orders;

#[stream(name = "WITH_SUBJECTS", subjects = ["copy.>"], mirror = Orders)]
pub struct WithSubjects;

#[stream(name = "BOTH", mirror = Orders, sources = [Orders])]
pub struct Both;

#[stream(name = "SELF_TYPE", mirror = SelfType)]
pub struct SelfType;

#[stream(name = "SELF_NAME", mirror = "SELF_NAME")]
pub struct SelfName;

#[stream(name = "BAD", mirror = { stream = "BAD.NAME", filter = "orders..eu" })]
pub struct Bad;

#[stream(name = "TWO_WAYS", mirror = { stream = "HUB", domain = "hub", api_prefix = "$JS.hub.API" })]
pub struct TwoWays;

#[stream(name = "NO_STREAM", mirror = { filter = "orders.eu.>" })]
pub struct NoStream;

#[stream(name = "UNKNOWN", mirror = { stream = Orders, subject = "orders.eu.>" })]
pub struct Unknown;

#[stream(name = "EMAIL", subjects = ["email.>"], external, mirror = Orders)]
pub struct Email;

fn main() {}
