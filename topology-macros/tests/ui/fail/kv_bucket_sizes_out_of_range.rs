#![allow(unused_imports)]

use nats_topology::{kv_bucket, object_store};

#[kv_bucket(name = "S", max_value_size = 0, max_bytes = -1)]
pub struct Bucket;

fn main() {}
