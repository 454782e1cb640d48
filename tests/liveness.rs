//! Nothing silent: a supervisor that dies, a run that is dropped, a relay ensured on a runtime
//! that does not run, settings that would spin, readiness that covers relays and publish-only
//! streams, and a publish-only stream deleted out of band. Real servers; assertions on what
//! health says and what the server holds.

mod fixture;

use std::time::Duration;

use fixture::{Fixture, Running, job_topology, queue, stream};
use nats_topology::model::{Delivery, QueueDecl, StreamDecl};
use nats_topology::{ConsumerState, RetryPolicy, Runtime, Topology};
use nats_topology_testkit::eventually;

fn relay_topology(stream: StreamDecl, ledger: fixture::Ledger) -> Topology {
    let relay = fixture::relay("liveness::relay", &stream, "live.status.>");
    Topology::new()
        .stream(stream)
        .consumer(relay, fixture::job_handler(ledger, Duration::ZERO))
}

/// A supervisor that panics turns health red (its consumer `stopped` with the panic), is
/// restarted by the runtime, and its consumer handles messages again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_supervisor_that_panics_is_reported_and_restarted() {
    let fx = Fixture::start().await;
    let jobs = stream("LIVE_PANIC", &["live.panic.>"]);
    let consumer = queue(
        "liveness::panicky",
        &jobs,
        "live.panic.jobs",
        QueueDecl::new("panicky"),
    );
    let topology = job_topology(jobs, consumer, fx.ledger.clone(), Duration::ZERO);
    // Restarts wait at least `base`: long enough to see the stopped state by polling.
    let retry = RetryPolicy {
        base: Duration::from_millis(800),
        ..fixture::fast_retry()
    };
    let runtime = fixture::fast(fx.builder().await)
        .retry(retry)
        .topology(topology)
        .__panic_supervisor_once("liveness::panicky")
        .build()
        .expect("valid");
    let running = Running::spawn(runtime);
    let health = running.health.clone();

    let stopped = eventually(Duration::from_secs(20), "the panic in health", || {
        let status = health.consumers().remove(0);
        async move {
            match status.state {
                ConsumerState::Stopped { error: Some(e) } => Some(e),
                _ => None,
            }
        }
    })
    .await;
    assert!(stopped.contains("panicked"), "{stopped}");
    assert!(!health.ready(), "a dead supervisor is not ready:\n{health}");

    running.ready(Duration::from_secs(20)).await;
    let js = fx.jetstream().await;
    fixture::publish_jobs(&js, "live.panic.jobs", 0..20).await;
    fx.ledger.wait_covers(0..20, Duration::from_secs(20)).await;
    fx.drain_and_settle(running, &js, ("LIVE_PANIC", "panicky"), 20)
        .await;
}

/// Dropping the `run_until` future turns health red at once, a relay's `ensure()` fails, and
/// the drain goes on in the background: the relay is deleted from the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_run_turns_health_red_and_drains_in_the_background() {
    let fx = Fixture::start().await;
    let statuses = stream("LIVE_DROP", &["live.status.>"]);
    let runtime = fixture::fast(fx.builder().await)
        .topology(relay_topology(statuses, fx.ledger.clone()))
        .build()
        .expect("valid");
    let health = runtime.health();
    let relay = runtime.relay("relay").expect("one relay");
    let run = runtime.run_until(std::future::pending::<()>());
    tokio::select! {
        _ = run => panic!("run_until returned by itself"),
        ready = health.wait_ready(Duration::from_secs(20)) => ready.expect("ready"),
    }
    // `run` is dropped here.
    assert!(!health.ready(), "dropped run still ready:\n{health}");
    relay
        .ensure()
        .await
        .expect_err("ensure() on a dropped run fails");

    let js = fx.jetstream().await;
    let name = relay.consumer();
    eventually(
        Duration::from_secs(20),
        "the relay deleted by the background drain",
        || {
            let js = js.clone();
            let name = name.clone();
            async move {
                let names = fixture::consumer_names(&js, "LIVE_DROP").await;
                (!names.contains(&name)).then_some(())
            }
        },
    )
    .await;
    eventually(Duration::from_secs(20), "every consumer stopped", || {
        let stopped = health
            .consumers()
            .iter()
            .all(|c| matches!(c.state, ConsumerState::Stopped { .. }));
        async move { stopped.then_some(()) }
    })
    .await;
}

