use nats_topology::bucket::{Bytes, KvEntry};
use nats_topology::{kv_watch, object_store, HandlerError};

#[object_store(name = "UPLOADS")]
pub struct Uploads;

#[kv_watch(bucket = Uploads)]
async fn on_upload(entry: KvEntry<Bytes>) -> Result<(), HandlerError> {
    let _ = entry;
    Ok(())
}

fn main() {}
