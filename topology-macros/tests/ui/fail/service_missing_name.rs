use nats_topology::service;

#[service(version = "1.0.0")]
pub struct Members;

fn main() {}
