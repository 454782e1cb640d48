//! Network faults on real servers, staged through the test kit's links (loopback proxies):
//! a replica's link stalled under load, a partition cutting off the node that leads a queue
//! consumer, or the one that leads the stream handlers publish to, acks held by a one-way
//! stall, 200 ms on every link, a relay's link stalled.
//!
//! Each test asserts which ids were handled: none lost, and each once except where the fault
//! forces a redelivery (acks held in a stall or lost with a cut-off leader), which the test
//! names. How fast faults are noticed and recovered from is measured by
//! `examples/bench_failover.rs`, not here.

mod fixture;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream;
use fixture::{Fixture, Running, connect_in_order};
use futures::StreamExt;
use nats_topology::model::{QueueDecl, Storage};
use nats_topology::{ConsumerState, HandlerError, Health, Runtime, Topology};
use nats_topology_testkit::{Direction, Link, NatsCluster, eventually};
use tokio::time::Instant;

/// Every id a runtime's handler handled, with when.
#[derive(Clone, Default)]
struct Timeline(Arc<Mutex<Vec<(u64, Instant)>>>);

impl Timeline {
    fn record(&self, id: u64) {
        self.0.lock().unwrap().push((id, Instant::now()));
    }

    fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }

    fn ids(&self) -> BTreeSet<u64> {
        self.0.lock().unwrap().iter().map(|(id, _)| *id).collect()
    }

    /// The ids handled at or after `from` (and before `to`, if given).
    fn between(&self, from: Instant, to: Option<Instant>) -> BTreeSet<u64> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, at)| *at >= from && to.is_none_or(|to| *at < to))
            .map(|(id, _)| *id)
            .collect()
    }

    /// When it first handled something at or after `from`.
    fn first_after(&self, from: Instant) -> Option<Instant> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .map(|(_, at)| *at)
            .find(|at| *at >= from)
    }
}

/// The ids handled more than once across `timelines`.
fn handled_twice(timelines: &[&Timeline]) -> BTreeSet<u64> {
    let mut seen = BTreeSet::new();
    let mut twice = BTreeSet::new();
    for timeline in timelines {
        for (id, _) in timeline.0.lock().unwrap().iter() {
            if !seen.insert(*id) {
                twice.insert(*id);
            }
        }
    }
    twice
}

/// A topology of one queue consumer whose handler works for `work`, then records the job.
fn jobs(
    stream: nats_topology::model::StreamDecl,
    consumer: nats_topology::model::ConsumerDecl,
    timeline: Timeline,
    work: Duration,
) -> Topology {
    Topology::new()
        .stream(stream)
        .consumer(consumer, move |incoming| {
            let timeline = timeline.clone();
            Box::pin(async move {
                let id = fixture::job_id(&incoming)?;
                // Simulated work, so that a fault finds messages in flight.
                tokio::time::sleep(work).await;
                timeline.record(id);
                Ok::<(), HandlerError>(())
            })
        })
}

/// Publishes job after job (each until acknowledged, with a message id) every `every`, from a
/// task of its own, until stopped.
struct Publisher {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<u64>,
}

impl Publisher {
    fn start(js: jetstream::Context, subject: &'static str, every: Duration) -> Publisher {
        let (stop, mut stopped) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(async move {
            let mut ticker = tokio::time::interval(every);
            let mut next = 0;
            loop {
                tokio::select! {
                    _ = &mut stopped => return next,
                    _ = ticker.tick() => {}
                }
                fixture::publish_job_until_acked(&js, subject, next).await;
                next += 1;
            }
        });
        Publisher { stop, task }
    }

    /// Stops publishing; returns how many jobs were published (ids `0..n`).
    async fn stop(self) -> u64 {
        let _ = self.stop.send(());
        self.task.await.expect("the publisher does not panic")
    }
}

/// The states a runtime's first consumer went through, with when, recorded as health changes.
#[derive(Clone, Default)]
struct States(Arc<Mutex<Vec<(ConsumerState, Instant)>>>);

impl States {
    fn watch(health: Health) -> States {
        let states = States::default();
        let recorded = states.clone();
        tokio::spawn(async move {
            loop {
                let state = health.consumers()[0].state.clone();
                {
                    let mut all = recorded.0.lock().unwrap();
                    if all.last().is_none_or(|(last, _)| {
                        std::mem::discriminant(last) != std::mem::discriminant(&state)
                    }) {
                        all.push((state, Instant::now()));
                    }
                }
                health.changed().await;
            }
        });
        states
    }

