use nats_topology::bucket::{Bytes, KvEntry};
use nats_topology::{kv_watch, HandlerError};

// A bucket by string, keys with a wildcard inside a token, an unknown `from`, a key of
// `#[broadcast]`, and a queue group: each reported at its token, together.
#[kv_watch(bucket = "FLAGS", keys = "flag.be*", from = "latest", subject = "x", group = "g")]
async fn on_flag(entry: KvEntry<Bytes>) -> Result<(), HandlerError> {
    let _ = entry;
    Ok(())
}

#[kv_watch(keys = ">.flag")]
async fn missing_bucket(entry: KvEntry<Bytes>) -> Result<(), HandlerError> {
    let _ = entry;
    Ok(())
}

fn main() {}
