//! Mirrors and sources declared on streams, provisioned and consumed through the runtime:
//! - on one server: a mirror of a stream, with a queue consumer in two instances on the mirror,
//!   handles every message once; the mirror declared again with another origin is a precise
//!   conflict naming the stream and the field; a stream sourcing from two others, with a relay
//!   in two instances: every relay receives every message once; a source removed from the
//!   declaration is an editable change, planned and applied;
//! - exported (no server): the NATS JSON carries the mirror and the sources as the server takes
//!   them, the AsyncAPI document names them and has an operation for a handler reading a whole
//!   mirror;
//! - across JetStream domains (a hub and an edge leaf node): a mirror at the edge of the hub's
//!   stream, its origin named with `domain`, and a queue consumer on it at the edge;
//! - on a supercluster of two one-node clusters joined by gateways: a mirror in A of a stream
//!   in B follows it; the gateway stalled while B keeps storing, then healed: the mirror catches
//!   up and the queue consumer on it handles every message once.

mod fixture;

use std::time::Duration;

use async_nats::jetstream;
use fixture::{Fixture, Ledger, Running};
use nats_topology::export::{self, ApiInfo};
use nats_topology::model::{ConsumerDecl, Origin, Placement, QueueDecl, StreamDecl, StreamRef};
use nats_topology::report::Action;
use nats_topology::{ProvisionErrorKind, Runtime, Topology};
use nats_topology_testkit::{NatsLeafTopology, NatsSupercluster, eventually};

static ORDERS: StreamDecl = StreamDecl::new("M_ORDERS", &["m.orders.>"]);
static COPY: StreamDecl = StreamDecl::mirror_of("M_COPY", Origin::of(&ORDERS));
/// The same mirror, declared later with a filter: another origin.
static COPY_EU: StreamDecl =
    StreamDecl::mirror_of("M_COPY", Origin::of(&ORDERS).filter("m.orders.eu.>"));

static EU: StreamDecl = StreamDecl::new("S_EU", &["s.eu.>"]);
static US: StreamDecl = StreamDecl::new("S_US", &["s.us.>"]);
static ALL: StreamDecl = StreamDecl::sourced("S_ALL", &[Origin::of(&EU), Origin::named("S_US")]);
static ALL_BUT_US: StreamDecl = StreamDecl::sourced("S_ALL", &[Origin::of(&EU)]);

/// A queue consumer on `mirror` (of `origin`), handled into `ledger`.
fn mirror_workers(
    origin: &StreamDecl,
    mirror: &StreamDecl,
    subject: &str,
    ledger: &Ledger,
) -> Topology {
    let queue = fixture::queue(
        "tests::ship_order",
        mirror,
        subject,
        QueueDecl::new("shipping"),
    );
    Topology::new()
        .stream(*origin)
        .stream(*mirror)
        .consumer(queue, fixture::job_handler(ledger.clone(), Duration::ZERO))
}

fn sourced_relay(ledger: &Ledger) -> Topology {
    // Both origins' subjects: a filter wider than what the stream holds (`s.>`) is refused.
    let relay =
        fixture::relay("tests::ledger_entry", &ALL, "s.eu.>").subjects(&["s.eu.>", "s.us.>"]);
    Topology::new()
        .stream(EU)
        .stream(US)
        .stream(ALL)
        .consumer(relay, fixture::job_handler(ledger.clone(), Duration::ZERO))
}

async fn start(client: async_nats::Client, topology: Topology) -> Running {
    let runtime = fixture::fast(Runtime::builder(client))
        .topology(topology)
        .build()
        .expect("a valid topology");
    let running = Running::spawn(runtime);
    running.ready(Duration::from_secs(60)).await;
    running
}

async fn messages(js: &jetstream::Context, name: &str) -> Option<u64> {
    let mut stream = js.get_stream(name).await.ok()?;
    Some(stream.info().await.ok()?.state.messages)
}

