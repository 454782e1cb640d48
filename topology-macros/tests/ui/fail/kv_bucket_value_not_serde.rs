#![allow(unused_imports)]

use nats_topology::kv_bucket;

pub struct Status;

#[kv_bucket(name = "S", value = Status)]
pub struct Bucket;

fn main() {}
