//! What a handler depends on goes down (a database, an API): two replicas of a queue consumer
//! at the default settings (`max_deliver = 20`, `ack_wait = 5s` declared), 2,000 messages over
//! 10 s, the handlers failing transiently for 30 s (and for 5 minutes) from the first second.
//! The consumer stops taking messages and probes with one instead of redelivering the failures
//! against the dependency: nothing is dead-lettered or lost, the failed attempts during the
//! outage are bounded by the probes and what was in flight, health shows `backing off` (and
//! stays ready), and every message is handled within seconds of the dependency's return. Beside
//! it: a dependency that fails one message in ten never stops the consumer (poison or flakiness
//! is not an outage), and a handler that says its dependency is down
//! (`HandlerError::unavailable`) stops it at once.

mod fixture;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fixture::{Fixture, Running};
use nats_topology::model::QueueDecl;
use nats_topology::{ConsumerState, HandlerError, Health, Runtime, Topology};
use nats_topology_testkit::eventually;
use tokio::time::Instant;

const MESSAGES: u64 = 2_000;

/// The dependency: up or down, and what the handlers did with it.
#[derive(Default, Clone)]
struct Dependency {
    down: Arc<AtomicBool>,
    /// Fail every n-th call while up (0: never).
    fail_every: Arc<AtomicU64>,
    /// Say so when down (`HandlerError::unavailable`) rather than a plain transient error.
    says_unavailable: Arc<AtomicBool>,
    calls: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
    handled: Arc<Mutex<Vec<(u64, Instant)>>>,
}

impl Dependency {
    fn handled_ids(&self) -> BTreeSet<u64> {
        self.handled
            .lock()
            .unwrap()
            .iter()
            .map(|(id, _)| *id)
            .collect()
    }
    fn last_handled(&self) -> Option<Instant> {
        self.handled.lock().unwrap().iter().map(|(_, at)| *at).max()
    }
}

fn topology(stream: &str, dependency: &Dependency) -> Topology {
    let decl = fixture::stream(stream, &[&format!("{}.>", stream.to_lowercase())]);
    let consumer = fixture::queue(
        "tests::on_order",
        &decl,
        &format!("{}.orders", stream.to_lowercase()),
        QueueDecl::new("writers")
            .max_deliver(20)
            .ack_wait(Duration::from_secs(5)),
    );
    let dependency = dependency.clone();
    Topology::new()
        .stream(decl)
        .consumer(consumer, move |incoming| {
            let dependency = dependency.clone();
            Box::pin(async move {
                let id = fixture::job_id(&incoming)?;
                let call = dependency.calls.fetch_add(1, Ordering::Relaxed) + 1;
                // A row written: a millisecond of simulated work, not synchronisation.
                tokio::time::sleep(Duration::from_millis(1)).await;
                let every = dependency.fail_every.load(Ordering::Relaxed);
                if dependency.down.load(Ordering::Relaxed) {
                    dependency.failed.fetch_add(1, Ordering::Relaxed);
                    return Err(if dependency.says_unavailable.load(Ordering::Relaxed) {
                        HandlerError::unavailable("the database refuses connections")
                    } else {
                        HandlerError::new("the database refuses connections")
                    });
                }
                if every > 0 && call.is_multiple_of(every) {
                    dependency.failed.fetch_add(1, Ordering::Relaxed);
                    return Err(HandlerError::new("a deadlock, retried"));
                }
                dependency
                    .handled
                    .lock()
                    .unwrap()
                    .push((id, Instant::now()));
                Ok(())
            })
        })
}

fn backing_off(health: &Health) -> bool {
    matches!(
        health.consumers()[0].state,
        ConsumerState::BackingOff { .. }
    )
}

