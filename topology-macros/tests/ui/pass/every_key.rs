//! Every key of the three macros, and the declarations they register.

use core::time::Duration;

use nats_topology::model::{
    AckMode, ConsumerKind, DeliverPolicy, Delivery, Discard, Retention, Storage, StreamRef,
};
use nats_topology::{Context, HandlerError, Topology, broadcast, queue_consumer, stream};
use serde::Deserialize;

#[stream(
    name = "DAEMON_SYNC",
    subjects = ["daemon.sync.>", "daemon.audit.*"],
    replicas = 3,
    storage = "memory",
    retention = "interest",
    max_age = "7d",
    max_msgs = 1_000_000,
    max_bytes = 1073741824,
    max_msg_size = 1048576,
    discard = "new",
    duplicate_window = "1h30m",
    description = "daemon synchronisation events",
    placement = { cluster = "east", tags = ["ssd", "az:1"] },
    allow_msg_ttl,
    allow_msg_schedules = true,
    crate = ::nats_topology,
)]
pub struct DaemonSync;

/// Owned by another service: only its name, subjects and retention are declared.
#[stream(name = "EMAIL", subjects = ["email.>"], external, retention = "workqueue")]
pub struct Email;

#[stream(name = "MEMBER_STATUS", subjects = ["member.status.>"], storage = "file", retention = "limits", discard = "old", replicas = 1, placement = { tags = ["edge"] })]
pub struct MemberStatus;

#[derive(Deserialize)]
pub struct SyncComplete {
    pub id: u64,
}

#[derive(Deserialize)]
pub struct StatusChanged {
    pub member: String,
}

#[queue_consumer(
    stream = DaemonSync,
    group = "sync",
    subjects = ["daemon.sync.complete", "daemon.sync.failed"],
    delivery = "push",
    max_deliver = 5,
    ack_wait = "30s",
    backoff = ["1s", "10s", "1m30s"],
    max_ack_pending = 100,
    concurrency = 8,
    dead_letter = "daemon.dead.sync",
    migrate_from = "sync_v1",
    description = "completes a sync",
    ack = "confirmed",
    publishes = ["member.status.*", "daemon.audit.sync"],
    crate = nats_topology,
)]
async fn on_sync_complete(event: SyncComplete, cx: Context) -> Result<(), HandlerError> {
    let _ = (event.id, cx.subject());
    Ok(())
}

/// A work-queue stream takes queue consumers; raw payloads; any error convertible into
/// `HandlerError`.
#[queue_consumer(stream = Email, group = "mailer", subject = "email.send", delivery = "pull", ack = "fire_and_forget")]
async fn on_email(raw: Vec<u8>) -> Result<(), std::io::Error> {
    let _ = raw.len();
    Ok(())
}

#[broadcast(
    stream = MemberStatus,
    subject = "member.status.>",
    deliver = "last_per_subject",
    concurrency = 4,
    publishes = ["sessions.>"],
    crate = nats_topology,
)]
async fn relay_status(event: StatusChanged, cx: Context) -> Result<(), HandlerError> {
    let _ = (event.member, cx.consumer());
    Ok(())
}

#[broadcast(stream = MemberStatus, subjects = ["member.status.eu.*", "member.status.us.*"], deliver = "all")]
async fn relay_regional(event: StatusChanged) -> Result<(), HandlerError> {
    let _ = event.member;
    Ok(())
}

#[broadcast(stream = MemberStatus, deliver = "last")]
async fn relay_last(event: StatusChanged) -> Result<(), HandlerError> {
    let _ = event.member;
    Ok(())
}

#[broadcast(stream = MemberStatus, deliver = "new")]
async fn relay_new(event: StatusChanged) -> Result<(), HandlerError> {
    let _ = event.member;
    Ok(())
}

#[broadcast(stream = MemberStatus)]
async fn relay_default(event: StatusChanged) -> Result<(), HandlerError> {
    let _ = event.member;
    Ok(())
}

