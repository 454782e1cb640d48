use nats_topology::{HandlerError, broadcast, stream};

#[stream(name = "JOBS", subjects = ["jobs.>"], retention = "workqueue")]
pub struct Jobs;

#[broadcast(stream = Jobs, subject = "jobs.status.>")]
async fn relay_status(event: String) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

#[broadcast(stream = Jobs, deliver = "all")]
async fn relay_everything(event: String) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

fn main() {}