async fn config(js: &jetstream::Context, name: &str) -> jetstream::stream::Config {
    js.get_stream(name)
        .await
        .unwrap_or_else(|e| panic!("stream {name} exists: {e}"))
        .info()
        .await
        .expect("its info")
        .config
        .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mirrors_and_sources_on_one_server() {
    let fixture = Fixture::start().await;
    let js = fixture.jetstream().await;

    // Two instances share the queue consumer on the mirror.
    let ledger = Ledger::default();
    let workers = vec![
        start(
            fixture.connect().await,
            mirror_workers(&ORDERS, &COPY, "m.orders.>", &ledger),
        )
        .await,
        start(
            fixture.connect().await,
            mirror_workers(&ORDERS, &COPY, "m.orders.>", &ledger),
        )
        .await,
    ];
    let copy = config(&js, "M_COPY").await;
    assert_eq!(
        copy.mirror.as_ref().map(|m| m.name.as_str()),
        Some("M_ORDERS")
    );
    assert!(copy.subjects.is_empty(), "a mirror has no subjects");
    fixture::publish_jobs(&js, "m.orders.eu.paid", 0..100).await;
    ledger.wait_covers(0..100, Duration::from_secs(30)).await;
    for result in Running::stop_all(workers).await {
        result.expect("clean drain");
    }
    ledger.assert_handled_once(100);
    assert_eq!(messages(&js, "M_COPY").await, Some(100));

    // Declared again with a filter: a mirror's origin cannot change in place.
    let changed = fixture::fast(fixture.builder().await)
        .topology(Topology::new().stream(ORDERS).stream(COPY_EU))
        .build()
        .expect("a valid topology");
    let plan = changed.plan().await.expect("plan");
    let item = plan
        .items
        .iter()
        .find(|i| i.stream == "M_COPY")
        .expect("the mirror is planned");
    assert!(
        matches!(&item.action, Action::Conflict(fields) if fields[0].field == "mirror"),
        "{}",
        item.action
    );
    let error = changed.provision().await.expect_err("a conflict");
    assert_eq!(error.kind(), ProvisionErrorKind::Conflict, "{error}");
    assert_eq!(error.stream(), "M_COPY");
    let diff = &error.field_diffs()[0];
    assert_eq!((diff.field, diff.server.as_str()), ("mirror", "M_ORDERS"));
    assert!(
        diff.declared
            .starts_with("M_ORDERS filter m.orders.eu.> (a mirror's origin is fixed")
            && diff.declared.contains("delete the stream `M_COPY`"),
        "{error}"
    );
    println!("drift error: {error}");
    assert_eq!(
        config(&js, "M_COPY").await.mirror.map(|m| m.filter_subject),
        Some(None)
    );

    // A relay in each of two instances on a stream sourcing from two others.
    let ledgers = [Ledger::default(), Ledger::default()];
    let relays = vec![
        start(fixture.connect().await, sourced_relay(&ledgers[0])).await,
        start(fixture.connect().await, sourced_relay(&ledgers[1])).await,
    ];
    for running in &relays {
        eventually(Duration::from_secs(30), "the relay to run", || {
            let running = running
                .health
                .consumers()
                .iter()
                .all(|c| c.state == nats_topology::ConsumerState::Running);
            async move { running.then_some(()) }
        })
        .await;
    }
    fixture::publish_jobs(&js, "s.eu.sold", 0..20).await;
    fixture::publish_jobs(&js, "s.us.sold", 20..40).await;
    for ledger in &ledgers {
        ledger.wait_covers(0..40, Duration::from_secs(30)).await;
    }
    for result in Running::stop_all(relays).await {
        result.expect("clean drain");
    }
    for (i, ledger) in ledgers.iter().enumerate() {
        assert_eq!(ledger.unique().len(), 40, "relay {i}");
        assert!(ledger.duplicates().is_empty(), "relay {i}: each once");
    }

    // One source fewer: editable, planned as an update of `sources`, applied.
    let fewer = fixture::fast(fixture.builder().await)
        .topology(Topology::new().stream(EU).stream(ALL_BUT_US))
        .build()
        .expect("a valid topology");
    let plan = fewer.plan().await.expect("plan");
    let item = plan
        .items
        .iter()
        .find(|i| i.stream == "S_ALL")
        .expect("the aggregate is planned");
    let Action::Update(fields) = &item.action else {
        panic!("expected an update, got {}", item.action);
    };
    assert_eq!(fields[0].field, "sources");
    assert_eq!(
        (fields[0].server.as_str(), fields[0].declared.as_str()),
        ("[S_EU, S_US]", "[S_EU]")
    );
    fewer.provision().await.expect("provisioned");
    let names: Vec<String> = config(&js, "S_ALL")
        .await
        .sources
        .into_iter()
        .flatten()
        .map(|s| s.name)
        .collect();
    assert_eq!(names, ["S_EU"]);
}

#[test]
fn exports_carry_mirrors_and_sources() {
    static EU_ONLY: StreamDecl = StreamDecl::mirror_of(
        "M_EU",
        Origin::of(&ORDERS).filter("m.orders.eu.>").domain("hub"),
    );
    let whole = ConsumerDecl::queue(
        "tests::audit",
        StreamRef::Named("M_COPY"),
        QueueDecl::new("audit"),
    );
    let topology = Topology::new()
        .stream(ORDERS)
        .stream(COPY)
        .stream(EU_ONLY)
        .stream(EU)
        .stream(US)
        .stream(ALL)
        .consumer(
            whole,
            fixture::job_handler(Ledger::default(), Duration::ZERO),
        );

    let json = export::nats_json(&topology);
    let config = |name: &str| {
        let stream = json
            .streams
            .iter()
            .find(|s| s.config.name == name)
            .expect(name);
        serde_json::to_value(&stream.config).expect("serializes")
    };
    assert_eq!(config("M_COPY")["mirror"]["name"], "M_ORDERS");
    assert_eq!(config("M_EU")["mirror"]["filter_subject"], "m.orders.eu.>");
    assert_eq!(config("M_EU")["mirror"]["external"]["api"], "$JS.hub.API");
    assert!(
        config("M_EU")["subjects"]
            .as_array()
            .is_none_or(Vec::is_empty)
    );
    let all = config("S_ALL");
    let sources: Vec<&str> = all["sources"]
        .as_array()
        .expect("sources")
        .iter()
        .map(|s| s["name"].as_str().expect("a name"))
        .collect();
    assert_eq!(sources, ["S_EU", "S_US"]);

    let doc = export::asyncapi(&topology, &ApiInfo::new("mirrors", "1.0.0"));
    let doc = doc.as_value();
    let operation = &doc["operations"]["tests.audit"];
    assert_eq!(operation["x-nats-consumer"]["stream"], "M_COPY");
    let channel = operation["channel"]["$ref"]
        .as_str()
        .expect("a channel")
        .trim_start_matches("#/channels/");
    let channel = &doc["channels"][channel];
    assert_eq!(channel["x-nats-stream"]["mirror"], "M_ORDERS");
    assert_eq!(
        channel["description"],
        "Every message of stream `M_COPY`: a mirror of `M_ORDERS`."
    );
}

static IN_B: StreamDecl =
    StreamDecl::new("X_ORDERS", &["x.orders.>"]).placement(Placement::tagged(&["cluster:b"]));
static MIRROR_IN_A: StreamDecl =
    StreamDecl::mirror_of("X_ORDERS_A", Origin::of(&IN_B)).placement(Placement::cluster("A"));

/// How long the gateway stays stalled.
const STALL: Duration = Duration::from_secs(12);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mirror_in_another_cluster_catches_up_after_a_stalled_gateway() {
    let sc = NatsSupercluster::start(&[1, 1])
        .await
        .expect("supercluster");
    let in_a = async_nats::connect(sc.server_addrs(0))
        .await
        .expect("connect to A");
    let in_b = async_nats::connect(sc.server_addrs(1))
        .await
        .expect("connect to B");
    let (js_a, js_b) = (jetstream::new(in_a.clone()), jetstream::new(in_b.clone()));

    // Two instances in cluster A share the queue consumer on the mirror.
    let ledger = Ledger::default();
    let workers = vec![
        start(
            in_a.clone(),
            mirror_workers(&IN_B, &MIRROR_IN_A, "x.orders.>", &ledger),
        )
        .await,
        start(
            in_a.clone(),
            mirror_workers(&IN_B, &MIRROR_IN_A, "x.orders.>", &ledger),
        )
        .await,
    ];
    let cluster = |js: jetstream::Context, name: &'static str| async move {
        let mut stream = js.get_stream(name).await.expect("the stream exists");
        let info = stream.info().await.expect("its info");
        info.cluster.as_ref().and_then(|c| c.name.clone())
    };
    assert_eq!(
        cluster(js_a.clone(), "X_ORDERS").await.as_deref(),
        Some("B")
    );
    assert_eq!(
        cluster(js_a.clone(), "X_ORDERS_A").await.as_deref(),
        Some("A")
    );

    fixture::publish_jobs(&js_b, "x.orders.eu.paid", 0..100).await;
    ledger.wait_covers(0..100, Duration::from_secs(60)).await;

    // The gateway stalls: B keeps storing, A cannot follow; healed, the mirror catches up and
    // the consumer on it handles what it missed.
    sc.stall_gateways();
    fixture::publish_jobs(&js_b, "x.orders.us.paid", 100..200).await;
    assert_eq!(messages(&js_b, "X_ORDERS").await, Some(200));
    // The fault lasts past the mirror's own stall detection (its internal consumer's
    // heartbeats go missing for several seconds, and the server recreates that consumer):
    // the length of the fault, not a wait for something to happen.
    tokio::time::sleep(STALL).await;
    let stalled_at = messages(&js_a, "X_ORDERS_A").await;
    println!("the mirror held {stalled_at:?} of 200 after a stall of {STALL:?}");
    assert_eq!(stalled_at, Some(100), "nothing crosses a stalled gateway");
    sc.heal();
    let healed = std::time::Instant::now();
    eventually(
        Duration::from_secs(90),
        "the mirror to catch up",
        || async { (messages(&js_a, "X_ORDERS_A").await == Some(200)).then_some(()) },
    )
    .await;
    println!("the mirror caught up {:?} after the heal", healed.elapsed());
    ledger.wait_covers(0..200, Duration::from_secs(60)).await;
    for result in Running::stop_all(workers).await {
        result.expect("clean drain");
    }
    ledger.assert_handled_once(200);
}

