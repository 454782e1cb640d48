use nats_topology::service;

#[service(name = "members", version = "1.2")]
pub struct Members;

#[service(name = "billing", version = "v1.0.0")]
pub struct Billing;

#[service(name = "audit", version = "1.02.0-rc.01")]
pub struct Audit;

fn main() {}
