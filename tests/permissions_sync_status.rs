//! The `sync_status` example's topology (its two R3 streams, the queue consumer that computes
//! a member's status and publishes it into the service's own stream, the relay that gives
//! every replica every status) run by two replicas on a 3-node cluster under exactly the
//! permissions `export::permissions` generates for it: the status reaches both replicas,
//! nothing is denied, both drain.

#![cfg(unix)]

mod fixture;

#[allow(dead_code)]
#[path = "../examples/sync_status/topology.rs"]
mod topology;

use std::time::Duration;

use fixture::Running;
use nats_topology::export::{self, Role};
use nats_topology::{Runtime, Topology};
use nats_topology_testkit::NatsCluster;
use tokio::sync::mpsc;
use topology::{Hub, Phase, SYNC_COMPLETE, SyncComplete};

const SERVICE: &str = "sync_status";
const PASSWORD: &str = "sync-pw";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_status_runs_under_exactly_its_generated_owner_permissions() {
    let role = Role::owner(SERVICE);
    let permissions = export::permissions(&Topology::from_registry(), &role);
    let map = permissions.permissions_map().replace('\n', "\n      ");
    let config = format!(
        "authorization {{\n  users = [\n    {{ user: admin, password: admin }}\n    {{ user: \
         {SERVICE}, password: {PASSWORD}, permissions: {map} }}\n  ]\n}}\n"
    );
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
        let options = nats_topology::connect_options()
            .user_and_password(SERVICE.into(), PASSWORD.into())
            .custom_inbox_prefix(role.inbox_prefix());
        let client = nats_topology::connect_with(options, &servers)
            .await
            .unwrap();
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
    let admin = async_nats::ConnectOptions::new()
        .user_and_password("admin".into(), "admin".into())
        .connect(cluster.url(0))
        .await
        .unwrap();
    let event = SyncComplete {
        member: "alice".into(),
        requested_at_ms: topology::now_ms(),
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
}
