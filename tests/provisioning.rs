//! Provisioning against a real server: drift (editable updated, immutable refused with its
//! fields), a plain durable under the queue's name, external streams, subject overlap, and
//! lossless migration on limits and work-queue streams.

mod fixture;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::{self, consumer, stream};
use fixture::{Fixture, Running};
use futures::StreamExt;
use nats_topology::model::{ConsumerDecl, QueueDecl, Retention, StreamDecl, StreamRef};
use nats_topology::{HandlerError, ProvisionErrorKind, RetryPolicy, RunError, Runtime, Topology};
use nats_topology_testkit::eventually;

/// Quick retries: tests wait on conditions, not on backoff.
fn quick() -> RetryPolicy {
    RetryPolicy {
        base: Duration::from_millis(20),
        cap: Duration::from_millis(200),
        deadline: Duration::from_secs(20),
        request_timeout: Duration::from_secs(5),
    }
}

fn noop(_: nats_topology::Incoming) -> nats_topology::HandlerFuture {
    Box::pin(async { Ok::<(), HandlerError>(()) })
}

fn queue_topology(
    stream: &'static StreamDecl,
    queue: QueueDecl,
    subjects: &'static [&'static str],
) -> Topology {
    Topology::new().stream(*stream).consumer(
        ConsumerDecl::queue("tests::handler", StreamRef::Declared(stream), queue)
            .subjects(subjects),
        noop,
    )
}

/// Creates a stream on the server the way its owner (not this runtime) would.
async fn create_stream(
    js: &jetstream::Context,
    name: &str,
    subjects: &[&str],
    config: stream::Config,
) {
    js.create_stream(stream::Config {
        name: name.to_owned(),
        subjects: subjects.iter().map(|s| (*s).to_owned()).collect(),
        ..config
    })
    .await
    .unwrap();
}

/// A runtime of `topology` with [`quick`] retries, on a connection of its own.
async fn quick_runtime(fx: &Fixture, topology: Topology) -> Runtime {
    fx.builder()
        .await
        .topology(topology)
        .retry(quick())
        .build()
        .unwrap()
}