    /// When the consumer first was not running at or after `from`.
    fn first_down_after(&self, from: Instant) -> Option<(ConsumerState, Instant)> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .find(|(state, at)| *at >= from && *state != ConsumerState::Running)
            .cloned()
    }

    /// When it first ran at or after `from`.
    fn first_running_after(&self, from: Instant) -> Option<Instant> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .find(|(state, at)| *at >= from && *state == ConsumerState::Running)
            .map(|(_, at)| *at)
    }
}

fn is_stalled(health: &Health) -> bool {
    matches!(health.consumers()[0].state, ConsumerState::Stalled { .. })
}

/// One replica's link stalls (both ways, connections open) for at least three heartbeats under
/// load: its consumer is reported stalled before the stall ends, the messages it holds go to
/// the other replica after `ack_wait`, and it consumes again in the same session once healed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_link_is_noticed_its_work_goes_to_the_other_replica_and_it_comes_back() {
    let heartbeat = Duration::from_secs(1);
    let fx = Fixture::start().await;
    let stream = fixture::stream("STALLED", &["stalled.>"]);
    let consumer = fixture::queue(
        "tests::stalled",
        &stream,
        "stalled.jobs",
        QueueDecl::new("workers").ack_wait(Duration::from_secs(2)),
    )
    .concurrency(4);
    let links = [
        Link::start(fx.server.port()).await.expect("a link"),
        Link::start(fx.server.port()).await.expect("a link"),
    ];
    let timelines = [Timeline::default(), Timeline::default()];
    let mut runs = Vec::new();
    for (link, timeline) in links.iter().zip(&timelines) {
        let client = connect_in_order(&[link.url()]).await;
        let topology = jobs(
            stream,
            consumer,
            timeline.clone(),
            Duration::from_millis(200),
        );
        let builder = fixture::fast(Runtime::builder(client))
            .heartbeat(heartbeat)
            .topology(topology);
        runs.push(Running::start(builder).await);
    }
    let states = States::watch(runs[0].health.clone());
    let publisher = Publisher::start(
        fx.jetstream().await,
        "stalled.jobs",
        Duration::from_millis(20),
    );
    eventually(Duration::from_secs(30), "both replicas busy", || {
        let busy = timelines.iter().all(|t| t.len() >= 10);
        async move { busy.then_some(()) }
    })
    .await;

    links[0].stall();
    let stalled = Instant::now();
    // Noticed while the stall lasts (three heartbeats at least).
    eventually(heartbeat * 3, "replica 0 stalled", || {
        let stalled = is_stalled(&runs[0].health);
        async move { stalled.then_some(()) }
    })
    .await;
    assert!(!runs[0].health.ready(), "a stalled replica is not ready");
    // What replica 0 handled during the stall was acknowledged into the stall: after ack_wait
    // the server gives it to replica 1.
    eventually(
        Duration::from_secs(30),
        "replica 0's unacknowledged work handled by replica 1",
        || {
            let held = timelines[0].between(stalled, None);
            let taken = timelines[1].ids();
            let done =
                !held.is_empty() && held.is_subset(&taken) && stalled.elapsed() >= heartbeat * 3;
            async move { done.then_some(()) }
        },
    )
    .await;

    links[0].heal();
    let healed = Instant::now();
    runs[0].ready(Duration::from_secs(10)).await;
    eventually(
        Duration::from_secs(30),
        "replica 0 handles work again",
        || {
            let again = timelines[0].first_after(healed).is_some();
            async move { again.then_some(()) }
        },
    )
    .await;
    let published = publisher.stop().await;
    let all: BTreeSet<u64> = (0..published).collect();
    eventually(Duration::from_secs(30), "every job handled", || {
        let handled: BTreeSet<u64> = timelines.iter().flat_map(Timeline::ids).collect();
        let done = handled.is_superset(&all);
        async move { done.then_some(()) }
    })
    .await;
    fixture::assert_restarts(&runs, 0);
    for outcome in Running::stop_all(runs).await {
        outcome.expect("a clean drain");
    }
    let twice = handled_twice(&[&timelines[0], &timelines[1]]);
    let held = timelines[0].between(stalled, Some(healed));
    assert!(
        twice.is_subset(&held),
        "only what the stalled replica handled during the stall is handled twice: {:?}",
        twice.difference(&held).collect::<Vec<_>>()
    );
    let noticed = states.first_down_after(stalled).expect("noticed").1 - stalled;
    let back = states.first_running_after(healed).expect("running again") - healed;
    eprintln!(
        "{published} jobs; stall noticed after {noticed:?} (heartbeat {heartbeat:?}); running \
         again {back:?} after the heal; handled twice: {}",
        twice.len()
    );
}
