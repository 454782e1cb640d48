//! Metrics on a real server: the counters equal what happened to the messages (handled,
//! failed, retried, dead-lettered, redelivered), the duration histogram has one sample per
//! handler run, the in-flight gauge follows running handlers, and the lag gauges reach the
//! consumer's pending numbers as the server reports them (each partition's, for a partitioned
//! group, beside how many partitions a replica holds and how often its share changed).
//!
//! Handlers run on tokio worker threads, so the recorder is the process's global one (this
//! test binary is a process of its own). It reads values without resetting them. Each test
//! has its own stream and consumer names, hence its own series.

mod fixture;

use std::sync::Arc;
use std::time::Duration;

use fixture::Fixture;
use fixture::recorder::values;
use metrics::{Key, Label};
use nats_topology::model::{QueueDecl, SubjectTransform};
use nats_topology::telemetry::names;
use nats_topology::{HandlerError, HandlerFuture, Incoming, Topology};
use nats_topology_testkit::eventually;

/// The series of one consumer.
struct Series {
    stream: &'static str,
    consumer: &'static str,
}

impl Series {
    fn key(&self, name: &'static str) -> Key {
        Key::from_parts(
            name,
            vec![
                Label::new("stream", self.stream),
                Label::new("consumer", self.consumer),
            ],
        )
    }

    /// A counter's value (0 if it was never registered).
    fn counter(&self, name: &'static str) -> u64 {
        values().counter(&self.key(name))
    }

    /// A gauge's value, if it was registered.
    fn gauge(&self, name: &'static str) -> Option<f64> {
        values().gauge(&self.key(name))
    }

    /// A histogram's samples.
    fn samples(&self, name: &'static str) -> Vec<f64> {
        values().samples(&self.key(name))
    }
}

/// A handler that ends once `gate` gives it a permit.
fn gated(gate: &Arc<tokio::sync::Semaphore>) -> impl Fn(Incoming) -> HandlerFuture + use<> {
    let gate = gate.clone();
    move |_: Incoming| -> HandlerFuture {
        let gate = gate.clone();
        Box::pin(async move {
            gate.acquire().await.expect("the gate stays open").forget();
            Ok(())
        })
    }
}

const BACKOFF: &[Duration] = &[Duration::from_millis(50)];

/// Ten good jobs; two that fail on their first delivery; one whose handler panics on its
/// first delivery; one that always fails (three deliveries, then dead-lettered); one payload
/// that cannot be decoded (dead-lettered at once, never retried); one good job that works
/// for 200 ms. Every counter equals what happened, and agrees with `Health`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_handled_failed_retried_dead_lettered_and_redelivered() {
    values();
    let fx = Fixture::start().await;
    let stream = fixture::stream(
        "METRICS_COUNTS",
        &["metrics.counts.jobs", "metrics.counts.dead"],
    );
    let queue = QueueDecl::new("metrics_counts")
        .max_deliver(3)
        .backoff(BACKOFF)
        .dead_letter("metrics.counts.dead");
    let consumer = fixture::queue(
        "tests::metrics_counts",
        &stream,
        "metrics.counts.jobs",
        queue,
    )
    .concurrency(4);
    let handler = |incoming: Incoming| -> HandlerFuture {
        Box::pin(async move {
            let id = fixture::job_id(&incoming)?;
            let first = incoming.context().delivered() == 1;
            match id {
                100 | 101 if first => Err(HandlerError::new("fails on its first delivery")),
                300 if first => panic!("panics on its first delivery"),
                200 => Err(HandlerError::new("always fails")),
                // Simulated work: the histogram measures the handler's time.
                7 => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    Ok(())
                }
                _ => Ok(()),
            }
        })
    };
    let running = fx
        .run(Topology::new().stream(stream).consumer(consumer, handler))
        .await;
    let series = Series {
        stream: "METRICS_COUNTS",
        consumer: "metrics_counts",
    };

    let js = fx.jetstream().await;
    fixture::publish_jobs(
        &js,
        "metrics.counts.jobs",
        (0..10).chain([100, 101, 300, 200]),
    )
    .await;
    js.publish("metrics.counts.jobs", "not a job".into())
        .await
        .unwrap()
        .await
        .expect("the stream takes the undecodable payload");

    eventually(Duration::from_secs(30), "every message settled", || {
        let status = running.health.consumers()[0].clone();
        async move { (status.handled == 13 && status.dead_lettered == 2).then_some(()) }
    })
    .await;
    // After the drain no handler runs: the values are final.
    let health = running.health.clone();
    running.stop().await.expect("clean drain");

    // 10 + 2 + 1 handled; 2 + 1 + 3 + 1 failures; 2 + 1 + 2 naks; 200 and the undecodable
    // payload dead-lettered; redeliveries: 2 + 1 + 2.
    assert_eq!(series.counter(names::HANDLED), 13);
    assert_eq!(series.counter(names::FAILED), 7);
    assert_eq!(series.counter(names::RETRIED), 5);
    assert_eq!(series.counter(names::DEAD_LETTERED), 2);
    assert_eq!(series.counter(names::REDELIVERED), 5);
    let samples = series.samples(names::HANDLER_DURATION);
    assert_eq!(
        samples.len(),
        10 + 4 + 2 + 3 + 1,
        "one sample per handler run"
    );
    let longest = samples.iter().copied().fold(0.0, f64::max);
    assert!(
        (0.2..5.0).contains(&longest),
        "the 200 ms handler is measured in seconds: {samples:?}"
    );
    assert_eq!(series.gauge(names::IN_FLIGHT), Some(0.0));

    let status = health.consumers()[0].clone();
    assert_eq!(
        (
            status.handled,
            status.failed,
            status.retried,
            status.dead_lettered
        ),
        (13, 7, 5, 2),
        "Health counts what the metrics count: {status}"
    );

    let dead = js.get_stream("METRICS_COUNTS").await.unwrap();
    let info = fixture::consumer_info(&js, "METRICS_COUNTS", "metrics_counts")
        .await
        .expect("the consumer stays");
    assert_eq!(
        info.num_ack_pending, 0,
        "every message settled on the server"
    );
    assert_eq!(
        dead.get_info().await.unwrap().state.messages,
        15 + 2,
        "15 messages and their 2 dead letters"
    );
}

