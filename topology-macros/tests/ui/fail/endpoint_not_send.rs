use std::rc::Rc;

use nats_topology::{ServiceError, endpoint, service};

#[service(name = "members")]
pub struct Members;

async fn tick() {}

#[endpoint(service = Members, subject = "members.get")]
async fn get_member(id: u64) -> Result<u64, ServiceError> {
    let held = Rc::new(id);
    tick().await;
    Ok(*held)
}

fn main() {}