fn main() {
    let topology = Topology::from_registry();
    let names: Vec<&str> = topology.streams().iter().map(|s| s.name).collect();
    assert_eq!(names, ["DAEMON_SYNC", "EMAIL", "MEMBER_STATUS"]);

    let sync = topology.find_stream("DAEMON_SYNC").unwrap();
    assert_eq!(sync.subjects, ["daemon.sync.>", "daemon.audit.*"]);
    assert_eq!(sync.replicas, Some(3));
    assert_eq!(sync.storage, Some(Storage::Memory));
    assert_eq!(sync.retention, Some(Retention::Interest));
    assert_eq!(sync.max_age, Some(Duration::from_secs(7 * 24 * 3600)));
    assert_eq!(sync.max_msgs, Some(1_000_000));
    assert_eq!(sync.max_bytes, Some(1 << 30));
    assert_eq!(sync.max_msg_size, Some(1 << 20));
    assert_eq!(sync.discard, Some(Discard::New));
    assert_eq!(sync.duplicate_window, Some(Duration::from_secs(90 * 60)));
    assert_eq!(sync.description, Some("daemon synchronisation events"));
    assert!(!sync.external);
    let placement = sync.placement.unwrap();
    assert_eq!(placement.cluster, Some("east"));
    assert_eq!(placement.tags, ["ssd", "az:1"]);
    assert!(sync.allow_msg_ttl && sync.allow_msg_schedules);

    let email = topology.find_stream("EMAIL").unwrap();
    assert!(email.external);
    assert_eq!(email.retention, Some(Retention::WorkQueue));
    assert_eq!(
        (email.replicas, email.storage, email.max_age),
        (None, None, None)
    );

    let status = topology.find_stream("MEMBER_STATUS").unwrap();
    assert_eq!(status.storage, Some(Storage::File));
    assert_eq!(status.retention, Some(Retention::Limits));
    assert_eq!(status.discard, Some(Discard::Old));
    assert_eq!(status.replicas, Some(1));
    let placement = status.placement.unwrap();
    assert_eq!((placement.cluster, placement.tags), (None, &["edge"][..]));
    assert!(!status.allow_msg_ttl && !status.allow_msg_schedules);

    let consumer = |name: &str| {
        let handler = format!("{}::{name}", module_path!());
        topology
            .consumers()
            .iter()
            .find(|c| c.decl.handler == handler)
            .unwrap_or_else(|| panic!("{handler} is not registered"))
            .decl
    };

    let sync = consumer("on_sync_complete");
    assert!(matches!(sync.stream, StreamRef::Declared(s) if s.name == "DAEMON_SYNC"));
    assert_eq!(
        sync.subjects,
        ["daemon.sync.complete", "daemon.sync.failed"]
    );
    assert_eq!(sync.concurrency, Some(8));
    let ConsumerKind::Queue(queue) = sync.kind else {
        panic!("on_sync_complete is a queue consumer");
    };
    assert_eq!(queue.group, "sync");
    assert_eq!(queue.delivery, Delivery::Push);
    assert_eq!(queue.max_deliver, Some(5));
    assert_eq!(queue.ack_wait, Some(Duration::from_secs(30)));
    assert_eq!(
        queue.backoff,
        [
            Duration::from_secs(1),
            Duration::from_secs(10),
            Duration::from_secs(90)
        ]
    );
    assert_eq!(queue.max_ack_pending, Some(100));
    assert_eq!(queue.dead_letter, Some("daemon.dead.sync"));
    assert_eq!(queue.migrate_from, Some("sync_v1"));
    assert_eq!(queue.description, Some("completes a sync"));
    assert_eq!(queue.ack, Some(AckMode::Confirmed));
    assert_eq!(sync.publishes, ["member.status.*", "daemon.audit.sync"]);

    let email = consumer("on_email");
    assert!(matches!(email.stream, StreamRef::Declared(s) if s.external));
    assert_eq!(email.subjects, ["email.send"]);
    assert_eq!(email.concurrency, None);
    assert_eq!(email.effective_concurrency(), 1);
    let ConsumerKind::Queue(queue) = email.kind else {
        panic!("on_email is a queue consumer");
    };
    assert_eq!(queue.delivery, Delivery::Pull);
    assert_eq!((queue.max_deliver, queue.ack_wait), (None, None));
    assert!(queue.backoff.is_empty());
    assert_eq!(queue.ack, Some(AckMode::FireAndForget));
    assert!(email.publishes.is_empty());
    assert_eq!(consumer("relay_status").publishes, ["sessions.>"]);

    for (name, subjects, deliver, concurrency) in [
        (
            "relay_status",
            &["member.status.>"][..],
            DeliverPolicy::LastPerSubject,
            Some(4),
        ),
        (
            "relay_regional",
            &["member.status.eu.*", "member.status.us.*"][..],
            DeliverPolicy::All,
            None,
        ),
        ("relay_last", &[][..], DeliverPolicy::Last, None),
        ("relay_new", &[][..], DeliverPolicy::New, None),
        ("relay_default", &[][..], DeliverPolicy::New, None),
    ] {
        let relay = consumer(name);
        assert!(matches!(relay.stream, StreamRef::Declared(s) if s.name == "MEMBER_STATUS"));
        assert_eq!(relay.subjects, subjects, "{name}");
        assert_eq!(relay.concurrency, concurrency, "{name}");
        let ConsumerKind::Broadcast(b) = relay.kind else {
            panic!("{name} is a broadcast");
        };
        assert_eq!(b.deliver, deliver, "{name}");
    }
    assert_eq!(topology.consumers().len(), 7);
}
