use nats_topology::service;

#[service(name = "members")]
pub struct Members {
    pub db: String,
}

#[service(name = "billing")]
pub enum Billing {}

fn main() {}
