use nats_topology::bucket::{Bytes, KvEntry};
use nats_topology::{kv_bucket, kv_watch, HandlerError};

#[kv_bucket(name = "FLAGS")]
pub struct Flags;

#[kv_watch(bucket = Flags, keys = "flag..beta")]
async fn on_flag(entry: KvEntry<Bytes>) -> Result<(), HandlerError> {
    let _ = entry;
    Ok(())
}

fn main() {}
