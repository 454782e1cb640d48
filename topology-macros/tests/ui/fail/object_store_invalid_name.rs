#![allow(unused_imports)]

use nats_topology::{kv_bucket, object_store};

#[object_store(name = "up loads", replicas = 0)]
pub struct Bucket;

fn main() {}
