#![allow(unused_imports)]

use nats_topology::{kv_bucket, object_store};

#[kv_bucket(history = 1)]
pub struct Bucket;

fn main() {}
