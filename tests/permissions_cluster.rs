//! Least privilege through a leader election: two replicas that start while the meta leader
//! is dead wait on the leader watch (its probes, the leader advisories, the fleet channel
//! between them) and get ready, under exactly their generated owner permissions, denied
//! nothing; and with the entries only such an outage uses removed, each is named in health.
//! Also the `sync_status` example's topology (its two R3 streams, the queue consumer that
//! publishes a member's status into the service's own stream, the relay on every replica),
//! run by two replicas under exactly its generated permissions. Denied nothing means: no
//! replica's health shows a denial, and no node logged a violation. (The single-server
//! lives, and every other entry removed, are in `tests/permissions.rs`.)

#![cfg(unix)]

mod fixture;

#[allow(dead_code)]
#[path = "../examples/sync_status/topology.rs"]
mod sync_topology;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use fixture::{Running, admin_of, client_of, fast, users_config};
use nats_topology::export::{self, Permission, Permissions, Role, Verb};
use nats_topology::model::{ConsumerDecl, QueueDecl, StreamDecl, StreamRef};
use nats_topology::{HandlerError, PermissionDenial, Runtime, Topology};
use nats_topology_testkit::{NatsCluster, eventually, within};
use sync_topology::{Hub, Phase, SYNC_COMPLETE, SyncComplete};
use tokio::sync::mpsc;

static STREAM: StreamDecl = StreamDecl::new("PERM_ELECTED", &["perm.elected.>"]).replicas(3);
const SERVICE: &str = "elected";
const PASSWORD: &str = "elected-pw";
const REPLICAS: usize = 2;

fn topology(handled: &Arc<AtomicU64>) -> Topology {
    let handled = handled.clone();
    Topology::new().stream(STREAM).consumer(
        ConsumerDecl::queue(
            "elected::on_work",
            StreamRef::Declared(&STREAM),
            QueueDecl::new("workers"),
        )
        .subjects(&["perm.elected.work"]),
        move |_| {
            let handled = handled.clone();
            Box::pin(async move {
                handled.fetch_add(1, Ordering::Relaxed);
                Ok::<(), HandlerError>(())
            })
        },
    )
}

/// The entries only an outage uses: the leader watch's subscriptions and its fleet channel.
fn outage_only(entry: &Permission) -> bool {
    // The meta leader's elections, the streams' (the consumers' are also the liveness's), an
    // old consumer's, and publishing into the fleet channel.
    entry
        .needed_by
        .iter()
        .all(|n| n.why.starts_with("the leader watch"))
}

fn collect(replicas: &[Running], denials: &mut Vec<PermissionDenial>) {
    for replica in replicas {
        for denial in replica.health.denials() {
            if !denials.iter().any(|d| d.subject == denial.subject) {
                denials.push(denial);
            }
        }
    }
}

/// The violations the nodes of `cluster` logged (nats-server 2.15.1: `Publish Violation -
/// Subject ".."`, `Subscription Violation - Subject ".."`).
fn violations_logged(cluster: &NatsCluster) -> Vec<String> {
    (0..cluster.len())
        .flat_map(|i| {
            let log = std::fs::read_to_string(cluster.store_dir(i).join("server.log"))
                .unwrap_or_default();
            log.lines()
                .filter(|l| l.contains(" Violation - "))
                .map(|l| format!("node {i}: {l}"))
                .collect::<Vec<_>>()
        })
        .collect()
}

fn names(denials: &[PermissionDenial], entry: &Permission) -> bool {
    denials.iter().any(|d| {
        d.action == entry.action && d.permission.as_deref() == Some(entry.subject.as_str())
    })
}