/// Handlers held at a gate: the in-flight gauge shows the two running, the lag gauges reach
/// the pending and ack-pending numbers the server reports (read at the heartbeat), and all
/// three return to zero once the gate opens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_gauges_follow_in_flight_handlers_and_the_servers_lag() {
    values();
    let fx = Fixture::start().await;
    let stream = fixture::stream("METRICS_LAG", &["metrics.lag.jobs"]);
    let consumer = fixture::queue(
        "tests::metrics_lag",
        &stream,
        "metrics.lag.jobs",
        QueueDecl::new("metrics_lag").ack_wait(Duration::from_secs(30)),
    )
    .concurrency(2);
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let handler = gated(&gate);
    let running = fx
        .run(Topology::new().stream(stream).consumer(consumer, handler))
        .await;
    let series = Series {
        stream: "METRICS_LAG",
        consumer: "metrics_lag",
    };

    let js = fx.jetstream().await;
    fixture::publish_jobs(&js, "metrics.lag.jobs", 0..6).await;

    eventually(Duration::from_secs(10), "two handlers in flight", || {
        let in_flight = series.gauge(names::IN_FLIGHT);
        async move { (in_flight == Some(2.0)).then_some(()) }
    })
    .await;
    let (pending, ack_pending) = eventually(
        Duration::from_secs(10),
        "the lag gauges at the server's numbers",
        || async {
            let info = fixture::consumer_info(&js, "METRICS_LAG", "metrics_lag").await?;
            let server = (info.num_pending as f64, info.num_ack_pending as f64);
            let gauges = (
                series.gauge(names::PENDING)?,
                series.gauge(names::ACK_PENDING)?,
            );
            (gauges == server && server == (4.0, 2.0)).then_some(gauges)
        },
    )
    .await;
    assert_eq!(pending + ack_pending, 6.0, "every job is pending or held");
    assert_eq!(
        series.gauge(names::IN_FLIGHT),
        Some(2.0),
        "the gate still holds two"
    );

    gate.add_permits(6);
    eventually(Duration::from_secs(10), "every gauge back at zero", || {
        let now = (
            series.gauge(names::IN_FLIGHT),
            series.gauge(names::PENDING),
            series.gauge(names::ACK_PENDING),
        );
        async move { (now == (Some(0.0), Some(0.0), Some(0.0))).then_some(()) }
    })
    .await;
    assert_eq!(series.counter(names::HANDLED), 6);
    assert_eq!(series.samples(names::HANDLER_DURATION).len(), 6);
    running.stop().await.expect("clean drain");
}

