//! A service with a mistake is still a service to its endpoints: the mistake is reported once,
//! and no "is not a service" error follows.

use nats_topology::{ServiceError, endpoint, service};

#[service(name = "members", version = "one")]
pub struct Members;

#[endpoint(service = Members, subject = "members.get")]
async fn get_member(id: u64) -> Result<u64, ServiceError> {
    Ok(id)
}

fn main() {
    let _ = get_member;
}
