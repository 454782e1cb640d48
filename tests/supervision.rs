//! Supervision on real servers: a runtime that starts before its broker, a consumer deleted
//! behind its back, a server restart, and push delivery shared by two instances.
//!
//! Every test asserts outcomes: which ids were handled, which were lost, what the server
//! reports as pending.

mod fixture;

use std::time::Duration;

use fixture::{Fixture, Ledger, Running};
use nats_topology::model::{ConsumerDecl, Delivery, QueueDecl, Retention, Storage, StreamDecl};
use nats_topology::{ConsumerState, Runtime};
use nats_topology_testkit::{NatsServer, eventually};

/// The broker is down when the runtime starts and comes up 5 s later: the runtime is not ready
/// meanwhile (its consumer reports why), then provisions, becomes ready and consumes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starts_before_the_broker_and_catches_up() {
    let mut fx = Fixture::start().await;
    let url = fx.server.url();
    fx.server.stop().await;

    let client = async_nats::ConnectOptions::new()
        .retry_on_initial_connect()
        .connect(url.as_str())
        .await
        .expect("with retry_on_initial_connect, connect returns at once");
    let ledger = &fx.ledger;
    let stream = fixture::stream("LATE", &["late.>"]);
    let consumer = fixture::queue("tests::late", &stream, "late.jobs", QueueDecl::new("late"));
    let runtime = fixture::fast(Runtime::builder(client))
        .topology(fixture::job_topology(
            stream,
            consumer,
            ledger.clone(),
            Duration::ZERO,
        ))
        .build()
        .expect("valid topology");
    let running = Running::spawn(runtime);

    // The scenario: the broker stays down for 5 s (the delay is what is under test).
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(
        !running.health.ready(),
        "not ready without a broker: {}",
        running.health
    );
    let status = running.health.consumers()[0].clone();
    assert!(
        matches!(
            status.state,
            ConsumerState::Retrying { .. } | ConsumerState::Provisioning
        ),
        "the consumer reports that it is not running yet: {status}"
    );

    fx.server.restart().await.expect("the broker starts");
    running.ready(Duration::from_secs(30)).await;

    let js = fx.jetstream().await;
    fixture::publish_jobs(&js, "late.jobs", 0..20).await;
    ledger.wait_covers(0..20, Duration::from_secs(20)).await;
    fx.drain_and_settle(running, &js, ("LATE", "late"), 20)
        .await;
}

/// The queue consumer is deleted on the server while the runtime consumes: it is re-created,
/// and the jobs published after the deletion (while it did not exist) are handled once each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_deleted_out_of_band_is_recreated() {
    let fx = Fixture::start().await;
    let ledger = &fx.ledger;
    // A work queue keeps what no consumer has acknowledged, so a re-created consumer (which
    // starts at the first message) sees exactly the jobs not yet handled.
    let stream = fixture::stream("DELETED", &["deleted.>"]).retention(Retention::WorkQueue);
    let consumer = fixture::queue(
        "tests::deleted",
        &stream,
        "deleted.jobs",
        QueueDecl::new("worker"),
    )
    .concurrency(4);
    let running = fx.run_jobs(stream, consumer, Duration::ZERO).await;

    let js = fx.jetstream().await;
    fixture::publish_jobs(&js, "deleted.jobs", 0..20).await;
    ledger.wait_covers(0..20, Duration::from_secs(20)).await;

    let created = fixture::consumer_info(&js, "DELETED", "worker")
        .await
        .expect("the consumer exists")
        .created;
    fixture::delete_consumer(&js, "DELETED", "worker").await;
    // Published while the consumer does not exist.
    fixture::publish_jobs(&js, "deleted.jobs", 20..40).await;

    let recreated = eventually(
        Duration::from_secs(20),
        "the consumer re-created",
        || async {
            let info = fixture::consumer_info(&js, "DELETED", "worker").await?;
            (info.created != created).then_some(info)
        },
    )
    .await;
    assert_eq!(recreated.config.durable_name.as_deref(), Some("worker"));
    fixture::publish_jobs(&js, "deleted.jobs", 40..60).await;
    ledger.wait_covers(0..60, Duration::from_secs(20)).await;
    running.ready(Duration::from_secs(5)).await;
    fx.drain_and_settle(running, &js, ("DELETED", "worker"), 60)
        .await;
}

