use nats_topology::{HandlerError, ServiceError, endpoint, service, subscription};

#[service(name = "members", queue_group = "members workers")]
pub struct Members;

#[service(name = "billing")]
pub struct Billing;

#[endpoint(service = Billing, subject = "billing.get", group = "")]
async fn get_bill(id: u64) -> Result<u64, ServiceError> {
    Ok(id)
}

#[subscription(subject = "jobs.cleanup", group = "clean\tup")]
async fn cleanup(job: String) -> Result<(), HandlerError> {
    let _ = job;
    Ok(())
}

fn main() {}
