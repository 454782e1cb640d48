//! Subjects are valid filters outside `$SRV.` (answered by every service instance) and
//! `_INBOX.` (where replies travel).

use nats_topology::{HandlerError, ServiceError, endpoint, service, subscription};

#[service(name = "members")]
pub struct Members;

#[endpoint(service = Members, subject = "$SRV.PING")]
async fn ping(id: u64) -> Result<u64, ServiceError> {
    Ok(id)
}

#[endpoint(service = Members, subject = "members..get")]
async fn get_member(id: u64) -> Result<u64, ServiceError> {
    Ok(id)
}

#[endpoint(service = Members, subject = "members.>.get")]
async fn find_member(id: u64) -> Result<u64, ServiceError> {
    Ok(id)
}

#[subscription(subject = "_INBOX.>", each_instance)]
async fn replies(reply: Vec<u8>) -> Result<(), HandlerError> {
    let _ = reply;
    Ok(())
}

fn main() {}
