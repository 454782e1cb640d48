//! JetStream domains across a leaf node connection: a hub server (domain `hub`) and an edge
//! site's leaf node server (domain `edge`), from the test kit's [`NatsLeafTopology`].
//!
//! A service connected to the hub declares its stream and queue consumer in the `edge` domain
//! (`RuntimeBuilder::domain("edge")`): provisioning creates them on the leaf node's JetStream,
//! messages published at the edge are handled once by runtimes on the hub, and `plan` and
//! `inspect` read through the domain. Beside it: a domain nobody answers for is an error that
//! names the domain, a domain and a prefix together are refused, an API prefix reaches the
//! same JetStream as its domain, and a runtime on the leaf reaches the hub's domain.

mod fixture;

use std::time::Duration;

use async_nats::jetstream;
use fixture::{Ledger, Running, fast, fast_retry, job_topology, publish_jobs, settled, stream};
use nats_topology::model::{ConsumerDecl, QueueDecl, StreamDecl};
use nats_topology::report::Action;
use nats_topology::{ProvisionErrorKind, RetryPolicy, Runtime, Topology};
use nats_topology_testkit::{NatsLeafTopology, eventually};

/// The leaf node and hub of the test's own.
async fn servers() -> NatsLeafTopology {
    fixture::trace();
    NatsLeafTopology::start()
        .await
        .expect("a hub and a leaf node start and connect")
}

async fn connect(url: String) -> async_nats::Client {
    async_nats::connect(url).await.expect("connect")
}

/// A one-queue-consumer topology on `name`, subjects `<prefix>.>`, consuming
/// `<prefix>.created`.
fn jobs(name: &str, prefix: &str, ledger: &Ledger) -> (Topology, StreamDecl, &'static str) {
    let decl = stream(name, &[&format!("{prefix}.>")]);
    let subject = fixture::leak(format!("{prefix}.created"));
    let consumer: ConsumerDecl = fixture::queue(
        &format!("leaf::on_{prefix}"),
        &decl,
        subject,
        QueueDecl::new("workers"),
    )
    .concurrency(8);
    (
        job_topology(decl, consumer, ledger.clone(), Duration::ZERO),
        decl,
        subject,
    )
}