/// `Relay::ensure()` on a runtime that was never started fails at once instead of waiting.
#[tokio::test]
async fn ensuring_a_relay_of_a_runtime_never_started_fails_at_once() {
    let fx = Fixture::start().await;
    let runtime = fx
        .builder()
        .await
        .topology(relay_topology(
            stream("LIVE_IDLE", &["live.status.>"]),
            fx.ledger.clone(),
        ))
        .build()
        .expect("valid");
    let relay = runtime.relay("relay").expect("one relay");
    let outcome = tokio::time::timeout(Duration::from_secs(5), relay.ensure())
        .await
        .expect("ensure() answers at once");
    let error = outcome.expect_err("not started");
    assert!(error.to_string().contains("run_until"), "{error}");
    assert!(!runtime.health().ready());
}

/// Readiness covers relays: a service with only a relay is ready once it runs, not before
/// start; `wait_ready` returns then, and times out with the state when it cannot be ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_covers_relays_and_wait_ready_reports_the_state() {
    let fx = Fixture::start().await;
    let runtime = fixture::fast(fx.builder().await)
        .topology(relay_topology(
            stream("LIVE_READY", &["live.status.>"]),
            fx.ledger.clone(),
        ))
        .build()
        .expect("valid");
    let health = runtime.health();
    assert!(!health.ready(), "not started yet");
    let running = Running::spawn(runtime);
    health
        .wait_ready(Duration::from_secs(20))
        .await
        .expect("the relay runs");
    assert!(health.consumers().iter().all(|c| !c.queue));
    running.stop().await.expect("clean drain");
    assert!(!health.ready(), "a drained runtime is not ready");

    // An external stream that does not exist: never ready; the error shows why.
    let missing = StreamDecl::new("LIVE_NOT_THERE", &["live.none.>"]).external();
    let consumer = queue(
        "liveness::never",
        &missing,
        "live.none.jobs",
        QueueDecl::new("never"),
    );
    let never = Running::spawn(
        fixture::fast(fx.builder().await)
            .topology(job_topology(
                missing,
                consumer,
                fx.ledger.clone(),
                Duration::ZERO,
            ))
            .build()
            .expect("valid"),
    );
    let error = never
        .health
        .wait_ready(Duration::from_millis(1500))
        .await
        .expect_err("an external stream that is not there is never ready");
    let text = error.to_string();
    assert!(text.contains("not ready after"), "{text}");
    assert!(text.contains("LIVE_NOT_THERE"), "{text}");
    never.stop().await.expect("clean drain");
}

/// Settings that would spin or never notice a loss are refused when the runtime is built,
/// each named.
#[tokio::test]
async fn builder_refuses_settings_that_would_spin() {
    let fx = Fixture::start().await;
    let topology = Topology::new().stream(stream("LIVE_SETTINGS", &["live.settings.>"]));
    let error = fx
        .builder()
        .await
        .topology(topology)
        .heartbeat(Duration::ZERO)
        .retry(RetryPolicy {
            cap: Duration::ZERO,
            ..RetryPolicy::default()
        })
        .build()
        .err()
        .expect("refused");
    let text = error.to_string();
    assert!(text.contains("runtime builder `heartbeat`"), "{text}");
    assert!(text.contains("runtime builder `retry`"), "{text}");
    assert_eq!(error.problems.len(), 2, "{text}");
}

/// A stream this service only publishes to, deleted out of band, is back (and health says
/// so) before the next publish: that publish is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_only_stream_deleted_out_of_band_comes_back() {
    let fx = Fixture::start().await;
    let outbox = stream("LIVE_OUTBOX", &["live.outbox.>"]);
    let runtime = fixture::fast(fx.builder().await)
        .topology(Topology::new().stream(outbox))
        .build()
        .expect("valid");
    let running = Running::spawn(runtime);
    running.ready(Duration::from_secs(20)).await;
    assert_eq!(running.health.streams().len(), 1);

    let js = fx.jetstream().await;
    js.delete_stream("LIVE_OUTBOX").await.expect("deleted");
    eventually(
        Duration::from_secs(20),
        "the stream back on the server",
        || {
            let js = js.clone();
            async move { js.get_stream("LIVE_OUTBOX").await.ok().map(|_| ()) }
        },
    )
    .await;
    running.ready(Duration::from_secs(20)).await;
    js.publish("live.outbox.1", "after".into())
        .await
        .expect("publish sent")
        .await
        .expect("the re-created stream stores it");
    running.stop().await.expect("clean drain");
}

