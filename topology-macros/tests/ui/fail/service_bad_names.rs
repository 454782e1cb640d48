//! Service and endpoint names: letters, digits, `_` and `-` (the micro protocol's rule),
//! including the name an endpoint takes from its function.

use nats_topology::{ServiceError, endpoint, service};

#[service(name = "members.v2")]
pub struct Members;

#[service(name = "")]
pub struct Empty;

#[service(name = "ok")]
pub struct Ok;

#[endpoint(service = Ok, subject = "ok.get", name = "get member")]
async fn get_member(id: u64) -> Result<u64, ServiceError> {
    Result::Ok(id)
}

#[endpoint(service = Ok, subject = "ok.find")]
async fn trouvé(id: u64) -> Result<u64, ServiceError> {
    Result::Ok(id)
}

fn main() {}
