//! Refused, as nats-server 2.15.1 refuses them when it creates the stream: a `*` in a source's
//! destination, a wildcard position past the source's wildcards, a `>` against a `*`, an
//! unknown function, a function's missing argument, and a function reading a wildcard of a
//! source without one.

use nats_topology::stream;

#[stream(name = "BILLING", subjects = ["billing.>"])]
pub struct Billing;

#[stream(name = "LEDGER", sources = [{ stream = Billing, filter = "billing.*.paid", transform = "ledger.*.paid" }])]
pub struct Ledger;

#[stream(name = "IN", subjects = ["in.*.*"], subject_transform = { src = "in.*.*", dest = "inbox.{{wildcard(3)}}" })]
pub struct In;

#[stream(name = "COPY", mirror = { stream = Billing, filter = "billing.*", transform = "copy.>" })]
pub struct Copy;

#[stream(name = "SPLIT", sources = [{ stream = Billing, filter = "billing.*.paid", transform = "split.{{splat(1)}}" }])]
pub struct Split;

#[stream(name = "PARTS", sources = [{ stream = Billing, filter = "billing.*.paid", transform = "parts.{{partition()}}.$1" }])]
pub struct Parts;

#[stream(name = "FIXED", subjects = ["fixed.a"], subject_transform = { src = "fixed.a", dest = "fixed.{{left(1,2)}}" })]
pub struct Fixed;

fn main() {}