/// On a limits stream (which keeps acknowledged messages), a queue consumer deleted out of
/// band is re-created at the ack floor the runtime last read, not at the start of the stream:
/// nothing acknowledged is handled again, nothing published meanwhile is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_deleted_from_a_limits_stream_resumes_after_its_ack_floor() {
    let fx = Fixture::start().await;
    let ledger = &fx.ledger;
    let stream = fixture::stream("DELETED_LIMITS", &["deleted_limits.>"]);
    let consumer = fixture::queue(
        "tests::deleted_limits",
        &stream,
        "deleted_limits.jobs",
        QueueDecl::new("worker"),
    );
    let running = fx.run_jobs(stream, consumer, Duration::ZERO).await;
    let health = running.health.clone();

    let js = fx.jetstream().await;
    fixture::publish_jobs(&js, "deleted_limits.jobs", 0..20).await;
    // The runtime has read the ack floor of all 20 (it reads it every heartbeat).
    eventually(Duration::from_secs(20), "the ack floor of 20 read", || {
        let floor = health.consumers()[0].ack_floor;
        async move { (floor == 20).then_some(()) }
    })
    .await;
    fixture::delete_consumer(&js, "DELETED_LIMITS", "worker").await;
    fixture::publish_jobs(&js, "deleted_limits.jobs", 20..30).await;
    ledger.wait_covers(0..30, Duration::from_secs(20)).await;
    running.stop().await.expect("clean drain");
    assert_eq!(
        ledger.ids(),
        (0..30).collect::<Vec<_>>(),
        "each job once, in order: nothing acknowledged is replayed"
    );
    let info = fixture::consumer_info(&js, "DELETED_LIMITS", "worker")
        .await
        .expect("re-created");
    assert_eq!(
        info.config.deliver_policy,
        async_nats::jetstream::consumer::DeliverPolicy::ByStartSequence { start_sequence: 21 }
    );
}

/// A queue consumer deleted right after its acks, before the runtime read its ack floor
/// again (every heartbeat: here 30 s), is re-created after what this instance had
/// acknowledged since, not at the floor it last read: none of the 100 is handed out again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_deleted_right_after_its_acks_resumes_after_them() {
    let fx = Fixture::start().await;
    let ledger = &fx.ledger;
    let stream = fixture::stream("DELETED_ACKED", &["deleted_acked.>"]);
    let consumer = fixture::queue(
        "tests::deleted_acked",
        &stream,
        "deleted_acked.jobs",
        QueueDecl::new("worker"),
    )
    .concurrency(4);
    let topology = fixture::job_topology(stream, consumer, ledger.clone(), Duration::ZERO);
    let builder = fixture::fast(fx.builder().await)
        .heartbeat(Duration::from_secs(30))
        .pull_expires(Duration::from_secs(60))
        .topology(topology);
    let running = Running::start(builder).await;
    let health = running.health.clone();

    let js = fx.jetstream().await;
    fixture::publish_jobs(&js, "deleted_acked.jobs", 0..100).await;
    eventually(Duration::from_secs(20), "100 jobs acknowledged", || {
        let handled = health.consumers()[0].handled;
        async move { (handled == 100).then_some(()) }
    })
    .await;
    assert_eq!(
        health.consumers()[0].ack_floor,
        0,
        "no floor read since the start"
    );
    fixture::delete_consumer(&js, "DELETED_ACKED", "worker").await;
    fixture::publish_jobs(&js, "deleted_acked.jobs", 100..150).await;
    ledger.wait_covers(0..150, Duration::from_secs(20)).await;
    running.stop().await.expect("clean drain");
    assert_eq!(
        ledger.len(),
        150,
        "each job once: {:?}",
        ledger.duplicates()
    );
    let info = fixture::consumer_info(&js, "DELETED_ACKED", "worker")
        .await
        .expect("re-created");
    assert_eq!(
        info.config.deliver_policy,
        async_nats::jetstream::consumer::DeliverPolicy::ByStartSequence {
            start_sequence: 101
        }
    );
}

