//! Every way of asking for an endpoint outside a queue group is refused, saying why (each
//! replica would answer every request) and what to write instead.

use nats_topology::{ServiceError, endpoint, service};

#[service(name = "members")]
pub struct Members;

#[endpoint(service = Members, subject = "members.a", queue_group = false)]
async fn a(id: u64) -> Result<u64, ServiceError> {
    Ok(id)
}

#[endpoint(service = Members, subject = "members.b", no_queue)]
async fn b(id: u64) -> Result<u64, ServiceError> {
    Ok(id)
}

#[endpoint(service = Members, subject = "members.c", each_instance)]
async fn c(id: u64) -> Result<u64, ServiceError> {
    Ok(id)
}

#[endpoint(service = Members, subject = "members.d", plain = true)]
async fn d(id: u64) -> Result<u64, ServiceError> {
    Ok(id)
}

#[endpoint(service = Members, subject = "members.e", durable = "members")]
async fn e(id: u64) -> Result<u64, ServiceError> {
    Ok(id)
}

fn main() {}
