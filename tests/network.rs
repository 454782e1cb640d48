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

/// Waits until every timeline has handled at least `n` jobs.
async fn busy(timelines: &[Timeline], n: usize) {
    eventually(Duration::from_secs(30), "every replica busy", || {
        let busy = timelines.iter().all(|t| t.len() >= n);
        async move { busy.then_some(()) }
    })
    .await;
}

/// Waits until the jobs `0..published` are all handled, across `timelines`.
async fn all_handled(timelines: &[Timeline], published: u64) {
    let all: BTreeSet<u64> = (0..published).collect();
    eventually(Duration::from_secs(60), "every job handled", || {
        let handled: BTreeSet<u64> = timelines.iter().flat_map(Timeline::ids).collect();
        let done = handled.is_superset(&all);
        async move { done.then_some(()) }
    })
    .await;
}

/// An R3 file stream.
fn r3_stream(name: &str, subjects: &[&str]) -> nats_topology::model::StreamDecl {
    fixture::stream(name, subjects)
        .replicas(3)
        .storage(Storage::File)
}

/// The ids handled more than once across `timelines`.
/// `at - from` in milliseconds, negative when `at` is earlier.
fn signed_ms(at: Instant, from: Instant) -> i128 {
    if at >= from {
        (at - from).as_millis() as i128
    } else {
        -((from - at).as_millis() as i128)
    }
}

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
    jobs_seen(stream, consumer, Timeline::default(), timeline, work)
}