/// The only server is killed and restarted on its file store, first while jobs are being
/// handled, then while the runtime idles with a pull request open: the runtime resumes each
/// time; nothing published before or after is lost. The runtime keeps the default heartbeat
/// (5 s) and pull expiry (30 s): the second restart is handled within seconds only because
/// the runtime notices the reconnection (missed heartbeats would take 30 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_server_restart_with_file_storage_resumes() {
    let mut fx = Fixture::start().await;
    let ledger = &fx.ledger;
    let stream = fixture::stream("RESTART", &["restart.>"]).storage(Storage::File);
    let consumer = fixture::queue(
        "tests::restart",
        &stream,
        "restart.jobs",
        QueueDecl::new("worker").ack_wait(Duration::from_secs(2)),
    )
    .concurrency(4);
    let running = Running::start(fx.builder().await.retry(fixture::fast_retry()).topology(
        fixture::job_topology(stream, consumer, ledger.clone(), Duration::from_millis(20)),
    ))
    .await;

    // During consumption.
    let js = fx.jetstream().await;
    fixture::publish_jobs(&js, "restart.jobs", 0..100).await;
    ledger
        .wait_len(10, Duration::from_secs(20), "some jobs handled")
        .await;
    kill_and_restart(&mut fx.server).await;
    fixture::publish_jobs(&js, "restart.jobs", 100..150).await;
    ledger.wait_covers(0..150, Duration::from_secs(20)).await;
    // Acknowledgements in flight when the server died may be lost (and a killed server may
    // restore an older consumer state): those messages are delivered and handled again. Wait
    // for the server to see everything acknowledged.
    fixture::settled(&js, "RESTART", "worker", Duration::from_secs(20)).await;
    eprintln!(
        "handled again after the first restart: {:?}",
        ledger.duplicates()
    );

    // While idle, with a pull request open on the server.
    fixture::pull_request_waiting(&js, "RESTART", "worker", Duration::from_secs(10)).await;
    kill_and_restart(&mut fx.server).await;
    fixture::publish_jobs(&js, "restart.jobs", 150..200).await;
    ledger.wait_covers(150..200, Duration::from_secs(10)).await;
    fixture::settled(&js, "RESTART", "worker", Duration::from_secs(20)).await;
    running.ready(Duration::from_secs(5)).await;
    running.stop().await.expect("clean drain");
    let info = fixture::consumer_info(&js, "RESTART", "worker")
        .await
        .unwrap();
    assert_eq!((info.num_pending, info.num_ack_pending), (0, 0), "{info:?}");
    assert_eq!(ledger.unique(), (0..200).collect(), "no job lost");
}

/// Kills the only server abruptly and restarts it on its store.
async fn kill_and_restart(server: &mut NatsServer) {
    server.kill();
    server
        .restart()
        .await
        .expect("the server restarts on its store");
}

/// A push queue consumer (`deliver_group` = group): two runtimes share its work, each job
/// handled once; deleted on the server, it is re-created and both resume.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_consumer_shares_work_and_survives_deletion() {
    let fx = Fixture::start().await;
    let stream = fixture::stream("PUSHED", &["pushed.>"]).retention(Retention::WorkQueue);
    let consumer = fixture::queue(
        "tests::pushed",
        &stream,
        "pushed.jobs",
        QueueDecl::new("pushers")
            .delivery(Delivery::Push)
            .ack_wait(Duration::from_secs(5)),
    )
    .concurrency(4);
    let mut ledgers = Vec::new();
    let mut instances = Vec::new();
    for _ in 0..2 {
        let ledger = Ledger::default();
        let running = fx
            .run(fixture::job_topology(
                stream,
                consumer,
                ledger.clone(),
                Duration::from_millis(5),
            ))
            .await;
        ledgers.push(ledger);
        instances.push(running);
    }
    let js = fx.jetstream().await;
    let info = fixture::consumer_info(&js, "PUSHED", "pushers")
        .await
        .unwrap();
    assert_eq!(info.config.deliver_group.as_deref(), Some("pushers"));
    assert!(info.config.idle_heartbeat.is_zero() && !info.config.flow_control);

    fixture::publish_jobs(&js, "pushed.jobs", 0..200).await;
    eventually(Duration::from_secs(20), "every job handled", || {
        let n = fixture::union(&ledgers).len();
        async move { (n == 200).then_some(()) }
    })
    .await;
    let total: usize = ledgers.iter().map(Ledger::len).sum();
    assert_eq!(total, 200, "each job handled once across the two instances");
    for (i, ledger) in ledgers.iter().enumerate() {
        assert!(ledger.len() > 0, "instance {i} took part");
    }

    fixture::delete_consumer(&js, "PUSHED", "pushers").await;
    fixture::publish_jobs(&js, "pushed.jobs", 200..250).await;
    eventually(
        Duration::from_secs(20),
        "the consumer re-created",
        || async {
            fixture::consumer_info(&js, "PUSHED", "pushers")
                .await
                .map(|_| ())
        },
    )
    .await;
    fixture::publish_jobs(&js, "pushed.jobs", 250..300).await;
    eventually(
        Duration::from_secs(30),
        "every job handled after the deletion",
        || {
            let n = fixture::union(&ledgers).len();
            async move { (n == 300).then_some(()) }
        },
    )
    .await;
    for running in &instances {
        running.ready(Duration::from_secs(10)).await;
    }
    for running in instances {
        running.stop().await.expect("clean drain");
    }
    let total: usize = ledgers.iter().map(Ledger::len).sum();
    assert_eq!(total, 300, "each job handled once across the two instances");
    fixture::settled(&js, "PUSHED", "pushers", Duration::from_secs(5)).await;
}

