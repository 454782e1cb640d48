use nats_topology::{ServiceError, endpoint};

pub struct Members;

#[endpoint(service = Members, subject = "members.get")]
async fn get_member(id: u64) -> Result<u64, ServiceError> {
    Ok(id)
}

#[endpoint(service = Billing, subject = "billing.get")]
async fn get_bill(id: u64) -> Result<u64, ServiceError> {
    Ok(id)
}

fn main() {}
