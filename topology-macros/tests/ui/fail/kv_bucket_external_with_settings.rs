#![allow(unused_imports)]

use nats_topology::{kv_bucket, object_store};

#[kv_bucket(name = "S", external, history = 5, replicas = 3)]
pub struct Bucket;

fn main() {}