/// Starts an instance of `consumer` recording into the fixture's ledger, and waits until it is
/// ready: within 3 s, well within the 5 s a session's first pull request may wait for an
/// answer, so that an instance that waited out that window fails.
async fn ready_at_once(fx: &Fixture, stream: StreamDecl, consumer: ConsumerDecl) -> Running {
    let running = Running::spawn(
        fixture::fast(fx.builder().await)
            .topology(fixture::job_topology(
                stream,
                consumer,
                fx.ledger.clone(),
                Duration::ZERO,
            ))
            .build()
            .expect("valid topology"),
    );
    running
        .health
        .wait_ready(Duration::from_secs(3))
        .await
        .expect("ready although its consumer delivers nothing now");
    running
}

/// A consumer paused on the server (as a migration pauses the old one), with messages waiting:
/// an instance starting on it is ready at once, although the consumer delivers nothing until
/// the pause ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_starting_on_a_paused_consumer_is_ready_at_once() {
    let fx = Fixture::start().await;
    let stream = fixture::stream("PAUSED", &["paused.>"]);
    let consumer = fixture::queue(
        "tests::paused",
        &stream,
        "paused.jobs",
        QueueDecl::new("held"),
    );
    let first = fx.run_jobs(stream, consumer, Duration::ZERO).await;
    first.stop().await.expect("clean drain");

    let client = fx.connect().await;
    let paused = client
        .request(
            "$JS.API.CONSUMER.PAUSE.PAUSED.held",
            r#"{"pause_until":"2099-12-31T00:00:00Z"}"#.into(),
        )
        .await
        .expect("the pause is answered");
    let answer: serde_json::Value = serde_json::from_slice(&paused.payload).unwrap();
    assert_eq!(answer["paused"], true, "{answer}");
    let js = fx.jetstream().await;
    fixture::publish_jobs(&js, "paused.jobs", 0..5).await;

    let second = ready_at_once(&fx, stream, consumer).await;
    let info = fixture::consumer_info(&js, "PAUSED", "held").await.unwrap();
    assert!(info.paused, "the consumer is still paused");
    assert_eq!(fx.ledger.len(), 0, "a paused consumer delivers nothing");
    second.stop().await.expect("clean drain");
}

/// A consumer at its `max_ack_pending` (another instance holds every message it may), with
/// more messages waiting: a second instance starting on it is ready at once, although the
/// server delivers it nothing until acks free room. (Its first pull request is answered by an
/// idle heartbeat; a `no_wait` request would be held until an ack, past the 5 s a first
/// request may wait.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_starting_on_a_saturated_consumer_is_ready_at_once() {
    let fx = Fixture::start().await;
    let stream = fixture::stream("FULL", &["full.>"]);
    let consumer = fixture::queue(
        "tests::full",
        &stream,
        "full.jobs",
        QueueDecl::new("full")
            .max_ack_pending(2)
            .ack_wait(Duration::from_secs(30)),
    )
    .concurrency(2);
    let holder = fx
        .run(fixture::job_topology(
            stream,
            consumer,
            Ledger::default(),
            Duration::from_secs(4),
        ))
        .await;
    let js = fx.jetstream().await;
    fixture::publish_jobs(&js, "full.jobs", 0..10).await;
    eventually(
        Duration::from_secs(10),
        "the first instance holding 2",
        || async {
            let info = fixture::consumer_info(&js, "FULL", "full").await?;
            (info.num_ack_pending == 2).then_some(())
        },
    )
    .await;

    let second = ready_at_once(&fx, stream, consumer).await;
    assert_eq!(
        fx.ledger.len(),
        0,
        "nothing delivered while the first holds every message"
    );
    for running in [holder, second] {
        running.stop().await.expect("clean drain");
    }
}
