#![allow(unused_imports)]

use nats_topology::kv_bucket;

#[kv_bucket(name = "S")]
pub struct Bucket {
    pub state: u8,
}

fn main() {}
