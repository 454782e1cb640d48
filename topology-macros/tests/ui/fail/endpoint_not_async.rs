use nats_topology::{ServiceError, endpoint, service};

#[service(name = "members")]
pub struct Members;

#[endpoint(service = Members, subject = "members.get")]
fn get_member(id: u64) -> Result<u64, ServiceError> {
    Ok(id)
}

#[endpoint(service = Members, subject = "members.list")]
async fn list_members() {}

fn main() {}
