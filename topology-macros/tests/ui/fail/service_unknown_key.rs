use nats_topology::{HandlerError, ServiceError, endpoint, service, subscription};

#[service(name = "members", verison = "1.0.0", group = "members")]
pub struct Members;

#[endpoint(service = Members, subjct = "members.get", version = "1.0.0")]
async fn get_member(id: u64) -> Result<u64, ServiceError> {
    Ok(id)
}

#[subscription(subject = "cache.invalidate", each_instance, timeout = "1s")]
async fn invalidate(key: String) -> Result<(), HandlerError> {
    let _ = key;
    Ok(())
}

fn main() {}
