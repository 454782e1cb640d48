use nats_topology::{ServiceError, endpoint, service};

#[service(name = "members")]
pub struct Members;

pub struct Member {
    pub id: u64,
}

#[endpoint(service = Members, subject = "members.get")]
async fn get_member(id: u64) -> Result<Member, ServiceError> {
    Ok(Member { id })
}

#[endpoint(service = Members, subject = "members.name")]
async fn member_name(id: u64) -> String {
    id.to_string()
}

fn main() {}