/// A broadcast relay's server-side name is new in every process: its series are labelled by
/// the handler's path instead, so a restart continues the same series.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_label_a_broadcast_by_its_handler_not_its_relay_name() {
    values();
    let fx = Fixture::start().await;
    let stream = fixture::stream("METRICS_RELAY", &["metrics.relay.status"]);
    let relay = fixture::relay("tests::metrics_relay", &stream, "metrics.relay.status");
    let handler = |_: Incoming| -> HandlerFuture { Box::pin(async { Ok(()) }) };
    let running = fx
        .run(Topology::new().stream(stream).consumer(relay, handler))
        .await;
    let js = fx.jetstream().await;
    fixture::publish_jobs(&js, "metrics.relay.status", 0..3).await;
    eventually(Duration::from_secs(10), "three broadcasts handled", || {
        let handled = running.health.consumers()[0].handled;
        async move { (handled == 3).then_some(()) }
    })
    .await;
    running.stop().await.expect("clean drain");

    let series = Series {
        stream: "METRICS_RELAY",
        consumer: "tests::metrics_relay",
    };
    assert_eq!(series.counter(names::HANDLED), 3);
    assert_eq!(series.samples(names::HANDLER_DURATION).len(), 3);
    assert_eq!(
        series.gauge(names::PENDING),
        None,
        "a relay has no lag gauges"
    );
}

/// A confirmed ack that nothing can confirm (its stream was deleted while the handler ran)
/// is counted as a failed ack, not as handled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_an_ack_that_was_not_confirmed() {
    values();
    let fx = Fixture::start().await;
    let js = fx.jetstream().await;
    // An external stream (not in the topology): the runtime cannot re-create it.
    let stream = fixture::stream("METRICS_ACKS", &["metrics.acks.jobs"]).external();
    js.create_stream(async_nats::jetstream::stream::Config {
        name: stream.name.to_owned(),
        subjects: vec!["metrics.acks.jobs".to_owned()],
        ..Default::default()
    })
    .await
    .expect("the stream is created");
    let queue = QueueDecl::new("metrics_acks").ack(nats_topology::model::AckMode::Confirmed);
    let consumer = fixture::queue("tests::metrics_acks", &stream, "metrics.acks.jobs", queue);
    let started = Arc::new(tokio::sync::Semaphore::new(0));
    let go = Arc::new(tokio::sync::Semaphore::new(0));
    let handler = {
        let (started, go) = (started.clone(), go.clone());
        move |_incoming: Incoming| -> HandlerFuture {
            let (started, go) = (started.clone(), go.clone());
            Box::pin(async move {
                started.add_permits(1);
                go.acquire().await.expect("open").forget();
                Ok::<(), HandlerError>(())
            })
        }
    };
    let running = fx
        .run(Topology::new().stream(stream).consumer(consumer, handler))
        .await;
    let series = Series {
        stream: "METRICS_ACKS",
        consumer: "metrics_acks",
    };

    fixture::publish_jobs(&js, "metrics.acks.jobs", [1]).await;
    tokio::time::timeout(Duration::from_secs(30), started.acquire())
        .await
        .expect("the handler starts")
        .expect("open")
        .forget();
    js.delete_stream(stream.name)
        .await
        .expect("the stream is deleted");
    go.add_permits(1);

    eventually(
        Duration::from_secs(30),
        "the failed ack counted",
        || async { (series.counter(names::ACKS_FAILED) == 1).then_some(()) },
    )
    .await;
    assert_eq!(series.counter(names::HANDLED), 0);
    // The runtime stops (its stream is gone: nothing to drain).
    let _ = running.stop().await;
}

/// A permission the server denies is counted with the labels of the declaration that needs
/// it: here the consumer's pull requests, without `$JS.API.CONSUMER.MSG.NEXT.<stream>.<name>`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permission_violations_are_counted_by_declaration() {
    use nats_topology::export::{self, Role, Verb};
    values();
    let stream = fixture::stream("METRICS_DENIED", &["metrics.denied.>"]);
    let consumer = fixture::queue(
        "tests::metrics_denied",
        &stream,
        "metrics.denied.jobs",
        QueueDecl::new("metrics_denied"),
    );
    let noop = |_: Incoming| -> HandlerFuture { Box::pin(async { Ok::<(), HandlerError>(()) }) };
    let topology = Topology::new().stream(stream).consumer(consumer, noop);
    let role = Role::owner("metered");
    let mut permissions = export::permissions(&topology, &role);
    let pull = "$JS.API.CONSUMER.MSG.NEXT.METRICS_DENIED.metrics_denied";
    permissions
        .entries
        .retain(|e| !(e.action == Verb::Publish && e.subject == pull));
    let server = nats_topology_testkit::NatsServer::builder()
        .config(fixture::users_config(&[("metered", "pw", &permissions)]))
        .probe_user("admin", "admin")
        .start()
        .await
        .unwrap();
    let client = fixture::client_of(&server.url(), "metered", "pw", role.inbox_prefix()).await;
    let running = fixture::Running::spawn(
        fixture::fast(nats_topology::Runtime::builder(client))
            .topology(topology)
            .build()
            .unwrap(),
    );
    let key = Key::from_parts(
        names::PERMISSION_VIOLATIONS,
        vec![
            Label::new("stream", "METRICS_DENIED"),
            Label::new("consumer", "metrics_denied"),
            Label::new("action", "publish"),
        ],
    );
    eventually(Duration::from_secs(10), "the violation counted", || {
        let counted = values().counter(&key);
        async move { (counted >= 1).then_some(()) }
    })
    .await;
    assert!(!running.health.ready(), "{}", running.health);
    let denial = &running.health.denials()[0];
    assert_eq!(denial.subject, pull);
    running.stop().await.expect("clean drain");
}