/// As [`jobs`], also recording in `started` when each job reached the handler.
fn jobs_seen(
    stream: nats_topology::model::StreamDecl,
    consumer: nats_topology::model::ConsumerDecl,
    started: Timeline,
    timeline: Timeline,
    work: Duration,
) -> Topology {
    Topology::new()
        .stream(stream)
        .consumer(consumer, move |incoming| {
            let started = started.clone();
            let timeline = timeline.clone();
            Box::pin(async move {
                let id = fixture::job_id(&incoming)?;
                started.record(id);
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
    let started = [Timeline::default(), Timeline::default()];
    let mut runs = Vec::new();
    for ((link, timeline), started) in links.iter().zip(&timelines).zip(&started) {
        let client = connect_in_order(&[link.url()]).await;
        let topology = jobs_seen(
            stream,
            consumer,
            started.clone(),
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
    busy(&timelines, 10).await;

    let stalled = Instant::now();
    links[0].stall();
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

    // Taken before the heal: the stalled bytes flow at once, and this thread may be
    // descheduled between the two lines on a busy machine.
    let healed = Instant::now();
    links[0].heal();
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
    all_handled(&timelines, published).await;
    fixture::assert_restarts(&runs, 0);
    for outcome in Running::stop_all(runs).await {
        outcome.expect("a clean drain");
    }
    // A message is handled twice when replica 0's ack of it could not cross the link: it held
    // the message at some point from just before the stall (an ack written then may still be
    // in the link's buffers when it stalls) until just after the heal (a delivery the server
    // made before the stall arrives with the stalled bytes, after its redelivery to replica 1,
    // and is handled at once). Anything handled wholly outside that is handled once.
    let edge = Duration::from_millis(500);
    let twice = handled_twice(&[&timelines[0], &timelines[1]]);
    let finished_late = timelines[0].between(stalled - edge, None);
    let started_early: BTreeSet<u64> = started[0]
        .0
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, at)| *at <= healed + edge)
        .map(|(id, _)| *id)
        .collect();
    let held: BTreeSet<u64> = finished_late
        .intersection(&started_early)
        .copied()
        .collect();
    let when = |id: u64| -> Vec<String> {
        timelines
            .iter()
            .enumerate()
            .flat_map(|(replica, t)| {
                t.0.lock()
                    .unwrap()
                    .iter()
                    .filter(|(i, _)| *i == id)
                    .map(|(_, at)| {
                        format!(
                            "replica {replica} done at stall{:+}ms, heal{:+}ms",
                            signed_ms(*at, stalled),
                            signed_ms(*at, healed)
                        )
                    })
                    .collect::<Vec<_>>()
            })
            .collect()
    };
    assert!(
        twice.is_subset(&held),
        "only what the stalled replica held while its link stalled is handled twice: {:?}",
        twice
            .difference(&held)
            .map(|id| (*id, when(*id)))
            .collect::<Vec<_>>()
    );
    let noticed = states.first_down_after(stalled).expect("noticed").1 - stalled;
    let back = states.first_running_after(healed).expect("running again") - healed;
    eprintln!(
        "{published} jobs; stall noticed after {noticed:?} (heartbeat {heartbeat:?}); running \
         again {back:?} after the heal; handled twice: {}",
        twice.len()
    );
}

/// Asks the leader of `stream`'s consumer `consumer` (with `consumer`) or of `stream` itself
/// (without) to step down in favour of node `to`, until `to` leads it.
async fn lead_from(js: &jetstream::Context, stream: &str, consumer: Option<&str>, to: usize) {
    let what = format!("node{to} leading {stream}/{consumer:?}");
    eventually(Duration::from_secs(60), &what, || async {
        let leader = match consumer {
            Some(consumer) => {
                fixture::consumer_info(js, stream, consumer)
                    .await?
                    .cluster?
                    .leader?
            }
            None => js
                .get_stream(stream)
                .await
                .ok()?
                .info()
                .await
                .ok()?
                .cluster
                .as_ref()?
                .leader
                .clone()?,
        };
        if NatsCluster::node_index(&leader) == Some(to) {
            return Some(());
        }
        let subject = match consumer {
            Some(consumer) => format!("$JS.API.CONSUMER.LEADER.STEPDOWN.{stream}.{consumer}"),
            None => format!("$JS.API.STREAM.LEADER.STEPDOWN.{stream}"),
        };
        let body = serde_json::json!({ "placement": { "preferred": format!("node{to}") } });
        let _ = js.client().request(subject, body.to_string().into()).await;
        None
    })
    .await;
}

/// The leaders a consumer's `LEADER_ELECTED` advisories announce, with when they arrived.
#[derive(Clone, Default)]
struct Elections(Arc<Mutex<Vec<(String, Instant)>>>);

impl Elections {
    async fn watch(client: &async_nats::Client, stream: &str, consumer: &str) -> Elections {
        let subject = format!("$JS.EVENT.ADVISORY.CONSUMER.LEADER_ELECTED.{stream}.{consumer}");
        let mut advisories = client.subscribe(subject).await.expect("subscribe");
        // A round trip: the server has registered the subscription (a flush only writes).
        let _ = client.request("_NETWORK_TEST.ROUND_TRIP", "".into()).await;
        let elections = Elections::default();
        let recorded = elections.clone();
        tokio::spawn(async move {
            while let Some(message) = advisories.next().await {
                let advisory: serde_json::Value =
                    serde_json::from_slice(&message.payload).unwrap_or_default();
                let leader = advisory["leader"].as_str().unwrap_or_default().to_owned();
                recorded.0.lock().unwrap().push((leader, Instant::now()));
            }
        });
        elections
    }

    /// The first election at or after `from` of a leader other than node `old`.
    fn new_leader_after(&self, from: Instant, old: usize) -> Option<(String, Instant)> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .find(|(leader, at)| *at >= from && NatsCluster::node_index(leader) != Some(old))
            .cloned()
    }
}

/// A partition cuts off the node that leads an R3 queue consumer, with one replica connected
/// to that node and one to the majority side. The majority replica resumes once the majority
/// elects a new consumer leader; the cut-off replica notices, moves to a majority server (it
/// was given every server's URL) and consumes there during the cut. Nothing is lost; only
/// what was in flight around the cut (its acks lost with the old leader) is handled twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_of_the_consumer_leaders_node_moves_nobody_off_the_majority_and_its_replica_off_the_minority()
 {
    const CUT: usize = 0;
    let fx = Fixture::linked_cluster().await;
    let cluster = &fx.server;
    let stream = r3_stream("PARTED", &["parted.>"]);
    let consumer = fixture::queue(
        "tests::parted",
        &stream,
        "parted.jobs",
        QueueDecl::new("workers").ack_wait(Duration::from_secs(2)),
    )
    .concurrency(4);
    // The cut-off replica lists the node to be cut off first, the majority one last.
    let orders = [[CUT, 1, 2], [1, 2, CUT]];
    let timelines = [Timeline::default(), Timeline::default()];
    let mut runs = Vec::new();
    for (order, timeline) in orders.iter().zip(&timelines) {
        let mut urls = Vec::new();
        for &node in order {
            urls.push(cluster.client_link(node).await.expect("a link").url());
        }
        let client = connect_in_order(&urls).await;
        let topology = jobs(
            stream,
            consumer,
            timeline.clone(),
            Duration::from_millis(50),
        );
        let builder = fixture::fast(Runtime::builder(client)).topology(topology);
        runs.push(Running::start(builder).await);
    }
    let majority = async_nats::connect(cluster.url(1)).await.expect("connect");
    let js = jetstream::ContextBuilder::new()
        .timeout(Duration::from_secs(2))
        .build(majority.clone());
    lead_from(&js, "PARTED", Some("workers"), CUT).await;
    let elections = Elections::watch(&majority, "PARTED", "workers").await;
    let states = [
        States::watch(runs[0].health.clone()),
        States::watch(runs[1].health.clone()),
    ];
    let publisher = Publisher::start(js.clone(), "parted.jobs", Duration::from_millis(20));
    busy(&timelines, 10).await;

    cluster.isolate(CUT);
    let cut = Instant::now();
    let (leader, elected) = eventually(
        Duration::from_secs(30),
        "a consumer leader on the majority side",
        || {
            let elected = elections.new_leader_after(cut, CUT);
            async move { elected }
        },
    )
    .await;
    let resumed = eventually(
        Duration::from_secs(30),
        "the majority replica handling jobs again",
        || {
            let resumed = timelines[1].first_after(elected);
            async move { resumed }
        },
    )
    .await;
    let moved = eventually(
        Duration::from_secs(90),
        "the cut-off replica moved to the majority side",
        || {
            let moved = runs[0].health.jetstream().moves >= 1;
            async move { moved.then(Instant::now) }
        },
    )
    .await;
    let consumed = eventually(
        Duration::from_secs(60),
        "the moved replica handling jobs during the cut",
        || {
            let consumed = timelines[0].first_after(moved);
            async move { consumed }
        },
    )
    .await;
    let (down, noticed) = states[0]
        .first_down_after(cut)
        .expect("the cut-off replica was not running before it moved");
    assert!(noticed < moved, "noticed ({down}) before it moved");

    cluster.heal();
    let healed = Instant::now();
    let published = publisher.stop().await;
    all_handled(&timelines, published).await;
    for run in &runs {
        run.ready(Duration::from_secs(30)).await;
    }
    for outcome in Running::stop_all(runs).await {
        outcome.expect("a clean drain");
    }
    let twice = handled_twice(&[&timelines[0], &timelines[1]]);
    let around_the_cut: BTreeSet<u64> = timelines
        .iter()
        .flat_map(|t| t.between(cut - Duration::from_secs(1), Some(healed)))
        .collect();
    assert!(
        twice.is_subset(&around_the_cut),
        "only what was handled while the partition lasted is handled twice: {:?}",
        twice.difference(&around_the_cut).collect::<Vec<_>>()
    );
    if let Some((state, at)) = states[1].first_down_after(cut) {
        eprintln!(
            "the majority replica was {state} {:?} after the cut",
            at - cut
        );
    }
    eprintln!(
        "{published} jobs; new consumer leader {leader} {:?} after the cut; the majority \
         replica resumed {:?} after it; the cut-off replica noticed {:?} after the cut ({down}), \
         moved {:?} after the cut, consumed {:?} after moving; handled twice: {}",
        elected - cut,
        resumed - elected,
        noticed - cut,
        moved - cut,
        consumed - moved,
        twice.len()
    );
}

/// The job ids of every message in `stream`, with how many times each is there.
async fn stored_ids(
    js: &jetstream::Context,
    stream: &str,
) -> std::collections::BTreeMap<u64, usize> {
    let stream = js.get_stream(stream).await.expect("the stream");
    let reader = stream
        .create_consumer(jetstream::consumer::pull::OrderedConfig::default())
        .await
        .expect("an ordered consumer");
    let mut messages = reader.messages().await.expect("messages");
    let mut ids = std::collections::BTreeMap::new();
    let last = stream
        .get_info()
        .await
        .expect("stream info")
        .state
        .last_sequence;
    let mut read = 0;
    while read < last {
        let message = tokio::time::timeout(Duration::from_secs(10), messages.next())
            .await
            .expect("the stream's messages arrive")
            .expect("a message")
            .expect("a message");
        let job: fixture::Job = serde_json::from_slice(&message.payload).expect("a job");
        *ids.entry(job.id).or_insert(0) += 1;
        read = message.info().expect("delivery info").stream_sequence;
    }
    ids
}

/// A partition cuts off the node that leads the stream handlers publish their outputs to
/// (`Context::publish`, with a message id derived from the input), while the replicas on the
/// majority side handle jobs: publishes to the old leader go unanswered until the majority
/// elects a new one, and are sent again; the stream holds each output once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_of_the_output_streams_leader_stores_each_output_once() {
    const CUT: usize = 0;
    let fx = Fixture::linked_cluster().await;
    let cluster = &fx.server;
    let input = r3_stream("WORK_IN", &["work.in.>"]);
    let output = r3_stream("WORK_OUT", &["work.out.>"]);
    let consumer = fixture::queue(
        "tests::outputs",
        &input,
        "work.in.jobs",
        QueueDecl::new("workers").ack_wait(Duration::from_secs(5)),
    )
    .concurrency(4);
    let timelines = [Timeline::default(), Timeline::default()];
    let mut runs = Vec::new();
    for (node, timeline) in [1, 2].into_iter().zip(&timelines) {
        let client =
            connect_in_order(&[cluster.client_link(node).await.expect("a link").url()]).await;
        let timeline = timeline.clone();
        let topology =
            Topology::new()
                .stream(input)
                .stream(output)
                .consumer(consumer, move |incoming| {
                    let timeline = timeline.clone();
                    Box::pin(async move {
                        let id = fixture::job_id(&incoming)?;
                        let cx = incoming.context();
                        cx.publish(format!("work.out.{id}"), &fixture::Job { id })
                            .await?;
                        timeline.record(id);
                        Ok::<(), HandlerError>(())
                    })
                });
        let builder = fixture::fast(Runtime::builder(client)).topology(topology);
        runs.push(Running::start(builder).await);
    }
    let majority = async_nats::connect(cluster.url(1)).await.expect("connect");
    let js = jetstream::ContextBuilder::new()
        .timeout(Duration::from_secs(2))
        .build(majority);
    // Consumption stays on the majority side; the outputs' stream is led from the cut node.
    lead_from(&js, "WORK_IN", None, 1).await;
    lead_from(&js, "WORK_IN", Some("workers"), 1).await;
    lead_from(&js, "WORK_OUT", None, CUT).await;
    let publisher = Publisher::start(js.clone(), "work.in.jobs", Duration::from_millis(20));
    eventually(Duration::from_secs(30), "outputs published", || {
        let busy = timelines.iter().map(Timeline::len).sum::<usize>() >= 20;
        async move { busy.then_some(()) }
    })
    .await;

    cluster.isolate(CUT);
    let cut = Instant::now();
    // Outputs are stored again once the majority has a new leader for the stream.
    eventually(
        Duration::from_secs(60),
        "outputs stored during the cut",
        || {
            let again = timelines
                .iter()
                .any(|t| t.first_after(cut + Duration::from_secs(1)).is_some());
            async move { again.then_some(()) }
        },
    )
    .await;
    let during = timelines.iter().map(Timeline::len).sum::<usize>();
    eventually(
        Duration::from_secs(30),
        "more outputs during the cut",
        || {
            let more = timelines.iter().map(Timeline::len).sum::<usize>() >= during + 20;
            async move { more.then_some(()) }
        },
    )
    .await;
    cluster.heal();
    let published = publisher.stop().await;
    all_handled(&timelines, published).await;
    for outcome in Running::stop_all(runs).await {
        outcome.expect("a clean drain");
    }
    let stored = eventually(Duration::from_secs(30), "every output stored", || async {
        let stored = stored_ids(&js, "WORK_OUT").await;
        (stored.len() as u64 == published).then_some(stored)
    })
    .await;
    let copies: Vec<_> = stored.iter().filter(|(_, n)| **n > 1).collect();
    assert!(copies.is_empty(), "each output stored once: {copies:?}");
    assert_eq!(
        stored.keys().copied().collect::<BTreeSet<_>>(),
        (0..published).collect(),
        "an output for every job"
    );
    let twice = handled_twice(&[&timelines[0], &timelines[1]]);
    eprintln!(
        "{published} jobs, {} outputs stored once each; handled twice (their output \
         deduplicated): {}",
        stored.len(),
        twice.len()
    );
}

/// With confirmed acks, a one-way stall holds what one replica sends (its acks and their
/// retries, its pull requests) while deliveries still reach it. Its handlers are slow (1.5 s,
/// `ack_wait` 2 s): the messages it holds are given to the other replica after `ack_wait`,
/// and the stall heals while that replica handles them, so the held acks reach the server
/// after the redelivery and are applied there (by stream sequence). They are not confirmed
/// to the first replica any more: across both, each message counts as handled once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acks_held_by_a_one_way_stall_never_count_a_message_handled_twice() {
    const JOBS: u64 = 16;
    let fx = Fixture::start().await;
    let stream = fixture::stream("HELD_ACKS", &["held.>"]);
    let consumer = fixture::queue(
        "tests::held_acks",
        &stream,
        "held.jobs",
        QueueDecl::new("workers")
            .ack_wait(Duration::from_secs(2))
            .ack(nats_topology::model::AckMode::Confirmed),
    )
    .concurrency(2);
    let link = Link::start(fx.server.port()).await.expect("a link");
    let started = [Timeline::default(), Timeline::default()];
    let handled = [Timeline::default(), Timeline::default()];
    let mut runs = Vec::new();
    for (i, url) in [link.url(), fx.server.url()].iter().enumerate() {
        let client = connect_in_order(std::slice::from_ref(url)).await;
        let (started, handled) = (started[i].clone(), handled[i].clone());
        let topology = Topology::new()
            .stream(stream)
            .consumer(consumer, move |incoming| {
                let (started, handled) = (started.clone(), handled.clone());
                Box::pin(async move {
                    let id = fixture::job_id(&incoming)?;
                    started.record(id);
                    // The behaviour under test, not a wait: work that outlasts the stall's
                    // start, so that its ack is the one the stalled link holds.
                    tokio::time::sleep(Duration::from_millis(1500)).await;
                    handled.record(id);
                    Ok::<(), HandlerError>(())
                })
            });
        let builder = fixture::fast(Runtime::builder(client)).topology(topology);
        runs.push(Running::start(builder).await);
    }
    let js = fx.jetstream().await;
    fixture::publish_jobs(&js, "held.jobs", 0..JOBS).await;
    eventually(
        Duration::from_secs(10),
        "replica 0 holding two jobs",
        || {
            let holding = started[0].len() >= 2;
            async move { holding.then_some(()) }
        },
    )
    .await;
    link.stall_one_way(Direction::Forward);
    let held = started[0].ids();
    eventually(
        Duration::from_secs(30),
        "replica 1 handling what replica 0 holds",
        || {
            let taken = held.iter().any(|id| started[1].ids().contains(id));
            async move { taken.then_some(()) }
        },
    )
    .await;
    link.heal();
    let info = eventually(
        Duration::from_secs(60),
        "every job acknowledged",
        || async {
            let info = fixture::consumer_info(&js, "HELD_ACKS", "workers").await?;
            (info.ack_floor.stream_sequence == JOBS && info.num_ack_pending == 0).then_some(info)
        },
    )
    .await;
    let confirmed: Vec<u64> = runs
        .iter()
        .map(|run| run.health.consumers()[0].handled)
        .collect();
    for outcome in Running::stop_all(runs).await {
        outcome.expect("a clean drain");
    }
    let twice = handled_twice(&[&handled[0], &handled[1]]);
    assert!(
        !twice.is_empty(),
        "the stall made the server redeliver what replica 0 held: {info:?}"
    );
    assert_eq!(
        confirmed.iter().sum::<u64>(),
        JOBS,
        "each message confirmed once across the two replicas ({confirmed:?}), though {} were \
         handled twice",
        twice.len()
    );
    eprintln!(
        "{JOBS} jobs; confirmed per replica {confirmed:?}; handled twice, confirmed once: {twice:?}"
    );
}

/// 200 ms added in each direction of every link, routes and clients: an R3 stream and consumer
/// are provisioned and consume, and the consumer never stalls nor restarts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_milliseconds_on_every_link_provision_and_consume_without_a_stall() {
    const JOBS: u64 = 100;
    let fx = Fixture::linked_cluster().await;
    let cluster = &fx.server;
    cluster.latency(Duration::from_millis(200));
    let stream = r3_stream("SLOW_LINKS", &["slow.>"]);
    let consumer = fixture::queue(
        "tests::slow_links",
        &stream,
        "slow.jobs",
        QueueDecl::new("workers"),
    )
    .concurrency(4);
    let timeline = Timeline::default();
    let client = connect_in_order(&cluster.urls()).await;
    let topology = jobs(
        stream,
        consumer,
        timeline.clone(),
        Duration::from_millis(10),
    );
    // The default retry policy: its 5 s request timeout, not the tests' 2 s.
    let builder = Runtime::builder(client)
        .heartbeat(Duration::from_millis(500))
        .pull_expires(Duration::from_secs(2))
        .topology(topology);
    let running = Running::spawn(builder.build().expect("a valid topology"));
    running.ready(Duration::from_secs(90)).await;
    let states = States::watch(running.health.clone());
    let ready = Instant::now();
    let js = jetstream::ContextBuilder::new()
        .timeout(Duration::from_secs(5))
        .build(async_nats::connect(cluster.url(1)).await.expect("connect"));
    fixture::publish_jobs(&js, "slow.jobs", 0..JOBS).await;
    eventually(Duration::from_secs(60), "every job handled", || {
        let done = timeline.ids().len() as u64 == JOBS;
        async move { done.then_some(()) }
    })
    .await;
    assert_eq!(timeline.len() as u64, JOBS, "each job handled once");
    assert_eq!(
        states.first_down_after(ready),
        None,
        "the consumer ran throughout"
    );
    fixture::assert_restarts(std::slice::from_ref(&running), 0);
    let jetstream = running.health.jetstream();
    assert!(
        jetstream.reachable,
        "a slow link is not an unreachable JetStream: {jetstream}"
    );
    running.stop().await.expect("a clean drain");
}

