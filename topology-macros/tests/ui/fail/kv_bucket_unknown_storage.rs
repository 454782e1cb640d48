#![allow(unused_imports)]

use nats_topology::{kv_bucket, object_store};

#[kv_bucket(name = "S", storage = "disk")]
pub struct Bucket;

fn main() {}
