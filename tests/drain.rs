//! Drain on a real server: a rolling deploy under load loses nothing, and a drained runtime
//! leaves nothing unacknowledged and no relay behind.

mod fixture;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use fixture::{Fixture, Ledger, Running};
use nats_topology::model::{BroadcastDecl, ConsumerDecl, QueueDecl, StreamRef};
use nats_topology::{ConsumerState, Topology};
use nats_topology_testkit::eventually;

/// An old instance drains while a new one takes over and jobs keep arriving: every job is
/// handled exactly once, and the server ends with nothing pending and nothing unacknowledged.
/// The consumer keeps the default 30 s ack_wait, so a message stranded by the drain would show
/// as a timeout here rather than be redelivered in time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_deploy_under_load_loses_nothing() {
    let fx = Fixture::start().await;
    let stream = fixture::stream("ROLLING", &["rolling.>"]);
    let consumer = fixture::queue(
        "tests::rolling",
        &stream,
        "rolling.jobs",
        QueueDecl::new("workers"),
    )
    .concurrency(4);
    let start = |ledger: Ledger| {
        fx.run(fixture::job_topology(
            stream,
            consumer,
            ledger,
            Duration::from_millis(10),
        ))
    };
    let old_ledger = fx.ledger.clone();
    let new_ledger = Ledger::default();
    let old = start(old_ledger.clone()).await;

    // Load: one job every 5 ms, each publish acknowledged, until told to stop.
    let js = fx.jetstream().await;
    let stop_publishing = Arc::new(AtomicBool::new(false));
    let publisher = tokio::spawn({
        let js = js.clone();
        let stop = stop_publishing.clone();
        async move {
            let mut next = 0u64;
            while !stop.load(Ordering::Relaxed) {
                fixture::publish_jobs(&js, "rolling.jobs", [next]).await;
                next += 1;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            next
        }
    });
    old_ledger
        .wait_len(50, Duration::from_secs(20), "the old instance at work")
        .await;

    let new = start(new_ledger.clone()).await;
    old.stop().await.expect("the old instance drains cleanly");
    let old_count = old_ledger.len();
    new_ledger
        .wait_len(50, Duration::from_secs(20), "the new instance at work")
        .await;
    assert_eq!(
        old_ledger.len(),
        old_count,
        "nothing handled after the drain returned"
    );

    stop_publishing.store(true, Ordering::Relaxed);
    let published = publisher.await.unwrap();
    let ledgers = [old_ledger, new_ledger];
    eventually(Duration::from_secs(20), "every job handled", || {
        let n = fixture::union(&ledgers).len() as u64;
        async move { (n == published).then_some(()) }
    })
    .await;
    fixture::settled(&js, "ROLLING", "workers", Duration::from_secs(5)).await;
    new.stop().await.expect("the new instance drains cleanly");

    let handled: usize = ledgers.iter().map(Ledger::len).sum();
    assert_eq!(
        fixture::union(&ledgers),
        (0..published).collect(),
        "every job published is handled"
    );
    assert_eq!(handled as u64, published, "no job handled twice");
    eprintln!(
        "{published} jobs: {} by the old instance, {} by the new one",
        ledgers[0].len(),
        ledgers[1].len()
    );
}

