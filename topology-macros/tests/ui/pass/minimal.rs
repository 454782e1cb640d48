//! The smallest useful topology: one stream, one queue consumer reading part of it.

use nats_topology::model::{ConsumerKind, Delivery, StreamRef};
use nats_topology::{HandlerError, Topology, queue_consumer, stream};
use serde::Deserialize;

#[stream(name = "DAEMON_SYNC", subjects = ["daemon.sync.>"], replicas = 3)]
pub struct DaemonSync;

#[derive(Deserialize)]
pub struct SyncComplete {
    pub id: u64,
}

#[queue_consumer(stream = DaemonSync, group = "sync", subject = "daemon.sync.complete")]
async fn on_sync_complete(event: SyncComplete) -> Result<(), HandlerError> {
    let _ = event.id;
    Ok(())
}

fn main() {
    let topology = Topology::from_registry();
    let [stream] = topology.streams() else {
        panic!("expected one stream, got {:?}", topology.streams());
    };
    assert_eq!(stream.name, "DAEMON_SYNC");
    assert_eq!(stream.subjects, ["daemon.sync.>"]);
    assert_eq!(stream.replicas, Some(3));

    let [consumer] = topology.consumers() else {
        panic!("expected one consumer, got {:?}", topology.consumers());
    };
    let decl = &consumer.decl;
    assert_eq!(decl.handler, concat!(module_path!(), "::on_sync_complete"));
    assert!(matches!(decl.stream, StreamRef::Declared(s) if s.name == "DAEMON_SYNC"));
    assert_eq!(decl.subjects, ["daemon.sync.complete"]);
    let ConsumerKind::Queue(queue) = decl.kind else {
        panic!("expected a queue consumer");
    };
    assert_eq!(queue.group, "sync");
    assert_eq!(queue.delivery, Delivery::Pull);
}
