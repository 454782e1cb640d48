//! Typed relay handles and `State<T>` arguments: `relay_status::relay(&runtime)` names the
//! relay by its function, and `State<T>` arguments (anywhere after the payload, with or
//! without a `Context`) declare the state the runtime must be given.

use std::sync::Arc;

use nats_topology::{
    Context, HandlerError, Runtime, State, Topology, broadcast, queue_consumer, stream,
};

pub struct Db {
    pub url: String,
}

pub struct Sessions;

#[stream(name = "STATUS", subjects = ["status.>"], retention = "limits")]
pub struct Status;

#[broadcast(stream = Status, subject = "status.>")]
pub async fn relay_status(status: String, sessions: State<Sessions>) -> Result<(), HandlerError> {
    let _ = (status, &*sessions);
    Ok(())
}

#[queue_consumer(stream = Status, group = "writer", subject = "status.member.*")]
async fn write_status(
    status: String,
    cx: Context,
    State(db): State<Db>,
    sessions: nats_topology::State<Sessions>,
) -> Result<(), HandlerError> {
    let _: (&str, Arc<Db>, &Sessions) = (&status, db, &sessions);
    let _ = cx.subject();
    Ok(())
}

#[queue_consumer(stream = Status, group = "auditor", subject = "status.audit")]
async fn audit(status: String, db: State<Db>, cx: Context) -> Result<(), HandlerError> {
    let _ = (status, db.url.len(), cx.delivered());
    Ok(())
}

mod nested {
    use nats_topology::{HandlerError, broadcast};

    /// A private relay: its handle is as visible as the function.
    #[broadcast(stream = "STATUS", subject = "status.nested")]
    async fn relay_nested(status: String) -> Result<(), HandlerError> {
        let _ = status;
        Ok(())
    }

    pub(crate) fn handle(runtime: &nats_topology::Runtime) -> nats_topology::Relay {
        relay_nested::relay(runtime)
    }
}

// The handle is a function of the runtime, with the exact relay type.
const _: fn(&Runtime) -> nats_topology::Relay = relay_status::relay;
const _: fn(&Runtime) -> nats_topology::Relay = nested::handle;

fn main() {
    let topology = Topology::from_registry();
    let states = format!("{:?}", topology.consumers());
    assert!(states.contains("Sessions"), "{states}");
    assert!(states.contains("Db"), "{states}");
    // The functions themselves are untouched.
    let _ = (relay_status, write_status, audit);
}
