use nats_topology::{Context, ServiceError, endpoint, service};

#[service(name = "members")]
pub struct Members;

/// An endpoint's context is a `RequestContext`; `Context` belongs to JetStream consumers.
#[endpoint(service = Members, subject = "members.get")]
async fn get_member(id: u64, cx: Context) -> Result<u64, ServiceError> {
    let _ = cx;
    Ok(id)
}

fn main() {}
