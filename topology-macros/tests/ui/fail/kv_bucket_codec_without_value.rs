//! Refused: a codec on a bucket of raw bytes (no `value`), and a codec whose cargo feature is
//! off (this suite builds the facade with its default features).

use nats_topology::kv_bucket;

#[kv_bucket(name = "RAW", codec = "msgpack")]
struct Raw;

#[derive(serde::Serialize, serde::Deserialize)]
struct Status {
    online: bool,
}

#[kv_bucket(name = "STATUS", value = Status, codec = "cbor")]
struct MemberStatus;

fn main() {}
