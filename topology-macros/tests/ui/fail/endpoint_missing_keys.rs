use nats_topology::{ServiceError, endpoint};

#[endpoint()]
async fn get_member(id: u64) -> Result<u64, ServiceError> {
    Ok(id)
}

#[endpoint(service = "members", subject = "members.get")]
async fn get_member_by_name(id: u64) -> Result<u64, ServiceError> {
    Ok(id)
}

fn main() {}