/// Publishes `MESSAGES` over about 10 s (200 a second) from a task.
fn publish_over_ten_seconds(js: async_nats::jetstream::Context, subject: String) {
    tokio::spawn(async move {
        for chunk in 0..(MESSAGES / 20) {
            let ids = chunk * 20 + 1..=chunk * 20 + 20;
            fixture::publish_jobs(&js, &subject, ids).await;
            // The load's pace is the scenario, not synchronisation.
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
}

struct Replicas {
    runs: Vec<Running>,
}

impl Replicas {
    async fn start(
        fx: &Fixture<nats_topology_testkit::NatsServer>,
        stream: &str,
        dependency: &Dependency,
    ) -> Replicas {
        let mut runs = Vec::new();
        for _ in 0..2 {
            runs.push(
                Running::start(
                    Runtime::builder(fx.connect().await).topology(topology(stream, dependency)),
                )
                .await,
            );
        }
        Replicas { runs }
    }

    fn dead_lettered(&self) -> u64 {
        self.runs
            .iter()
            .map(|r| r.health.consumers()[0].dead_lettered)
            .sum()
    }

    async fn stop(self) {
        for run in self.runs {
            run.stop().await.expect("a clean drain");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dependency_down_thirty_seconds_stops_the_consumers_and_loses_nothing() {
    dependency_down("OUTAGE", Duration::from_secs(30)).await;
}

/// Five minutes: longer than the redelivery delays of 20 deliveries add up to (about 175 s on
/// average), so without the breaker `max_deliver` would end messages that were never wrong.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dependency_down_five_minutes_stops_the_consumers_and_loses_nothing() {
    dependency_down("OUTAGELONG", Duration::from_secs(300)).await;
}

/// Two replicas, 2,000 messages over 10 s, the dependency down for `length` from after the
/// first hundred handled.
async fn dependency_down(stream: &str, length: Duration) {
    let fx = Fixture::start().await;
    let dependency = Dependency::default();
    let replicas = Replicas::start(&fx, stream, &dependency).await;
    let js = fx.jetstream().await;
    publish_over_ten_seconds(js, format!("{}.orders", stream.to_lowercase()));
    eventually(Duration::from_secs(10), "a first hundred handled", || {
        let n = dependency.handled_ids().len();
        async move { (n >= 100).then_some(()) }
    })
    .await;

    dependency.down.store(true, Ordering::Relaxed);
    let outage = Instant::now();
    let calls_before = dependency.calls.load(Ordering::Relaxed);
    eventually(Duration::from_secs(10), "both replicas backing off", || {
        let both = replicas.runs.iter().all(|r| backing_off(&r.health));
        async move { both.then_some(()) }
    })
    .await;
    let noticed = outage.elapsed();
    for run in &replicas.runs {
        assert!(run.health.ready(), "backing off is ready: {}", run.health);
    }
    // The outage's length is the scenario, not synchronisation.
    tokio::time::sleep(length.saturating_sub(outage.elapsed())).await;
    let attempts = dependency.calls.load(Ordering::Relaxed) - calls_before;
    dependency.down.store(false, Ordering::Relaxed);
    let recovered = Instant::now();

    eventually(Duration::from_secs(60), "every message handled", || {
        let n = dependency.handled_ids().len() as u64;
        async move { (n >= MESSAGES).then_some(()) }
    })
    .await;
    let tail = dependency.last_handled().map_or(Duration::ZERO, |last| {
        last.saturating_duration_since(recovered)
    });
    let dead_lettered = replicas.dead_lettered();
    let lost = MESSAGES - dependency.handled_ids().len() as u64;
    println!(
        "outage {length:?}: noticed after {noticed:?}; dead-lettered = {dead_lettered}, lost = \
         {lost}, failed attempts during the outage = {attempts}, recovery to the last message \
         handled = {tail:?}"
    );
    assert_eq!((dead_lettered, lost), (0, 0));
    // What was in flight when it opened (each replica holds at most 2 x its concurrency of 64
    // after the ten failures that open it), and the probes: after 1, 2, 4 and 8 s, then every
    // 10 s (the default `probe_max`), one a replica each time.
    let probes = 4 + length.as_secs().saturating_sub(15) / 10 + 1;
    assert!(
        attempts <= 2 * (10 + 2 * 64 + probes),
        "failed attempts bounded by what was in flight and {probes} probes a replica: {attempts}"
    );
    assert!(
        tail <= Duration::from_secs(15),
        "every message handled within a probe interval and a drain of the recovery: {tail:?}"
    );
    for run in &replicas.runs {
        eventually(Duration::from_secs(5), "running again", || {
            let up = matches!(run.health.consumers()[0].state, ConsumerState::Running);
            async move { up.then_some(()) }
        })
        .await;
    }
    replicas.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_failure_in_ten_is_not_an_outage() {
    let fx = Fixture::start().await;
    let dependency = Dependency::default();
    dependency.fail_every.store(10, Ordering::Relaxed);
    let replicas = Replicas::start(&fx, "FLAKY", &dependency).await;
    let js = fx.jetstream().await;
    publish_over_ten_seconds(js, "flaky.orders".to_owned());
    let mut backed_off = false;
    eventually(Duration::from_secs(60), "every message handled", || {
        backed_off |= replicas.runs.iter().any(|r| backing_off(&r.health));
        let n = dependency.handled_ids().len() as u64;
        async move { (n >= MESSAGES).then_some(()) }
    })
    .await;
    assert!(!backed_off, "one failure in ten never stops the consumer");
    assert_eq!(replicas.dead_lettered(), 0);
    replicas.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_that_says_its_dependency_is_down_stops_the_consumer_at_once() {
    let fx = Fixture::start().await;
    let dependency = Dependency::default();
    dependency.says_unavailable.store(true, Ordering::Relaxed);
    dependency.down.store(true, Ordering::Relaxed);
    let replicas = Replicas::start(&fx, "UNAVAILABLE", &dependency).await;
    let js = fx.jetstream().await;
    fixture::publish_jobs(&js, "unavailable.orders", 1..=100).await;
    eventually(Duration::from_secs(10), "both replicas backing off", || {
        let both = replicas.runs.iter().all(|r| backing_off(&r.health));
        async move { both.then_some(()) }
    })
    .await;
    // The first failure opens it: at most what each replica had started by then failed.
    let failed = dependency.failed.load(Ordering::Relaxed);
    assert!(
        failed <= 2 * 64,
        "stopped at the first failure: {failed} failed"
    );
    dependency.down.store(false, Ordering::Relaxed);
    eventually(Duration::from_secs(30), "every message handled", || {
        let n = dependency.handled_ids().len();
        async move { (n >= 100).then_some(()) }
    })
    .await;
    assert_eq!(replicas.dead_lettered(), 0);
    replicas.stop().await;
}

static LEDGER: nats_topology::model::ServiceDecl =
    nats_topology::model::ServiceDecl::new("ledger", "1.0.0");

/// The `Nats-Service-Error-Code` of an answer, if it is an error.
fn error_code(answer: &async_nats::Message) -> Option<u16> {
    answer
        .headers
        .as_ref()?
        .get("Nats-Service-Error-Code")?
        .as_str()
        .parse()
        .ok()
}

/// An endpoint whose dependency is down answers 503 at once once its handlers have failed ten
/// times, instead of running each request against the dependency (every caller would wait for
/// it), probes with one request at a growing interval, stays ready (`backing off`), and answers
/// normally again once a probe succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_whose_dependency_is_down_sheds_requests_with_503() {
    let fx = Fixture::start().await;
    let down = Arc::new(AtomicBool::new(true));
    let calls = Arc::new(AtomicU64::new(0));
    let (handler_down, handler_calls) = (down.clone(), calls.clone());
    let topology = Topology::new().endpoint(
        nats_topology::model::EndpointDecl::new(
            "tests::balance",
            &LEDGER,
            "balance",
            "ledger.balance",
        ),
        move |request| {
            let (down, calls) = (handler_down.clone(), handler_calls.clone());
            Box::pin(async move {
                calls.fetch_add(1, Ordering::Relaxed);
                if down.load(Ordering::Relaxed) {
                    return Err(nats_topology::ServiceError::new(
                        500,
                        "the ledger database refuses connections",
                    ));
                }
                Ok(request.payload().clone())
            })
        },
    );
    let running = Running::start(Runtime::builder(fx.connect().await).topology(topology)).await;
    let client = fx.connect().await;
    let mut codes = Vec::new();
    for _ in 0..200 {
        let answer = client
            .request("ledger.balance", "1".into())
            .await
            .expect("answered");
        codes.push(error_code(&answer));
    }
    let ran = calls.load(Ordering::Relaxed);
    let backing_off = matches!(
        running.health.endpoints()[0].state,
        nats_topology::ServingState::BackingOff { .. }
    );
    println!(
        "dependency down: 200 requests, the handler ran {ran} times; answered {:?}",
        {
            let mut counts = std::collections::BTreeMap::new();
            for code in &codes {
                *counts.entry(*code).or_insert(0) += 1;
            }
            counts
        }
    );
    assert!(backing_off, "backing off: {}", running.health);
    assert!(
        running.health.ready(),
        "backing off is ready: {}",
        running.health
    );
    assert!(
        codes.iter().all(|c| matches!(c, Some(500 | 503))),
        "every request answered with an error: {codes:?}"
    );
    // Ten failures open it; at most a probe or two ran during the rest (they take 1 s to come).
    assert!(ran <= 12, "the handler ran {ran} times for 200 requests");

    down.store(false, Ordering::Relaxed);
    eventually(Duration::from_secs(20), "answered normally again", || {
        let client = client.clone();
        async move {
            let answer = client.request("ledger.balance", "1".into()).await.ok()?;
            error_code(&answer).is_none().then_some(())
        }
    })
    .await;
    assert!(
        matches!(
            running.health.endpoints()[0].state,
            nats_topology::ServingState::Running
        ),
        "running again: {}",
        running.health
    );
    running.stop().await.expect("a clean drain");
}
