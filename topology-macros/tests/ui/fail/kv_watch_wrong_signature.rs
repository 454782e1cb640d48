use nats_topology::bucket::KvEntry;
use nats_topology::{kv_bucket, kv_watch, HandlerError};

#[derive(serde::Serialize, serde::Deserialize)]
pub struct Status {
    online: bool,
}

#[kv_bucket(name = "MEMBER_STATUS", value = Status)]
pub struct MemberStatus;

// The change, not the bare value.
#[kv_watch(bucket = MemberStatus, keys = "member.>")]
async fn on_status(status: Status) -> Result<(), HandlerError> {
    let _ = status.online;
    Ok(())
}

// A value type other than the bucket's.
#[kv_watch(bucket = MemberStatus, keys = "member.>")]
async fn on_status_text(entry: KvEntry<String>) -> Result<(), HandlerError> {
    let _ = entry;
    Ok(())
}

fn main() {}
