//! A stream named by a string: declared elsewhere (or external); checked at start-up.

use nats_topology::model::{ConsumerKind, StreamRef};
use nats_topology::{HandlerError, Topology, broadcast, queue_consumer};

#[queue_consumer(stream = "DAEMON_SYNC", group = "sync")]
async fn on_sync(event: serde_json::Value) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

#[broadcast(stream = "MEMBER_STATUS", subject = "member.status.>")]
async fn relay_status(event: serde_json::Value) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

fn main() {
    let topology = Topology::from_registry();
    // A string names a stream; it registers none.
    assert!(topology.streams().is_empty());
    let [sync, relay] = topology.consumers() else {
        panic!("expected two consumers, got {:?}", topology.consumers());
    };

    assert_eq!(sync.decl.stream, StreamRef::Named("DAEMON_SYNC"));
    assert!(sync.decl.subjects.is_empty(), "no filter: the whole stream");
    let ConsumerKind::Queue(queue) = sync.decl.kind else {
        panic!("a queue consumer");
    };
    assert_eq!(queue.group, "sync");

    assert_eq!(relay.decl.stream, StreamRef::Named("MEMBER_STATUS"));
    assert_eq!(relay.decl.subjects, ["member.status.>"]);
    assert!(matches!(relay.decl.kind, ConsumerKind::Broadcast(_)));
}
