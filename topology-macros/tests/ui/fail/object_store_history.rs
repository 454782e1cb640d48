#![allow(unused_imports)]

use nats_topology::{kv_bucket, object_store};

#[object_store(name = "UPLOADS", history = 2, max_value_size = 10)]
pub struct Bucket;

fn main() {}