/// A partitioned group's metrics on one replica (nats-server 2.11 or newer): how many
/// partitions it holds and how often its share changed, through a second replica joining and
/// draining (both in this process: the held gauge is the same series for both, and each holds
/// one of the two partitions while both run); and each partition's lag, at the server's
/// numbers for that partition's consumer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_show_the_partitions_held_their_rebalances_and_each_partitions_lag() {
    values();
    let fx = Fixture::start().await;
    let stream = fixture::stream("METRICS_PARTS", &["metrics.parts.*"]).subject_transform(
        SubjectTransform::new(
            "metrics.parts.*",
            "{{partition(2,1)}}.metrics.parts.{{wildcard(1)}}",
        ),
    );
    let consumer = fixture::queue(
        "tests::metrics_parts",
        &stream,
        "metrics.parts.*",
        QueueDecl::new("metrics_parts")
            .partitioned(2, &[1])
            .ack_wait(Duration::from_secs(30)),
    );
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let topology = || {
        Topology::new()
            .stream(stream)
            .consumer(consumer, gated(&gate))
    };
    let group = |name: &'static str| {
        Key::from_parts(
            name,
            vec![
                Label::new("stream", "METRICS_PARTS"),
                Label::new("group", "metrics_parts"),
            ],
        )
    };
    let share = || {
        (
            values().gauge(&group(names::PARTITIONS_HELD)),
            values().counter(&group(names::PARTITION_REBALANCES)),
        )
    };
    let settles_at = async |held: f64, rebalances: u64, what: &str| {
        eventually(Duration::from_secs(20), what, || {
            let now = share();
            async move { (now == (Some(held), rebalances)).then_some(()) }
        })
        .await;
    };

    let first = fx.run(topology()).await;
    settles_at(
        2.0,
        1,
        "the lone replica holds both partitions, one rebalance",
    )
    .await;

    // Six jobs over six keys, held by the gate: in each partition one delivered and waiting
    // for its ack, the others pending.
    let js = fx.jetstream().await;
    for key in 0..6 {
        fixture::publish_jobs(&js, &format!("metrics.parts.{key}"), [key]).await;
    }
    let lags = eventually(
        Duration::from_secs(10),
        "each partition's lag gauges at the server's numbers",
        || async {
            let mut lags = Vec::new();
            for partition in ["metrics_parts-p0", "metrics_parts-p1"] {
                let info = fixture::consumer_info(&js, "METRICS_PARTS", partition).await?;
                let server = (info.num_pending as f64, info.num_ack_pending as f64);
                let series = Series {
                    stream: "METRICS_PARTS",
                    consumer: partition,
                };
                let gauges = (
                    series.gauge(names::PENDING)?,
                    series.gauge(names::ACK_PENDING)?,
                );
                if gauges != server {
                    return None;
                }
                lags.push(gauges);
            }
            let total: f64 = lags.iter().map(|(p, a)| p + a).sum();
            (total == 6.0).then_some(lags)
        },
    )
    .await;
    assert!(
        lags.iter().all(|&(_, ack_pending)| ack_pending <= 1.0),
        "a partition delivers one at a time: {lags:?}"
    );
    gate.add_permits(1_000);
    eventually(Duration::from_secs(10), "every job handled", || {
        let handled: u64 = first.health.consumers().iter().map(|c| c.handled).sum();
        async move { (handled == 6).then_some(()) }
    })
    .await;

    // A second replica joins: each holds one; the first's share changed, the second's began.
    let second = fx.run(topology()).await;
    settles_at(1.0, 3, "each replica holds one partition").await;
    // It drains: the first holds both again.
    second.stop().await.expect("clean drain");
    settles_at(2.0, 4, "the first replica holds both partitions again").await;
    first.stop().await.expect("clean drain");
}
