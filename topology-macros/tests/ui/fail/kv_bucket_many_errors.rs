//! Every mistake of one `#[kv_bucket]` is reported in one build, each at its token; the struct
//! is kept, so a use of it adds no "cannot find" error.

use nats_topology::kv_bucket;

#[kv_bucket(
    name = "member status",
    history = 0,
    ttl = "1 hour",
    replicas = 7,
    storage = "ssd",
    histroy = 5,
    description = 4,
)]
pub struct MemberStatus;

fn uses(_: MemberStatus) {}

fn main() {}