/// A relay's link stalls while broadcasts are published, and its consumer is removed while
/// the stall lasts (as the server reaps an inactive relay): after the heal the relay is created
/// again after the last broadcast it handled, and no broadcast is skipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_on_a_stalled_link_skips_no_broadcast() {
    let fx = Fixture::start().await;
    let stream = fixture::stream("STALLED_RELAY", &["relayed.>"]);
    let relay = fixture::relay("tests::stalled_relay", &stream, "relayed.status");
    let link = Link::start(fx.server.port()).await.expect("a link");
    let received = Timeline::default();
    let recorded = received.clone();
    let topology = Topology::new()
        .stream(stream)
        .consumer(relay, move |incoming| {
            let recorded = recorded.clone();
            Box::pin(async move {
                recorded.record(fixture::job_id(&incoming)?);
                Ok::<(), HandlerError>(())
            })
        });
    let client = connect_in_order(&[link.url()]).await;
    let running = Running::start(fixture::fast(Runtime::builder(client)).topology(topology)).await;
    let name = running.health.consumers()[0].consumer.clone();
    let js = fx.jetstream().await;
    let all_received = |n: u64| {
        let received = received.clone();
        async move {
            eventually(Duration::from_secs(20), "every broadcast received", || {
                let done = (0..n).all(|id| received.ids().contains(&id));
                async move { done.then_some(()) }
            })
            .await
        }
    };
    fixture::publish_jobs(&js, "relayed.status", 0..10).await;
    all_received(10).await;

    link.stall();
    fixture::publish_jobs(&js, "relayed.status", 10..20).await;
    // A relay's consumer is its own: silent for two heartbeats, it is created again from the
    // relay's resume point (which the stalled link holds up: provisioning, then retrying).
    eventually(
        Duration::from_secs(10),
        "the relay no longer running",
        || {
            let state = running.health.consumers()[0].state.clone();
            async move {
                matches!(
                    state,
                    ConsumerState::Stalled { .. }
                        | ConsumerState::Retrying { .. }
                        | ConsumerState::Provisioning
                )
                .then_some(())
            }
        },
    )
    .await;
    fixture::delete_consumer(&js, "STALLED_RELAY", &name).await;
    fixture::publish_jobs(&js, "relayed.status", 20..30).await;
    link.heal();
    all_received(30).await;
    running.ready(Duration::from_secs(10)).await;
    fixture::publish_jobs(&js, "relayed.status", 30..40).await;
    all_received(40).await;
    assert_eq!(received.ids(), (0..40).collect(), "no broadcast skipped");
    running.stop().await.expect("a clean drain");
}

