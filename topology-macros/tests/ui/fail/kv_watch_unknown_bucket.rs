use nats_topology::bucket::{Bytes, KvEntry};
use nats_topology::{kv_watch, HandlerError};

#[kv_watch(bucket = Flagz, keys = "flag.>")]
async fn on_flag(entry: KvEntry<Bytes>) -> Result<(), HandlerError> {
    let _ = entry;
    Ok(())
}

fn main() {}