static HUB_ORDERS: StreamDecl = StreamDecl::new("H_ORDERS", &["h.orders.>"]);
/// Declared by a service connected to the edge: its origin is in the hub's domain.
static EDGE_COPY: StreamDecl =
    StreamDecl::mirror_of("E_COPY", Origin::named("H_ORDERS").domain("hub"));

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mirror_at_the_edge_of_a_stream_in_the_hub_domain() {
    let servers = NatsLeafTopology::start()
        .await
        .expect("a hub and a leaf node start and connect");
    assert_eq!(servers.hub_domain(), "hub");
    let hub = async_nats::connect(servers.hub_url())
        .await
        .expect("connect to the hub");
    let edge = async_nats::connect(servers.leaf_url())
        .await
        .expect("connect to the edge");
    let (js_hub, js_edge) = (jetstream::new(hub.clone()), jetstream::new(edge.clone()));

    // The hub's service owns the origin; the edge's service mirrors it and consumes the copy.
    fixture::fast(Runtime::builder(hub.clone()))
        .topology(Topology::new().stream(HUB_ORDERS))
        .build()
        .expect("a valid topology")
        .provision()
        .await
        .expect("provisioned in the hub");
    let ledger = Ledger::default();
    let queue = fixture::queue(
        "tests::ship_at_edge",
        &EDGE_COPY,
        "h.orders.>",
        QueueDecl::new("edge"),
    );
    let topology = Topology::new()
        .stream(EDGE_COPY)
        .consumer(queue, fixture::job_handler(ledger.clone(), Duration::ZERO));
    let worker = start(edge.clone(), topology).await;
    let copy = config(&js_edge, "E_COPY").await;
    let mirror = copy.mirror.expect("a mirror");
    assert_eq!(mirror.name, "H_ORDERS");
    assert_eq!(
        mirror.external.map(|e| e.api_prefix).as_deref(),
        Some("$JS.hub.API")
    );

    fixture::publish_jobs(&js_hub, "h.orders.placed", 0..50).await;
    ledger.wait_covers(0..50, Duration::from_secs(30)).await;
    worker.stop().await.expect("clean drain");
    ledger.assert_handled_once(50);
    assert_eq!(messages(&js_edge, "E_COPY").await, Some(50));
}
