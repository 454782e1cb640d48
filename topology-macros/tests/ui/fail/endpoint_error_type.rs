use nats_topology::{ServiceError, endpoint, service};

#[service(name = "members")]
pub struct Members;

#[endpoint(service = Members, subject = "members.get")]
async fn get_member(id: u64) -> Result<u64, u32> {
    Ok(id)
}

/// A subscription's error converts into `HandlerError`, not `ServiceError`.
#[nats_topology::subscription(subject = "members.changed", each_instance)]
async fn on_changed(id: u64) -> Result<(), ServiceError> {
    let _ = id;
    Ok(())
}

fn main() {}