/// A runtime with a queue consumer and two relays drains while handlers run: when `run_until`
/// returns, every handled job is acknowledged, what was fetched ahead is handed back (handled
/// by the next instance well within its `ack_wait`), only the queue's durable remains on the
/// server, and each job is handled once overall.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_leaves_no_ack_pending_and_no_relays() {
    let fx = Fixture::start().await;
    let stream = fixture::stream("DRAINING", &["draining.>"]);
    // An ack_wait far beyond the test's deadlines: a message the drain did not hand back
    // would not be delivered again in time.
    let jobs = fixture::queue(
        "tests::drain_jobs",
        &stream,
        "draining.jobs",
        QueueDecl::new("drainers").ack_wait(Duration::from_secs(120)),
    )
    .concurrency(4);
    let relay = |name: &str| {
        ConsumerDecl::broadcast(
            fixture::leak(name),
            StreamRef::Named(stream.name),
            BroadcastDecl::new(),
        )
        .subjects(fixture::leak_all(&["draining.status"]))
    };
    let topology = |ledger: Ledger| {
        Topology::new()
            .stream(stream)
            .consumer(
                jobs,
                fixture::job_handler(ledger, Duration::from_millis(200)),
            )
            .consumer(
                relay("tests::relay_a"),
                fixture::job_handler(Ledger::default(), Duration::ZERO),
            )
            .consumer(
                relay("tests::relay_b"),
                fixture::job_handler(Ledger::default(), Duration::ZERO),
            )
    };

    let first = fx.ledger.clone();
    let runtime = fixture::fast(fx.builder().await)
        .topology(topology(first.clone()))
        .build()
        .expect("valid topology");
    let relays = [
        runtime.relay("relay_a").unwrap(),
        runtime.relay("relay_b").unwrap(),
    ];
    let running = Running::spawn(runtime);
    running.ready(Duration::from_secs(20)).await;
    for relay in &relays {
        relay.ensure().await.expect("the relay runs");
    }
    let js = fx.jetstream().await;
    let mut expected: std::collections::BTreeSet<String> =
        relays.iter().map(|r| r.consumer()).collect();
    expected.insert("drainers".to_owned());
    assert_eq!(fixture::consumer_names(&js, "DRAINING").await, expected);

    fixture::publish_jobs(&js, "draining.jobs", 0..40).await;
    first
        .wait_len(4, Duration::from_secs(20), "handlers at work")
        .await;
    let health = running.health.clone();
    running.stop().await.expect("clean drain");

    for status in health.consumers() {
        assert_eq!(
            status.state,
            ConsumerState::Stopped { error: None },
            "{status}"
        );
    }
    assert_eq!(
        fixture::consumer_names(&js, "DRAINING").await,
        ["drainers".to_owned()].into(),
        "only the queue's durable remains"
    );
    // Every handled job acknowledged; what was fetched ahead and not started was handed back
    // (naked: the server counts it as unacknowledged until it delivers it again, at once).
    let handled = first.len() as u64;
    let info = eventually(
        Duration::from_secs(3),
        "the drain's acks processed",
        || async {
            let info = fixture::consumer_info(&js, "DRAINING", "drainers").await?;
            (info.num_pending + info.num_ack_pending as u64 == 40 - handled).then_some(info)
        },
    )
    .await;
    assert!(
        info.num_ack_pending <= 4,
        "no more held ahead than the concurrency: {info:?}"
    );

    // The next instance handles the rest: each job once overall.
    let second = Ledger::default();
    let runtime = fixture::fast(fx.builder().await)
        .topology(topology(second.clone()))
        .build()
        .expect("valid topology");
    let running = Running::spawn(runtime);
    // Well within the ack_wait: what the first instance held was handed back, not stranded.
    eventually(Duration::from_secs(30), "the rest handled", || {
        let n = fixture::union(&[first.clone(), second.clone()]).len();
        async move { (n == 40).then_some(()) }
    })
    .await;
    fixture::settled(&js, "DRAINING", "drainers", Duration::from_secs(5)).await;
    running.stop().await.expect("clean drain");
    assert_eq!(first.len() + second.len(), 40, "no job handled twice");
    assert!(
        fixture::consumer_names(&js, "DRAINING")
            .await
            .iter()
            .all(|name| name == "drainers"),
        "the second instance's relays are gone too"
    );
}

/// A runtime drained while idle (its pull requests open on the server) leaves no request
/// behind: jobs published after `run_until` returned are stored as pending, none is delivered
/// to the instance that is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_while_idle_leaves_no_pull_request_behind() {
    let fx = Fixture::start().await;
    let stream = fixture::stream("IDLE", &["idle.>"]);
    let consumer = fixture::queue(
        "tests::idle",
        &stream,
        "idle.jobs",
        QueueDecl::new("idlers"),
    )
    .concurrency(4);
    let ledger = &fx.ledger;
    let running = fx.run_jobs(stream, consumer, Duration::ZERO).await;
    let js = fx.jetstream().await;
    fixture::pull_request_waiting(&js, "IDLE", "idlers", Duration::from_secs(10)).await;
    running.stop().await.expect("clean drain");

    fixture::publish_jobs(&js, "idle.jobs", 0..10).await;
    let info = eventually(
        Duration::from_secs(5),
        "the jobs stored as pending",
        || async {
            let info = fixture::consumer_info(&js, "IDLE", "idlers").await?;
            (info.num_pending + info.num_ack_pending as u64 == 10).then_some(info)
        },
    )
    .await;
    assert_eq!(
        (info.num_pending, info.num_ack_pending),
        (10, 0),
        "nothing delivered to the drained instance: {info:?}"
    );
    assert_eq!(ledger.len(), 0);
}

