//! Refused at compile time: a misspelt relay handle (the string lookup would be a `None` at
//! run time).

use nats_topology::{HandlerError, Runtime, broadcast};

#[broadcast(stream = "STATUS", subject = "status.>")]
async fn relay_status(status: String) -> Result<(), HandlerError> {
    let _ = status;
    Ok(())
}

fn handle(runtime: &Runtime) {
    let _ = relay_statsu::relay(runtime);
}

fn main() {}