/// A runtime whose only listed server is behind a stalled link stays on it, unready, and
/// says why: JetStream unreachable through it, the only server listed. Healed, it runs again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_one_server_listed_a_stalled_runtime_stays_unready_and_says_why() {
    let fx = Fixture::start().await;
    let stream = fixture::stream("ONLY_SERVER", &["only.>"]);
    let consumer = fixture::queue(
        "tests::only_server",
        &stream,
        "only.jobs",
        QueueDecl::new("workers"),
    );
    let link = Link::start(fx.server.port()).await.expect("a link");
    let timeline = Timeline::default();
    let client = connect_in_order(&[link.url()]).await;
    let builder = fixture::fast(Runtime::builder(client))
        .move_server_after(Duration::from_secs(1))
        .topology(jobs(stream, consumer, timeline.clone(), Duration::ZERO));
    let running = Running::start(builder).await;

    link.stall();
    let said = eventually(Duration::from_secs(20), "the cause named", || {
        let jetstream = running.health.jetstream();
        let said = !jetstream.reachable
            && jetstream
                .action
                .as_deref()
                .is_some_and(|action| action.contains("the only server listed"));
        async move { said.then_some(jetstream) }
    })
    .await;
    assert!(
        !running.health.ready(),
        "unready while stalled: {}",
        running.health
    );
    assert_eq!(said.moves, 0, "nowhere to move to");
    eprintln!("{said}");

    link.heal();
    running.ready(Duration::from_secs(10)).await;
    eventually(Duration::from_secs(20), "JetStream answers again", || {
        let reachable = running.health.jetstream().reachable;
        async move { reachable.then_some(()) }
    })
    .await;
    let js = fx.jetstream().await;
    fixture::publish_jobs(&js, "only.jobs", 0..10).await;
    eventually(Duration::from_secs(20), "the jobs handled", || {
        let done = timeline.ids() == (0..10).collect();
        async move { done.then_some(()) }
    })
    .await;
    running.stop().await.expect("a clean drain");
}