/// Two replicas started while the meta leader is dead, until both handle work (or, when
/// `expected` entries are missing, until health named them all); the denials their health
/// showed on the way, and the violations the nodes logged.
async fn through_an_election(
    permissions: &Permissions,
    expected: &[Permission],
) -> (Vec<PermissionDenial>, Vec<String>) {
    let config = users_config(&[(SERVICE, PASSWORD, permissions)]);
    let mut cluster = NatsCluster::builder()
        .config(config)
        .probe_user("admin", "admin")
        .start()
        .await
        .expect("a 3-node cluster");
    let leader = eventually(Duration::from_secs(30), "an agreed meta leader", || {
        cluster.meta_leader()
    })
    .await;
    cluster.kill(leader);
    let urls: Vec<String> = (0..cluster.len())
        .filter(|&i| i != leader)
        .map(|i| cluster.url(i))
        .collect();

    let handled = Arc::new(AtomicU64::new(0));
    let mut replicas = Vec::new();
    for _ in 0..REPLICAS {
        let client = client_of(
            &urls.join(","),
            SERVICE,
            PASSWORD,
            Role::owner(SERVICE).inbox_prefix(),
        )
        .await;
        let runtime = fast(Runtime::builder(client))
            .topology(topology(&handled))
            .build()
            .unwrap();
        replicas.push(Running::spawn(runtime));
    }
    let denials: Vec<PermissionDenial> = Vec::new();
    // Ready after the election (or, when entries are missing, every one named meanwhile).
    let denials = std::cell::RefCell::new(denials);
    within(Duration::from_secs(45), || {
        let mut denials = denials.borrow_mut();
        collect(&replicas, &mut denials);
        let named = !expected.is_empty() && expected.iter().all(|e| names(&denials, e));
        let ready = replicas.iter().all(|r| r.health.ready());
        async move { (named || ready).then_some(()) }
    })
    .await;
    let mut denials = denials.into_inner();
    let admin = admin_of(&urls[0]).await;
    let js = async_nats::jetstream::new(admin);
    if expected.is_empty() {
        assert!(
            replicas.iter().all(|r| r.health.ready()),
            "not ready after the election: {:?}",
            replicas
                .iter()
                .map(|r| r.health.to_string())
                .collect::<Vec<_>>()
        );
        for i in 0..10 {
            // The stream's own leader may still be being elected: publish until stored.
            eventually(Duration::from_secs(15), "the message stored", || {
                let js = js.clone();
                async move {
                    match js
                        .publish("perm.elected.work", format!("w{i}").into())
                        .await
                    {
                        Ok(ack) => ack.await.ok().map(|_| ()),
                        Err(_) => None,
                    }
                }
            })
            .await;
        }
        eventually(Duration::from_secs(15), "every message handled", || {
            let n = handled.load(Ordering::Relaxed);
            async move { (n >= 10).then_some(()) }
        })
        .await;
        assert_eq!(handled.load(Ordering::Relaxed), 10, "every message handled");
    }
    collect(&replicas, &mut denials);
    for replica in replicas {
        replica.stop().await.expect("clean drain");
    }
    (denials, violations_logged(&cluster))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_wait_out_an_election_under_exactly_their_generated_permissions() {
    let permissions = export::permissions(&topology(&Arc::default()), &Role::owner(SERVICE));
    assert_eq!(
        permissions
            .entries
            .iter()
            .filter(|e| outage_only(e))
            .count(),
        // The meta leader's elections, the stream's, and publishing into the fleet channel
        // (its subscription is the inbox's).
        3,
        "{}",
        permissions.permissions_map()
    );
    let (denials, logged) = through_an_election(&permissions, &[]).await;
    assert!(denials.is_empty(), "denied: {denials:?}");
    assert!(logged.is_empty(), "the nodes logged {logged:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_what_only_an_outage_uses_health_names_each_entry() {
    let full = export::permissions(&topology(&Arc::default()), &Role::owner(SERVICE));
    let mut without = full.clone();
    without.entries.retain(|e| !outage_only(e));
    let expected: Vec<Permission> = full
        .entries
        .iter()
        .filter(|e| outage_only(e))
        .cloned()
        .collect();
    let (denials, _) = through_an_election(&without, &expected).await;
    for entry in &expected {
        let named = names(&denials, entry);
        // The fleet channel is published to only by a replica whose probes go unanswered:
        // the one that hears the other's note first may never send its own; one of the two
        // does.
        assert!(
            named,
            "{} not named in health; denials: {denials:?}",
            entry.describe()
        );
        if entry.action == Verb::Publish {
            assert!(
                denials
                    .iter()
                    .any(|d| d.to_string().contains("fleet channel"))
            );
        }
    }
}

const SYNC_SERVICE: &str = "sync_status";
const SYNC_PASSWORD: &str = "sync-pw";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_status_runs_under_exactly_its_generated_owner_permissions() {
    // `compute_status` publishes each status into the service's own `MEMBER_STATUS`: granted
    // only where declared, as its `#[queue_consumer(.., publishes = ["member.status.>"])]`
    // does.
    let role = Role::owner(SYNC_SERVICE);
    let permissions = export::permissions(&Topology::from_registry(), &role);
    let config = users_config(&[(SYNC_SERVICE, SYNC_PASSWORD, &permissions)]);
    let cluster = NatsCluster::builder()
        .config(config)
        .probe_user("admin", "admin")
        .start()
        .await
        .expect("a 3-node cluster");
    let servers = cluster.urls().join(",");

    let mut replicas = Vec::new();
    let mut statuses = Vec::new();
    for name in ["r1", "r2"] {
        let client = client_of(&servers, SYNC_SERVICE, SYNC_PASSWORD, role.inbox_prefix()).await;
        let hub = Hub::new(name);
        let (tx, rx) = mpsc::unbounded_channel();
        hub.watch(1, "alice", tx);
        statuses.push(rx);
        let runtime = Runtime::builder(client).state(hub).build().unwrap();
        let running = Running::spawn(runtime);
        if running
            .health
            .wait_ready(Duration::from_secs(30))
            .await
            .is_err()
        {
            panic!("replica {name} not ready: {}", running.health);
        }
        replicas.push(running);
    }

    // The daemon (here the admin) announces a finished sync; one replica computes the status,
    // every replica's relay receives it.
    let admin = admin_of(&cluster.url(0)).await;
    let event = SyncComplete {
        member: "alice".into(),
        requested_at_ms: sync_topology::now_ms(),
    };
    async_nats::jetstream::new(admin)
        .publish(SYNC_COMPLETE, serde_json::to_vec(&event).unwrap().into())
        .await
        .unwrap()
        .await
        .unwrap();
    for (i, rx) in statuses.iter_mut().enumerate() {
        let done = tokio::time::timeout(Duration::from_secs(20), async {
            while let Some(status) = rx.recv().await {
                if status.state == Phase::Done {
                    return status;
                }
            }
            panic!("replica {i}'s hub closed");
        })
        .await
        .unwrap_or_else(|_| panic!("replica {i} never saw alice done: {}", replicas[i].health));
        assert!(done.rows > 0, "{done:?}");
    }
    for replica in replicas {
        assert!(
            replica.health.denials().is_empty(),
            "denied: {}",
            replica.health
        );
        let health = replica.health.clone();
        replica.stop().await.expect("clean drain");
        assert!(health.denials().is_empty(), "denied: {health}");
    }
    let logged = violations_logged(&cluster);
    assert!(logged.is_empty(), "the nodes logged {logged:#?}");
}