/// Handlers still running when the grace period ends (one inline at concurrency 1, two in
/// tasks at concurrency 2) are stopped, and their messages are returned to the server at once:
/// the next instance handles them long before their 30 s ack_wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handlers_past_the_grace_period_have_their_messages_returned() {
    let fx = Fixture::start().await;
    let stream = fixture::stream("GRACE", &["grace.>"]);
    let queue =
        |group: &str| QueueDecl::new(fixture::leak(group)).ack_wait(Duration::from_secs(30));
    let inline = fixture::queue(
        "tests::grace_inline",
        &stream,
        "grace.inline",
        queue("inline"),
    );
    let tasks =
        fixture::queue("tests::grace_tasks", &stream, "grace.tasks", queue("tasks")).concurrency(2);
    let topology = |ledger: &Ledger, work: Duration| {
        Topology::new()
            .stream(stream)
            .consumer(inline, fixture::job_handler(ledger.clone(), work))
            .consumer(tasks, fixture::job_handler(ledger.clone(), work))
    };

    // Handlers that would take a minute; a one-second grace period.
    let stuck = &fx.ledger;
    let running = Running::start(
        fixture::fast(fx.builder().await)
            .topology(topology(stuck, Duration::from_secs(60)))
            .grace_period(Duration::from_secs(1)),
    )
    .await;
    let js = fx.jetstream().await;
    fixture::publish_jobs(&js, "grace.inline", [1]).await;
    fixture::publish_jobs(&js, "grace.tasks", [2, 3]).await;
    eventually(
        Duration::from_secs(10),
        "the three handlers running",
        || async {
            let inline = fixture::consumer_info(&js, "GRACE", "inline").await?;
            let tasks = fixture::consumer_info(&js, "GRACE", "tasks").await?;
            (inline.num_ack_pending == 1 && tasks.num_ack_pending == 2).then_some(())
        },
    )
    .await;
    let stopping = std::time::Instant::now();
    running
        .stop()
        .await
        .expect("the drain returns after the grace period");
    assert!(
        stopping.elapsed() < Duration::from_secs(10),
        "bounded by the grace period"
    );
    assert_eq!(stuck.len(), 0, "no stuck handler finished");

    let done = Ledger::default();
    let runtime = fixture::fast(fx.builder().await)
        .topology(topology(&done, Duration::ZERO))
        .build()
        .expect("valid topology");
    let running = Running::spawn(runtime);
    done.wait_covers([1, 2, 3], Duration::from_secs(10)).await;
    assert_eq!(done.len(), 3, "each once");
    for group in ["inline", "tasks"] {
        let info = fixture::settled(&js, "GRACE", group, Duration::from_secs(5)).await;
        // Every delivery acknowledged.
        assert_eq!(
            info.delivered.consumer_sequence, info.ack_floor.consumer_sequence,
            "{info:?}"
        );
        // nats-server 2.10 may report as delivered the stream sequence its scan for the filter
        // reached (past other subjects' messages) while the ack floor keeps the last acked
        // one; from 2.11 on both are the last delivered message (docs/COMPATIBILITY.md).
        if !js.client().server_info().version.starts_with("2.10.") {
            assert_eq!(
                info.delivered.stream_sequence, info.ack_floor.stream_sequence,
                "{info:?}"
            );
        }
    }
    running.stop().await.expect("clean drain");
}

/// The fault beside a drain: the broker is gone when the service stops. The drain cannot
/// flush acknowledgements or delete its relay, and must still end (each clean-up waits at most
/// `CLEANUP_WAIT`), so the process exits and its orchestrator can restart it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_ends_when_the_broker_is_gone() {
    let mut fx = Fixture::start().await;
    let stream = fixture::stream("GONE", &["gone.>"]);
    let relay = ConsumerDecl::broadcast(
        "tests::relay_gone",
        StreamRef::Named(stream.name),
        BroadcastDecl::new(),
    )
    .subjects(fixture::leak_all(&["gone.status"]));
    let jobs = fixture::queue(
        "tests::gone_jobs",
        &stream,
        "gone.jobs",
        QueueDecl::new("gone"),
    );
    let topology = Topology::new()
        .stream(stream)
        .consumer(
            jobs,
            fixture::job_handler(fx.ledger.clone(), Duration::ZERO),
        )
        .consumer(
            relay,
            fixture::job_handler(Ledger::default(), Duration::ZERO),
        );
    let running = fx.run(topology).await;
    let js = fx.jetstream().await;
    fixture::publish_jobs(&js, "gone.jobs", 0..10).await;
    fx.ledger.wait_covers(0..10, Duration::from_secs(20)).await;

    fx.server.kill();
    let bound = nats_topology::CLEANUP_WAIT * 2 + Duration::from_secs(30);
    let outcome = tokio::time::timeout(bound, running.stop())
        .await
        .expect("the drain ends although the broker is gone");
    outcome.expect("a drain without a broker is still a clean stop");
}
