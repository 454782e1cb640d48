//! Every mistake of one attribute is reported in one build, each at its token; the items are
//! kept (no "cannot find" errors follow).

use nats_topology::{HandlerError, ServiceError, endpoint, service, subscription};

#[service(
    name = "members.v2",
    version = "1.0",
    queue_group = "",
    description = 42,
    metadata = [("k", "1"), ("k", "2")],
    subject = "members.>",
)]
pub struct Members;

#[endpoint(
    service = Members,
    subject = "_INBOX.members",
    name = "get.member",
    group = "a b",
    queue_group = false,
    concurrency = -1,
    timeout = "5 s",
    subject = "members.get",
)]
fn get_member(id: u64, extra: u8) -> Result<u64, ServiceError> {
    let _ = extra;
    Ok(id)
}

#[subscription(subject = "$SRV.>", group = "g", each_instance, concurrency = 0, plain)]
async fn on_any<T>(payload: T) -> Result<(), HandlerError> {
    let _ = payload;
    Ok(())
}

fn main() {
    let _ = Members;
    let _ = get_member;
}