/// Whether `js` (a context on one server's own JetStream) holds the stream `name`.
async fn has_stream(js: &jetstream::Context, name: &str) -> bool {
    match js.get_stream_no_info(name).await {
        Ok(stream) => stream.get_info().await.is_ok(),
        Err(_) => false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaf_hub_runtime_provisions_in_the_edge_domain_and_plan_and_inspect_read_through_it() {
    let servers = servers().await;
    let ledger = Ledger::default();
    let (topology, decl, _) = jobs("LEAF_PROV", "leafprov", &ledger);
    let runtime = fast(Runtime::builder(connect(servers.hub_url()).await).domain("edge"))
        .topology(topology)
        .build()
        .expect("valid");

    // Before: the plan, read through the domain, creates both.
    let plan = runtime
        .plan()
        .await
        .expect("a plan read through the domain");
    assert_eq!(plan.items.len(), 2, "{plan}");
    assert!(
        plan.items.iter().all(|i| i.action == Action::Create),
        "{plan}"
    );

    runtime
        .provision()
        .await
        .expect("provisioned in the edge domain");

    // On the leaf node's own JetStream (a client of the leaf, no domain): both exist.
    let edge = jetstream::new(connect(servers.leaf_url()).await);
    assert!(
        has_stream(&edge, decl.name).await,
        "the stream is on the leaf"
    );
    let info = fixture::consumer_info(&edge, decl.name, "workers")
        .await
        .expect("the queue consumer is on the leaf");
    assert_eq!(info.config.durable_name.as_deref(), Some("workers"));
    // And not on the hub's.
    let hub = jetstream::new(connect(servers.hub_url()).await);
    assert!(
        !has_stream(&hub, decl.name).await,
        "the hub's own JetStream holds no such stream"
    );

    // After: nothing to do, and inspect sees the consumer through the domain.
    let plan = runtime
        .plan()
        .await
        .expect("a plan read through the domain");
    assert!(
        plan.items.iter().all(|i| i.action == Action::Nothing),
        "{plan}"
    );
    let inspection = runtime.inspect().await.expect("inspect through the domain");
    assert_eq!(inspection.consumers.len(), 1, "{inspection}");
    let server = inspection.consumers[0]
        .server
        .as_ref()
        .unwrap_or_else(|| panic!("the consumer exists: {inspection}"));
    assert_eq!(server.shape, "pull", "{inspection}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaf_jobs_published_at_the_edge_are_handled_once_by_two_runtimes_on_the_hub() {
    const JOBS: u64 = 300;
    let servers = servers().await;
    let ledgers = [Ledger::default(), Ledger::default()];
    let mut runs = Vec::new();
    let mut names = None;
    for ledger in &ledgers {
        let (topology, decl, subject) = jobs("LEAF_WORK", "leafwork", ledger);
        names = Some((decl.name, subject));
        let builder = Runtime::builder(connect(servers.hub_url()).await).domain("edge");
        runs.push(Running::start(fast(builder).topology(topology)).await);
    }
    let (name, subject) = names.expect("two runtimes");

    // Published at the edge, into the leaf node's own JetStream.
    let edge = jetstream::new(connect(servers.leaf_url()).await);
    publish_jobs(&edge, subject, 0..JOBS).await;
    eventually(Duration::from_secs(60), "every job handled", || {
        let total: usize = ledgers.iter().map(Ledger::len).sum();
        async move { (total >= JOBS as usize).then_some(()) }
    })
    .await;
    for outcome in Running::stop_all(runs).await {
        outcome.expect("a clean drain");
    }

    let all: Vec<u64> = ledgers.iter().flat_map(Ledger::ids).collect();
    let unique = fixture::union(&ledgers);
    assert_eq!(unique, (0..JOBS).collect(), "every job is handled");
    assert_eq!(all.len(), unique.len(), "no job is handled twice");
    // The acknowledgements crossed back: nothing pending or unacknowledged on the leaf.
    settled(&edge, name, "workers", Duration::from_secs(10)).await;
    eprintln!(
        "split of {JOBS} jobs: {:?}",
        ledgers.iter().map(Ledger::len).collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaf_wrong_domain_is_an_error_naming_the_domain_not_a_hang() {
    let servers = servers().await;
    let ledger = Ledger::default();
    let (topology, decl, _) = jobs("LEAF_NOWHERE", "leafnowhere", &ledger);
    let retry = RetryPolicy {
        deadline: Duration::from_secs(2),
        ..fast_retry()
    };
    let runtime = Runtime::builder(connect(servers.hub_url()).await)
        .domain("edgy")
        .retry(retry)
        .topology(topology)
        .build()
        .expect("valid");

    let error = tokio::time::timeout(Duration::from_secs(20), runtime.provision())
        .await
        .expect("provisioning gives up at its deadline, it does not hang")
        .expect_err("no JetStream answers for domain `edgy`");
    eprintln!("provisioning in a wrong domain: {error}");
    assert_eq!(error.kind(), ProvisionErrorKind::Exhausted, "{error}");
    assert_eq!(error.stream(), decl.name);
    let text = error.to_string();
    assert!(text.contains("JetStream domain `edgy`"), "{text}");
    assert!(text.contains("$JS.edgy.API"), "{text}");
    assert!(text.contains("check the domain name"), "{text}");

    // The reads of `plan` say the same.
    let error = tokio::time::timeout(Duration::from_secs(20), runtime.plan())
        .await
        .expect("plan gives up at its deadline")
        .expect_err("no JetStream answers for domain `edgy`");
    assert!(error.to_string().contains("`edgy`"), "{error}");
    // Nothing was created in either real domain.
    for url in [servers.hub_url(), servers.leaf_url()] {
        let js = jetstream::new(connect(url).await);
        assert!(!has_stream(&js, decl.name).await);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaf_domain_and_api_prefix_together_are_refused_at_build() {
    // No server is needed to build; a client that never connects will do.
    let client = async_nats::ConnectOptions::new()
        .retry_on_initial_connect()
        .connect("nats://127.0.0.1:1")
        .await
        .expect("a client that retries in the background");
    let error = Runtime::builder(client.clone())
        .domain("edge")
        .api_prefix("$JS.edge.API")
        .topology(Topology::new())
        .build()
        .err()
        .expect("a domain and a prefix are refused together");
    let text = error.to_string();
    assert!(text.contains("`domain` and `api_prefix`"), "{text}");
    assert!(text.contains("set only one"), "{text}");

    for (builder, name) in [
        (
            Runtime::builder(client.clone()).domain("edge.site"),
            "edge.site",
        ),
        (Runtime::builder(client.clone()).domain(""), ""),
        (
            Runtime::builder(client.clone()).api_prefix("$JS.*.API"),
            "$JS.*.API",
        ),
    ] {
        let error = builder
            .topology(Topology::new())
            .build()
            .err()
            .expect("refused");
        assert!(error.to_string().contains(&format!("`{name}`")), "{error}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaf_api_prefix_reaches_the_edge_like_its_domain() {
    let servers = servers().await;
    let ledger = Ledger::default();
    let (topology, decl, subject) = jobs("LEAF_PREFIX", "leafprefix", &ledger);
    let builder = Runtime::builder(connect(servers.hub_url()).await).api_prefix("$JS.edge.API");
    let running = Running::start(fast(builder).topology(topology)).await;

    let edge = jetstream::new(connect(servers.leaf_url()).await);
    assert!(
        has_stream(&edge, decl.name).await,
        "the stream is on the leaf"
    );
    publish_jobs(&edge, subject, 0..20).await;
    ledger.wait_covers(0..20, Duration::from_secs(30)).await;
    running.stop().await.expect("a clean drain");
    ledger.assert_handled_once(20);
    settled(&edge, decl.name, "workers", Duration::from_secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaf_runtime_on_the_edge_consumes_in_the_hub_domain_and_in_its_own() {
    let servers = servers().await;
    let hub_js = jetstream::new(connect(servers.hub_url()).await);
    let edge_js = jetstream::new(connect(servers.leaf_url()).await);

    // From the leaf, into the hub's domain.
    let up = Ledger::default();
    let (topology, up_decl, up_subject) = jobs("LEAF_UP", "leafup", &up);
    let builder = Runtime::builder(connect(servers.leaf_url()).await).domain("hub");
    let to_hub = Running::start(fast(builder).topology(topology)).await;
    // From the leaf, in its own domain (no domain set).
    let local = Ledger::default();
    let (topology, local_decl, local_subject) = jobs("LEAF_LOCAL", "leaflocal", &local);
    let builder = Runtime::builder(connect(servers.leaf_url()).await);
    let at_edge = Running::start(fast(builder).topology(topology)).await;

    assert!(has_stream(&hub_js, up_decl.name).await, "on the hub");
    assert!(!has_stream(&edge_js, up_decl.name).await, "not on the leaf");
    assert!(has_stream(&edge_js, local_decl.name).await, "on the leaf");
    assert!(
        !has_stream(&hub_js, local_decl.name).await,
        "not on the hub"
    );

    publish_jobs(&hub_js, up_subject, 0..20).await;
    publish_jobs(&edge_js, local_subject, 0..20).await;
    up.wait_covers(0..20, Duration::from_secs(30)).await;
    local.wait_covers(0..20, Duration::from_secs(30)).await;
    for outcome in Running::stop_all(vec![to_hub, at_edge]).await {
        outcome.expect("a clean drain");
    }
    up.assert_handled_once(20);
    local.assert_handled_once(20);
    settled(&hub_js, up_decl.name, "workers", Duration::from_secs(10)).await;
    settled(
        &edge_js,
        local_decl.name,
        "workers",
        Duration::from_secs(10),
    )
    .await;
}
