use nats_topology::{ServiceError, endpoint, service};

#[service(name = "members")]
pub struct Members;

pub struct GetMember {
    pub id: u64,
}

#[endpoint(service = Members, subject = "members.get")]
async fn get_member(request: GetMember) -> Result<u64, ServiceError> {
    Ok(request.id)
}

fn main() {}
