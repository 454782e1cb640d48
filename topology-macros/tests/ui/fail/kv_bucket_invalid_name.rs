#![allow(unused_imports)]

use nats_topology::{kv_bucket, object_store};

#[kv_bucket(name = "member.status")]
pub struct Bucket;

fn main() {}
