#![allow(unused_imports)]

use nats_topology::{kv_bucket, object_store};

#[kv_bucket(name = "S", replicas = 6)]
pub struct Bucket;

fn main() {}