/// A server of the test's own and a JetStream context on a connection of its own.
async fn start() -> (Fixture, jetstream::Context) {
    let fx = Fixture::start().await;
    let js = fx.jetstream().await;
    (fx, js)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn editable_drift_is_applied_and_extra_server_subjects_are_kept() {
    static ORDERS: StreamDecl =
        StreamDecl::new("DRIFT_ORDERS", &["drift.orders.>"]).max_age(Duration::from_secs(3600));
    let (fx, js) = start().await;
    // Someone created the stream with another max_age and an extra subject, and the consumer
    // with another max_deliver and ack_wait.
    create_stream(
        &js,
        ORDERS.name,
        &["drift.orders.>", "drift.extra"],
        stream::Config {
            max_age: Duration::from_secs(60),
            ..Default::default()
        },
    )
    .await;
    js.create_consumer_on_stream(
        consumer::pull::Config {
            durable_name: Some("billing".into()),
            max_deliver: 3,
            ack_wait: Duration::from_secs(10),
            filter_subject: "drift.orders.created".into(),
            ..Default::default()
        },
        ORDERS.name,
    )
    .await
    .unwrap();

    const QUEUE: QueueDecl = QueueDecl::new("billing")
        .max_deliver(5)
        .ack_wait(Duration::from_secs(30));
    let runtime = quick_runtime(
        &fx,
        queue_topology(&ORDERS, QUEUE, &["drift.orders.created"]),
    )
    .await;
    let plan = runtime.plan().await.unwrap();
    let text = plan.to_string();
    assert!(text.contains("update: `max_age`"), "{text}");
    assert!(
        text.contains("`max_deliver` is 3 on the server, declared 5"),
        "{text}"
    );
    runtime
        .provision()
        .await
        .expect("editable drift is updated");

    let mut stream = js.get_stream(ORDERS.name).await.unwrap();
    let config = stream.info().await.unwrap().config.clone();
    assert_eq!(config.max_age, Duration::from_secs(3600));
    assert!(
        config.subjects.contains(&"drift.extra".to_owned()),
        "kept: {:?}",
        config.subjects
    );
    let consumer = stream.consumer_info("billing").await.unwrap().clone();
    assert_eq!(consumer.config.max_deliver, 5);
    assert_eq!(consumer.config.ack_wait, Duration::from_secs(30));
    fixture::assert_nothing_to_do(&runtime).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn immutable_drift_is_a_conflict_naming_the_fields_and_is_not_retried() {
    static EVENTS: StreamDecl = StreamDecl::new("IMMUTABLE_EVENTS", &["immutable.>"]);
    let (fx, js) = start().await;
    create_stream(&js, EVENTS.name, &["immutable.>"], Default::default()).await;
    js.create_consumer_on_stream(
        consumer::pull::Config {
            durable_name: Some("workers".into()),
            deliver_policy: consumer::DeliverPolicy::New,
            ack_policy: consumer::AckPolicy::None,
            ..Default::default()
        },
        EVENTS.name,
    )
    .await
    .unwrap();
    let runtime = quick_runtime(&fx, queue_topology(&EVENTS, QueueDecl::new("workers"), &[])).await;
    let error = runtime
        .provision()
        .await
        .expect_err("an immutable change is refused");
    assert_eq!(error.kind(), ProvisionErrorKind::Conflict);
    assert_eq!(error.attempts(), 1, "a conflict is never retried");
    assert_eq!(error.stream(), "IMMUTABLE_EVENTS");
    assert_eq!(error.consumer_name(), Some("workers"));
    let fields: BTreeSet<&str> = error.field_diffs().iter().map(|d| d.field).collect();
    assert_eq!(
        fields,
        BTreeSet::from(["ack_policy", "deliver_policy"]),
        "{error}"
    );
    let text = error.to_string();
    assert!(text.contains("migrate_from"), "the fix is named: {text}");

    // run_until reports the same conflict instead of running without the consumer.
    let runtime = quick_runtime(&fx, queue_topology(&EVENTS, QueueDecl::new("workers"), &[])).await;
    let outcome = tokio::time::timeout(
        Duration::from_secs(20),
        runtime.run_until(std::future::pending::<()>()),
    )
    .await
    .expect("a conflict ends run_until");
    let Err(RunError::Provision(error)) = outcome else {
        panic!("expected a provisioning conflict, got {outcome:?}");
    };
    assert_eq!(error.kind(), ProvisionErrorKind::Conflict);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_durable_under_the_queue_name_is_refused_precisely() {
    static JOBS: StreamDecl = StreamDecl::new("PLAIN_JOBS", &["plain.jobs.>"]);
    let (fx, js) = start().await;
    create_stream(&js, JOBS.name, &["plain.jobs.>"], Default::default()).await;
    // The shape this library exists to prevent: a push durable without a deliver group.
    js.create_consumer_on_stream(
        consumer::push::Config {
            durable_name: Some("sync".into()),
            deliver_subject: "plain.deliver".into(),
            ..Default::default()
        },
        JOBS.name,
    )
    .await
    .unwrap();
    let runtime = quick_runtime(&fx, queue_topology(&JOBS, QueueDecl::new("sync"), &[])).await;
    let inspection = runtime.inspect().await.unwrap().to_string();
    assert!(
        inspection.contains("NO GROUP (plain durable)"),
        "{inspection}"
    );
    let error = runtime
        .provision()
        .await
        .expect_err("a plain durable is refused");
    assert_eq!(error.kind(), ProvisionErrorKind::Conflict);
    assert_eq!(error.attempts(), 1);
    let text = error.to_string();
    assert!(text.contains("plain durable push consumer"), "{text}");
    assert!(text.contains("second replica"), "{text}");
    assert!(text.contains("migrate_from"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_external_stream_is_waited_for_then_consumed_and_never_changed() {
    static EMAIL: StreamDecl = StreamDecl::new("EXT_EMAIL", &["ext.email.>"]).external();
    let (fx, js) = start().await;
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let record = seen.clone();
    let topology = Topology::new().stream(EMAIL).consumer(
        ConsumerDecl::queue(
            "tests::on_email",
            StreamRef::Declared(&EMAIL),
            QueueDecl::new("mailer"),
        )
        .subjects(&["ext.email.sent"]),
        move |incoming| {
            record
                .lock()
                .unwrap()
                .push(String::from_utf8_lossy(incoming.payload()).into_owned());
            Box::pin(async { Ok::<(), HandlerError>(()) })
        },
    );
    let runtime = quick_runtime(&fx, topology).await;
    let running = Running::spawn(runtime);
    let health = &running.health;
    // Not ready while the stream does not exist, and the reason says so.
    eventually(
        Duration::from_secs(10),
        "the consumer to report the missing stream",
        || {
            let status = health.consumers()[0].state.to_string();
            async move {
                status
                    .contains("external stream does not exist")
                    .then_some(())
            }
        },
    )
    .await;
    assert!(!health.ready());
    assert!(
        js.get_stream(EMAIL.name).await.is_err(),
        "an external stream is never created"
    );

    // Its owner deploys (with a max_age we must not touch).
    create_stream(
        &js,
        EMAIL.name,
        &["ext.email.>"],
        stream::Config {
            max_age: Duration::from_secs(120),
            ..Default::default()
        },
    )
    .await;
    fixture::wait_ready(health, Duration::from_secs(20)).await;
    js.publish("ext.email.sent", "hello".into())
        .await
        .unwrap()
        .await
        .unwrap();
    eventually(Duration::from_secs(10), "the message handled", || {
        let n = seen.lock().unwrap().len();
        async move { (n == 1).then_some(()) }
    })
    .await;
    running.stop().await.unwrap();
    let config = js
        .get_stream(EMAIL.name)
        .await
        .unwrap()
        .cached_info()
        .config
        .clone();
    assert_eq!(
        config.max_age,
        Duration::from_secs(120),
        "the external stream is unchanged"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_subjects_name_both_streams() {
    static A: StreamDecl = StreamDecl::new("OVERLAP_A", &["overlap.>"]);
    static B: StreamDecl = StreamDecl::new("OVERLAP_B", &["overlap.orders.*"]);
    // Declared together: refused at build time, one error naming both.
    let (fx, js) = start().await;
    let error = fx
        .builder()
        .await
        .topology(Topology::new().stream(A).stream(B))
        .build()
        .err()
        .expect("overlapping owned streams are refused");
    let text = error.to_string();
    assert_eq!(error.problems.len(), 1, "{text}");
    assert!(
        text.contains("OVERLAP_A") && text.contains("OVERLAP_B"),
        "{text}"
    );

    // Against a stream already on the server: the server's 10065 becomes a precise message.
    create_stream(
        &js,
        "SOMEONE_ELSES",
        &["overlap.orders.*"],
        Default::default(),
    )
    .await;
    let runtime = quick_runtime(&fx, Topology::new().stream(A)).await;
    let error = runtime
        .provision()
        .await
        .expect_err("overlap with the server is refused");
    assert_eq!(error.kind(), ProvisionErrorKind::Rejected);
    assert_eq!(error.attempts(), 1);
    let text = error.to_string();
    assert!(
        text.contains("OVERLAP_A") && text.contains("SOMEONE_ELSES"),
        "{text}"
    );
}

/// Publishes 1..=100 (payload = the number), acks 1..=40 with `old`, leaves 41..=50 delivered
/// but unacked, then starts `instances` runtimes at once whose group `new` declares
/// `migrate_from = "old"`: together they must receive exactly 41..=100, each once.
async fn migrate(decl: &'static StreamDecl, retention: stream::RetentionPolicy, instances: usize) {
    let (fx, js) = start().await;
    let subject = format!("{}.work", decl.subjects[0].trim_end_matches(".>"));
    let config = stream::Config {
        retention,
        ..Default::default()
    };
    create_stream(&js, decl.name, &[decl.subjects[0]], config).await;
    let old: consumer::PullConsumer = js
        .create_consumer_on_stream(
            consumer::pull::Config {
                durable_name: Some("old".into()),
                // 41..=50 stay unacknowledged (their instance is gone): the migration waits
                // out one ack_wait for them, then the new consumer delivers them.
                ack_wait: Duration::from_secs(2),
                ..Default::default()
            },
            decl.name,
        )
        .await
        .unwrap();
    for n in 1..=100u32 {
        js.publish(subject.clone(), n.to_string().into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    let mut batch = old.fetch().max_messages(50).messages().await.unwrap();
    let mut fetched = 0;
    while let Some(message) = batch.next().await {
        let message = message.unwrap();
        let n: u32 = std::str::from_utf8(&message.payload)
            .unwrap()
            .parse()
            .unwrap();
        if n <= 40 {
            message.double_ack().await.unwrap();
        }
        fetched += 1;
    }
    assert_eq!(fetched, 50);
    let floor = js
        .get_stream(decl.name)
        .await
        .unwrap()
        .consumer_info("old")
        .await
        .unwrap()
        .ack_floor
        .stream_sequence;
    assert_eq!(floor, 40);

    let seen: Arc<Mutex<Vec<u32>>> = Arc::default();
    let mut runtimes = Vec::new();
    for _ in 0..instances {
        let record = seen.clone();
        let topology = Topology::new().stream(*decl).consumer(
            ConsumerDecl::queue(
                "tests::on_work",
                StreamRef::Declared(decl),
                QueueDecl::new("new").migrate_from("old"),
            ),
            move |incoming| {
                let n = std::str::from_utf8(incoming.payload())
                    .unwrap()
                    .parse()
                    .unwrap();
                record.lock().unwrap().push(n);
                Box::pin(async { Ok::<(), HandlerError>(()) })
            },
        );
        // Each instance on its own connection, as separate processes would be; a short pull
        // expiry, so that the paused old consumer is retired soon after nobody pulls from it.
        let runtime = fx
            .builder()
            .await
            .topology(topology)
            .retry(quick())
            .pull_expires(Duration::from_secs(1))
            .build()
            .unwrap();
        runtimes.push(runtime);
    }
    // Every instance migrates at the same moment.
    let running: Vec<Running> = runtimes.into_iter().map(Running::spawn).collect();
    eventually(
        Duration::from_secs(20),
        "60 messages handled by the new consumer",
        || {
            let n = seen.lock().unwrap().len();
            async move { (n >= 60).then_some(()) }
        },
    )
    .await;
    // Nobody pulls from the old consumer: it is deleted (at once on a work-queue stream).
    eventually(Duration::from_secs(20), "the old consumer deleted", || {
        let js = js.clone();
        async move {
            let stream = js.get_stream(decl.name).await.ok()?;
            stream.consumer_info("old").await.is_err().then_some(())
        }
    })
    .await;
    for outcome in Running::stop_all(running).await {
        outcome.unwrap();
    }
    let handled = seen.lock().unwrap().clone();
    if instances == 1 {
        assert_eq!(
            handled,
            (41..=100).collect::<Vec<u32>>(),
            "exactly 41..=100, in order"
        );
    } else {
        let mut sorted = handled.clone();
        sorted.sort_unstable();
        assert_eq!(
            sorted,
            (41..=100).collect::<Vec<u32>>(),
            "exactly 41..=100, each once, across {instances} instances"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migration_on_a_limits_stream_starts_at_the_ack_floor() {
    static LIMITS: StreamDecl = StreamDecl::new("MIGRATE_LIMITS", &["migrate.limits.>"]);
    migrate(&LIMITS, stream::RetentionPolicy::Limits, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migration_on_a_workqueue_stream_deletes_first_and_loses_nothing() {
    static QUEUE: StreamDecl =
        StreamDecl::new("MIGRATE_WQ", &["migrate.wq.>"]).retention(Retention::WorkQueue);
    migrate(&QUEUE, stream::RetentionPolicy::WorkQueue, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_instances_migrating_at_once_on_a_limits_stream_lose_and_repeat_nothing() {
    static LIMITS: StreamDecl = StreamDecl::new("MIGRATE_LIMITS_4", &["migrate.limits4.>"]);
    migrate(&LIMITS, stream::RetentionPolicy::Limits, 4).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_instances_migrating_at_once_on_a_workqueue_stream_lose_and_repeat_nothing() {
    static QUEUE: StreamDecl =
        StreamDecl::new("MIGRATE_WQ_4", &["migrate.wq4.>"]).retention(Retention::WorkQueue);
    migrate(&QUEUE, stream::RetentionPolicy::WorkQueue, 4).await;
}
