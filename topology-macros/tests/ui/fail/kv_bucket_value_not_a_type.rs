#![allow(unused_imports)]

use nats_topology::{kv_bucket, object_store};

#[kv_bucket(name = "S", value = 5)]
pub struct Bucket;

fn main() {}
