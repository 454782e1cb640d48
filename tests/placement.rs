//! Placement on a supercluster (clusters A of three nodes and B of one, joined by gateways):
//! a stream declared by a runtime connected to A with `placement` naming cluster B's tag is
//! created in B; declared again placed in A, `plan` says the placement changes and that the
//! stream moves, provisioning moves it, and no message is lost on the way. An edge site (a
//! leaf node in its own JetStream domain) hanging off a supercluster declares and consumes a
//! stream placed in cluster B through the supercluster's domain.

mod fixture;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream;
use fixture::Running;
use nats_topology::model::{ConsumerDecl, Placement, QueueDecl, StreamDecl, StreamRef};
use nats_topology::report::Action;
use nats_topology::{HandlerError, Runtime, Topology};
use nats_topology_testkit::{HUB_DOMAIN, NatsSupercluster, eventually};

static IN_B: StreamDecl =
    StreamDecl::new("PLACED", &["placed.>"]).placement(Placement::tagged(&["cluster:b"]));
static IN_A: StreamDecl =
    StreamDecl::new("PLACED", &["placed.>"]).placement(Placement::cluster("A"));

fn runtime(client: async_nats::Client, decl: &'static StreamDecl) -> Runtime {
    Runtime::builder(client)
        .topology(Topology::new().stream(*decl))
        .build()
        .expect("a valid topology")
}

/// The cluster the server says the stream lives in, and its message count.
async fn where_it_lives(js: &jetstream::Context) -> Option<(String, u64)> {
    let mut stream = js.get_stream("PLACED").await.ok()?;
    let info = stream.info().await.ok()?;
    let cluster = info.cluster.as_ref()?;
    // During a move the leader may not be known yet.
    cluster.leader.as_ref()?;
    Some((cluster.name.clone()?, info.state.messages))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_placed_by_tag_lives_there_and_a_changed_placement_moves_it() {
    let sc = NatsSupercluster::start(&[3, 1])
        .await
        .expect("supercluster");
    let client = async_nats::connect(sc.server_addrs(0))
        .await
        .expect("connect to cluster A");
    let js = jetstream::new(client.clone());

    let placed_in_b = runtime(client.clone(), &IN_B);
    let plan = placed_in_b.plan().await.expect("plan");
    assert!(
        matches!(plan.items[0].action, Action::Create),
        "{}",
        plan.items[0].action
    );
    placed_in_b.provision().await.expect("provisioned");
    assert_eq!(
        where_it_lives(&js).await,
        Some(("B".to_owned(), 0)),
        "created in the cluster whose servers carry the tag"
    );
    // `inspect` says where it lives: cluster B, its leader there.
    let inspection = placed_in_b.inspect().await.expect("inspect");
    let lives = inspection.streams[0]
        .server
        .clone()
        .expect("the stream exists");
    assert_eq!(lives.cluster.as_deref(), Some("B"), "{inspection}");
    assert!(lives.leader.is_some(), "{inspection}");
    assert!(
        inspection
            .to_string()
            .contains("stream `PLACED`: 0 messages; cluster `B`, leader `"),
        "{inspection}"
    );
    for i in 0..20 {
        js.publish(format!("placed.{i}"), "x".into())
            .await
            .expect("publish")
            .await
            .expect("stored");
    }

    // Declared again, placed in A: the plan names the change and the move, and provisioning
    // applies it.
    let placed_in_a = runtime(client.clone(), &IN_A);
    let plan = placed_in_a.plan().await.expect("plan");
    let Action::Update(fields) = &plan.items[0].action else {
        panic!("expected an update, got {}", plan.items[0].action);
    };
    let placement = fields
        .iter()
        .find(|f| f.field == "placement")
        .expect("the placement differs");
    assert!(
        placement.declared.contains("\"A\"") && placement.declared.contains("moves"),
        "{placement}"
    );
    placed_in_a.provision().await.expect("provisioned");
    eventually(Duration::from_secs(60), "the stream to move to A", || {
        let js = js.clone();
        async move { (where_it_lives(&js).await == Some(("A".to_owned(), 20))).then_some(()) }
    })
    .await;
    let inspection = placed_in_a.inspect().await.expect("inspect");
    let lives = inspection.streams[0]
        .server
        .clone()
        .expect("the stream exists");
    assert_eq!(
        (lives.cluster.as_deref(), lives.messages),
        (Some("A"), 20),
        "{inspection}"
    );
    let plan = placed_in_a.plan().await.expect("plan");
    assert!(
        matches!(plan.items[0].action, Action::Nothing),
        "nothing left to do once moved: {}",
        plan.items[0].action
    );
}

static AT_EDGE: StreamDecl = StreamDecl::new("EDGE_READINGS", &["edge.readings.>"])
    .placement(Placement::tagged(&["cluster:b"]));

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edge_site_off_the_supercluster_consumes_a_stream_placed_in_b() {
    let sc = NatsSupercluster::start_with_leaf(&[1, 1])
        .await
        .expect("supercluster with a leaf node");
    let edge = async_nats::connect(sc.leaf_url())
        .await
        .expect("connect to the leaf node");
    // Every count of each reading handled, by payload.
    let handled: Arc<Mutex<BTreeMap<String, u32>>> = Arc::default();
    let seen = handled.clone();
    let consumer = ConsumerDecl::queue(
        "tests::on_reading",
        StreamRef::Declared(&AT_EDGE),
        QueueDecl::new("readings"),
    );
    let topology = Topology::new()
        .stream(AT_EDGE)
        .consumer(consumer, move |incoming| {
            let reading = String::from_utf8_lossy(incoming.payload()).into_owned();
            *seen.lock().unwrap().entry(reading).or_default() += 1;
            Box::pin(async { Ok::<(), HandlerError>(()) })
        });
    let running = Running::start(
        Runtime::builder(edge.clone())
            .domain(HUB_DOMAIN)
            .topology(topology),
    )
    .await;

    // Published at the edge, stored in B through the hub's domain.
    let hub_js = jetstream::with_domain(edge, HUB_DOMAIN);
    for i in 0..50 {
        hub_js
            .publish(format!("edge.readings.{i}"), format!("r{i}").into())
            .await
            .expect("publish")
            .await
            .expect("stored in the supercluster");
    }
    let in_a = async_nats::connect(sc.server_addrs(0))
        .await
        .expect("connect to A");
    let mut stream = jetstream::new(in_a)
        .get_stream("EDGE_READINGS")
        .await
        .expect("the stream exists in the supercluster");
    let info = stream.info().await.expect("its info");
    assert_eq!(
        info.cluster.as_ref().and_then(|c| c.name.as_deref()),
        Some("B"),
        "placed in B by the edge runtime's declaration"
    );
    eventually(Duration::from_secs(30), "50 readings handled", || {
        let n = handled.lock().unwrap().len();
        async move { (n >= 50).then_some(()) }
    })
    .await;
    running.stop().await.expect("a clean drain");
    let handled = handled.lock().unwrap().clone();
    assert_eq!(handled.len(), 50, "every reading");
    assert!(handled.values().all(|&n| n == 1), "each once: {handled:?}");
}
