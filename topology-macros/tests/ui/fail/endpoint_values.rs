//! Values of the wrong kind or out of range, and metadata that is not a list of distinct
//! `("key", "value")` pairs.

use nats_topology::{ServiceError, endpoint, service};

#[service(name = "members", metadata = [("team", "a"), ("team", "b"), ("", "c"), "tier"])]
pub struct Members;

#[service(name = "billing", metadata = {"team": "payments"})]
pub struct Billing;

#[endpoint(
    service = Members,
    subject = "members.get",
    concurrency = 0,
    timeout = "0s",
    group = q,
)]
async fn get_member(id: u64) -> Result<u64, ServiceError> {
    Ok(id)
}

fn main() {}
