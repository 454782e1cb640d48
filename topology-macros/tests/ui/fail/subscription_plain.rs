//! A subscription says who receives its messages: a `group`, or `each_instance`. Leaving both
//! out (a plain subscription: on N replicas each message handled N times) is refused, as are
//! the keys that ask for one.

use nats_topology::{HandlerError, subscription};

#[subscription(subject = "jobs.cleanup")]
async fn neither(job: String) -> Result<(), HandlerError> {
    let _ = job;
    Ok(())
}

#[subscription(subject = "jobs.cleanup", each_instance = false)]
async fn each_instance_false(job: String) -> Result<(), HandlerError> {
    let _ = job;
    Ok(())
}

#[subscription(subject = "jobs.cleanup", no_queue)]
async fn no_queue(job: String) -> Result<(), HandlerError> {
    let _ = job;
    Ok(())
}

#[subscription(subject = "jobs.cleanup", durable = "cleanup")]
async fn durable(job: String) -> Result<(), HandlerError> {
    let _ = job;
    Ok(())
}

#[subscription(subject = "jobs.cleanup", queue_group = "cleaners")]
async fn queue_group(job: String) -> Result<(), HandlerError> {
    let _ = job;
    Ok(())
}

fn main() {}