/// A runtime with nothing to consume and nothing to publish to is ready once started.
#[tokio::test]
async fn an_empty_runtime_is_ready_once_started() {
    let fx = Fixture::start().await;
    let runtime: Runtime = fx
        .builder()
        .await
        .topology(Topology::new())
        .build()
        .expect("valid");
    let health = runtime.health();
    assert!(!health.ready(), "not started");
    let running = Running::spawn(runtime);
    health
        .wait_ready(Duration::from_secs(5))
        .await
        .expect("ready once started");
    running.stop().await.expect("clean drain");
}

/// A push queue consumer is declared with `max_ack_pending` = its concurrency, so the server
/// never pushes more than the instance can start: while slow handlers run, the server counts
/// at most `concurrency` unacknowledged messages, and every job is handled once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_delivery_holds_no_more_than_can_be_started() {
    let fx = Fixture::start().await;
    let jobs = stream("LIVE_PUSH", &["live.push.>"]);
    let consumer = queue(
        "liveness::pushed",
        &jobs,
        "live.push.jobs",
        QueueDecl::new("pushed").delivery(Delivery::Push),
    )
    .concurrency(2);
    let running = fx
        .run(job_topology(
            jobs,
            consumer,
            fx.ledger.clone(),
            Duration::from_millis(150),
        ))
        .await;
    let js = fx.jetstream().await;
    let info = fixture::consumer_info(&js, "LIVE_PUSH", "pushed")
        .await
        .expect("the push consumer exists");
    assert_eq!(info.config.max_ack_pending, 2, "{:?}", info.config);

    fixture::publish_jobs(&js, "live.push.jobs", 0..12).await;
    let most = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    eventually(Duration::from_secs(30), "every pushed job handled", || {
        let (js, most, ledger) = (js.clone(), most.clone(), fx.ledger.clone());
        async move {
            if let Some(info) = fixture::consumer_info(&js, "LIVE_PUSH", "pushed").await {
                most.fetch_max(info.num_ack_pending, std::sync::atomic::Ordering::Relaxed);
            }
            ledger.covers(0..12).then_some(())
        }
    })
    .await;
    let most = most.load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        (1..=2).contains(&most),
        "the server held {most} unacknowledged messages for a concurrency of 2"
    );
    fx.drain_and_settle(running, &js, ("LIVE_PUSH", "pushed"), 12)
        .await;
}

/// A handler's publish that finds no stream (the publish-only stream was deleted out of band)
/// makes the runtime check its streams at once, long before its periodic check: the failed
/// handler is redelivered and its next publish is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_that_finds_no_stream_brings_the_stream_back() {
    let fx = Fixture::start().await;
    let jobs = stream("LIVE_IN", &["live.in.>"]);
    let outbox = stream("LIVE_OUT", &["live.out.>"]);
    let consumer = queue(
        "liveness::forward",
        &jobs,
        "live.in.jobs",
        QueueDecl::new("fwd"),
    );
    let ledger = fx.ledger.clone();
    let topology = Topology::new().stream(jobs).stream(outbox).consumer(
        consumer,
        move |incoming: nats_topology::Incoming| {
            let ledger = ledger.clone();
            let job = fixture::job_id(&incoming);
            let cx = incoming.context().clone();
            Box::pin(async move {
                let id = job?;
                cx.publish(format!("live.out.{id}"), &id).await?;
                ledger.record(id);
                Ok(())
            }) as nats_topology::HandlerFuture
        },
    );
    // The periodic check runs every 2 x 30 s: only the failed publish can bring it back soon.
    let runtime = fixture::fast(fx.builder().await)
        .heartbeat(Duration::from_secs(30))
        .topology(topology)
        .build()
        .expect("valid");
    let running = Running::spawn(runtime);
    running.ready(Duration::from_secs(20)).await;

    let js = fx.jetstream().await;
    js.delete_stream("LIVE_OUT").await.expect("deleted");
    fixture::publish_jobs(&js, "live.in.jobs", [7]).await;
    fx.ledger.wait_covers([7], Duration::from_secs(15)).await;
    let mut out = js.get_stream("LIVE_OUT").await.expect("the outbox is back");
    assert_eq!(out.info().await.expect("info").state.messages, 1);
    running.stop().await.expect("clean drain");
}
