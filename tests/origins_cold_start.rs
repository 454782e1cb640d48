//! Eight replicas provisioning placed, mirrored and sourced streams on a fresh supercluster at
//! the same instant (issue 26): every one is ready, none retries past a first timeout, the
//! mirror and the aggregate then follow their origins, and a relay on the aggregate run by a
//! runtime in each cluster receives every message once.
//!
//! The test starts clusters A (three nodes) and B (one), joined by gateways, and re-runs itself
//! as separate processes (in child mode, told by an environment variable) connected to A, all
//! released at one instant.

mod fixture;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream;
use fixture::Running;
use fixture::children::{assert_all_ready_within_one_timeout, now_ms, provision_at, run_children};
use nats_topology::model::{
    BroadcastDecl, ConsumerDecl, DeliverPolicy, Origin, Placement, StreamDecl, StreamRef,
};
use nats_topology::{HandlerError, Runtime, Topology};
use nats_topology_testkit::{NatsSupercluster, eventually};

/// Set in child processes: `<url>,<url>,...|<start at, ms since the epoch>`.
const CHILD_ENV: &str = "NATS_TOPOLOGY_ORIGINS_COLD_START_CHILD";
const PROCESSES: usize = 8;

/// In cluster B, by its servers' tag.
static ORIGIN: StreamDecl =
    StreamDecl::new("CS_ORIGIN", &["cs.origin.>"]).placement(Placement::tagged(&["cluster:b"]));
/// In cluster A, three replicas.
static LOCAL: StreamDecl = StreamDecl::new("CS_LOCAL", &["cs.local.>"])
    .replicas(3)
    .placement(Placement::cluster("A"));
/// A copy of B's stream in A.
static MIRROR: StreamDecl = StreamDecl::mirror_of("CS_MIRROR", Origin::of(&ORIGIN))
    .replicas(3)
    .placement(Placement::cluster("A"));
/// Both together, in A.
static SOURCED: StreamDecl = StreamDecl::new("CS_SOURCED", &[])
    .sources(&[Origin::of(&ORIGIN), Origin::of(&LOCAL)])
    .replicas(3)
    .placement(Placement::cluster("A"));

fn topology() -> Topology {
    Topology::new()
        .stream(ORIGIN)
        .stream(LOCAL)
        .stream(MIRROR)
        .stream(SOURCED)
}

/// The subjects each relay received, every copy.
type Received = Arc<Mutex<Vec<String>>>;

/// [`topology`] with a relay on the aggregate (both of its origins' subjects, from the start)
/// recording what it receives.
fn relaying(received: Received) -> Topology {
    static SUBJECTS: [&str; 2] = ["cs.origin.>", "cs.local.>"];
    let relay = ConsumerDecl::broadcast(
        "tests::on_aggregate",
        StreamRef::Declared(&SOURCED),
        BroadcastDecl::new().deliver(DeliverPolicy::All),
    )
    .subjects(&SUBJECTS);
    topology().consumer(relay, move |incoming| {
        received
            .lock()
            .unwrap()
            .push(incoming.context().subject().to_string());
        Box::pin(async { Ok::<(), HandlerError>(()) })
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_processes_cold_start_placed_mirrored_and_sourced_streams() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        let (urls, start_at) = spec.split_once('|').unwrap();
        provision_at(urls, start_at.parse().unwrap(), topology()).await;
        return;
    }
    let sc = NatsSupercluster::start(&[3, 1])
        .await
        .expect("supercluster");
    let urls: Vec<String> = sc.nodes_of(0).into_iter().map(|i| sc.url(i)).collect();
    let urls = urls.join(",");
    let start_at = now_ms() + 1_500;
    let results = run_children(
        "eight_processes_cold_start_placed_mirrored_and_sourced_streams",
        CHILD_ENV,
        &format!("{urls}|{start_at}"),
        PROCESSES,
    )
    .await;
    eprintln!("{results:?}");
    assert_all_ready_within_one_timeout(&results, PROCESSES);

    // Where each lives, and the mirror and the aggregate follow their origins.
    let client = async_nats::connect(sc.server_addrs(0))
        .await
        .expect("connect to A");
    let js = jetstream::new(client);
    for (name, cluster) in [
        ("CS_ORIGIN", "B"),
        ("CS_LOCAL", "A"),
        ("CS_MIRROR", "A"),
        ("CS_SOURCED", "A"),
    ] {
        let mut stream = js.get_stream(name).await.expect("the stream exists");
        let info = stream.info().await.expect("its info");
        let lives = info.cluster.as_ref().and_then(|c| c.name.clone());
        assert_eq!(lives.as_deref(), Some(cluster), "stream {name}");
    }
    for i in 0..10 {
        js.publish(format!("cs.origin.{i}"), "o".into())
            .await
            .unwrap()
            .await
            .expect("stored in B");
    }
    for i in 0..5 {
        js.publish(format!("cs.local.{i}"), "l".into())
            .await
            .unwrap()
            .await
            .expect("stored in A");
    }
    // A relay on the aggregate in each cluster: a runtime connected to A, another to B.
    let mut relays = Vec::new();
    for cluster in [0, 1] {
        let received = Received::default();
        let client = async_nats::connect(sc.server_addrs(cluster))
            .await
            .expect("connect");
        let builder = Runtime::builder(client).topology(relaying(received.clone()));
        relays.push((received, Running::start(builder).await));
    }
    for (name, expected) in [("CS_MIRROR", 10), ("CS_SOURCED", 15)] {
        eventually(Duration::from_secs(30), name, || {
            let js = js.clone();
            async move {
                let mut stream = js.get_stream(name).await.ok()?;
                let held = stream.info().await.ok()?.state.messages;
                (held == expected).then_some(())
            }
        })
        .await;
    }
    let every: BTreeSet<String> = (0..10)
        .map(|i| format!("cs.origin.{i}"))
        .chain((0..5).map(|i| format!("cs.local.{i}")))
        .collect();
    for (cluster, (received, running)) in relays.into_iter().enumerate() {
        eventually(
            Duration::from_secs(30),
            "the relay to receive all 15",
            || {
                let n = received.lock().unwrap().len();
                async move { (n >= 15).then_some(()) }
            },
        )
        .await;
        let health = running.health.clone();
        running.stop().await.expect("a clean drain");
        let received = received.lock().unwrap().clone();
        let distinct: BTreeSet<String> = received.iter().cloned().collect();
        assert_eq!(distinct, every, "cluster {cluster}'s relay");
        assert_eq!(
            received.len(),
            15,
            "each once in cluster {cluster}: {received:?}"
        );
        assert_eq!(health.consumers()[0].handled, 15, "cluster {cluster}");
    }
}
