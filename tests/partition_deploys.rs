//! Deploys beside a partition, on a linked 3-node cluster (docs/FAULTS.md, "A partition";
//! docs/DEPLOYS.md): a `migrate_from` deploy whose new instances start while the node leading
//! the stream (and the meta group) is cut off from the others, and the first deploy of a fleet
//! while the meta leader's node is cut off. In both, the partition heals after a while, every
//! instance becomes ready, and every published job is handled exactly once across the fleet.

mod fixture;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream;
use async_nats::jetstream::context::ConsumerInfoErrorKind;
use fixture::{Fixture, Ledger, Running, connect_in_order};
use nats_topology::model::{AckMode, QueueDecl, Storage, StreamDecl};
use nats_topology::{HandlerError, Health, Runtime, Topology};
use nats_topology_testkit::{NatsCluster, eventually};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// An R3 file stream.
fn r3_stream(name: &str, subjects: &[&str]) -> StreamDecl {
    fixture::stream(name, subjects)
        .replicas(3)
        .storage(Storage::File)
}

/// A JetStream context on node `node` alone, with a short request timeout, for the test's own
/// publishing and reading of the server's state.
async fn jetstream_on(cluster: &NatsCluster, node: usize) -> jetstream::Context {
    let client = connect_in_order(&[cluster.url(node)]).await;
    jetstream::ContextBuilder::new()
        .timeout(Duration::from_secs(2))
        .build(client)
}

/// A client that tries node `first` first and then the two others (every server listed, as
/// docs/FAULTS.md asks, so that a runtime on a cut-off node could move).
async fn client_first_on(cluster: &NatsCluster, first: usize) -> async_nats::Client {
    let urls: Vec<String> = (0..cluster.len())
        .map(|k| cluster.url((first + k) % cluster.len()))
        .collect();
    connect_in_order(&urls).await
}

/// The node leading `stream`'s consumer `consumer` (with `consumer`) or `stream` itself.
async fn leader(js: &jetstream::Context, stream: &str, consumer: Option<&str>) -> Option<usize> {
    let name = match consumer {
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
    NatsCluster::node_index(&name)
}

/// Asks the leader of `stream`'s consumer `consumer` (with `consumer`) or of `stream` itself
/// (without) to step down in favour of node `to`, until `to` leads it.
async fn lead_from(js: &jetstream::Context, stream: &str, consumer: Option<&str>, to: usize) {
    let what = format!("node{to} leading {stream}/{consumer:?}");
    eventually(Duration::from_secs(60), &what, || async {
        if leader(js, stream, consumer).await? == to {
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

/// The meta leader, once the nodes agree on one.
async fn meta_leader(cluster: &NatsCluster) -> usize {
    eventually(Duration::from_secs(30), "a meta leader", move || {
        cluster.meta_leader()
    })
    .await
}

/// Publishes job after job (each until acknowledged, with a message id, so a publish sent
/// again is stored once) every `every`, from a task of its own, until stopped.
struct Publisher {
    stop: tokio::sync::oneshot::Sender<()>,
    task: JoinHandle<u64>,
}

impl Publisher {
    fn start(js: jetstream::Context, subject: &'static str, every: Duration) -> Publisher {
        let (stop, mut stopped) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(async move {
            // The publishing rate, not synchronisation.
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

/// When the runtime behind `health` first became ready (waiting at most `limit`), from a task
/// of its own; `None` if it was not ready within `limit`.
fn first_ready(health: &Health, limit: Duration) -> JoinHandle<Option<Instant>> {
    let health = health.clone();
    tokio::spawn(async move { health.wait_ready(limit).await.ok().map(|()| Instant::now()) })
}

/// Waits for `ready` (from [`first_ready`]) until `deadline` at the latest; panics naming the
/// runtime and showing its health when it was not ready by then.
async fn ready_by(
    ready: JoinHandle<Option<Instant>>,
    deadline: Instant,
    who: &str,
    health: &Health,
) -> Instant {
    match tokio::time::timeout_at(deadline, ready).await {
        Ok(Ok(Some(at))) => at,
        _ => panic!("{who} was not ready by the deadline: {health}"),
    }
}

/// `at - from` in milliseconds, negative when `at` is earlier.
fn signed_ms(at: Instant, from: Instant) -> i128 {
    if at >= from {
        (at - from).as_millis() as i128
    } else {
        -((from - at).as_millis() as i128)
    }
}

/// When the server first showed each step of the migration, as read from the majority side.
#[derive(Clone, Default)]
struct Milestones(Arc<Mutex<MilestoneTimes>>);

#[derive(Clone, Copy, Default, Debug)]
struct MilestoneTimes {
    /// The stream led from a node other than the cut one.
    stream_leader_moved: Option<Instant>,
    /// The old consumer reported paused.
    old_paused: Option<Instant>,
    /// The new consumer exists.
    new_created: Option<Instant>,
}

impl Milestones {
    /// Reads the server (through `js`, on the majority side) every 100 ms until aborted.
    fn watch(
        js: jetstream::Context,
        stream: &'static str,
        (old, new): (&'static str, &'static str),
        cut: usize,
    ) -> (Milestones, JoinHandle<()>) {
        let milestones = Milestones::default();
        let recorded = milestones.clone();
        let task = tokio::spawn(async move {
            // How often the server's state is sampled, not synchronisation.
            let mut every = tokio::time::interval(Duration::from_millis(100));
            loop {
                every.tick().await;
                let now = Instant::now();
                let moved = leader(&js, stream, None).await.is_some_and(|l| l != cut);
                let paused = fixture::consumer_info(&js, stream, old)
                    .await
                    .is_some_and(|info| info.paused);
                let created = fixture::consumer_info(&js, stream, new).await.is_some();
                let mut times = recorded.0.lock().unwrap();
                if moved {
                    times.stream_leader_moved.get_or_insert(now);
                }
                if paused {
                    times.old_paused.get_or_insert(now);
                }
                if created {
                    times.new_created.get_or_insert(now);
                }
            }
        });
        (milestones, task)
    }

    fn get(&self) -> MilestoneTimes {
        *self.0.lock().unwrap()
    }
}

/// How long the partitions last: the scenario, not a wait for a condition.
const MIGRATION_PARTITION: Duration = Duration::from_secs(12);
const FIRST_DEPLOY_PARTITION: Duration = Duration::from_secs(10);

/// A `migrate_from` deploy during a partition. An old fleet (version 1.0.0, two instances)
/// consumes queue consumer `v1` of an R3 stream under load; the new version (2.0.0, two
/// instances) declares `v2` with `migrate_from = "v1"` and starts while the node leading the
/// stream is cut off from the two others. That node is also made the meta leader's (the meta
/// leader is found and the stream's leadership moved to it), so the new instances' pause of
/// `v1` and creation of `v2` wait for a new meta leader, and publishing waits for a new stream
/// leader; `v1`'s leader is kept on the majority side, so that no acknowledgement goes to a
/// leader that is cut off (acks sent to a cut-off consumer leader are lost and their messages
/// handled twice, docs/FAULTS.md: that is not the fault this test stages). One old and one new
/// instance are connected to the cut-off node (its clients still reach it), one of each to the
/// majority side. The old version's handlers take 100 ms, and the cut lands while the old
/// instance on the cut-off node holds jobs: their acks wait in the partition, so the migration
/// must wait for them before it creates `v2` at the old ack floor + 1 (or those jobs would be
/// handled again by `v2`). The old consumer's `ack_wait` (30 s, the default) outlasts the
/// partition, so those acks can arrive in time.
///
/// After the heal: every instance is ready within 40 s (the migration may wait a full
/// `ack_wait` of the old consumer, 30 s, for acknowledgements, docs/DEPLOYS.md step 2, and an
/// election, 4 to 9 s, may follow the heal), the new fleet handles new jobs, `v1` is paused
/// while the old fleet runs and deleted once it has drained, `v2` names `v1` as the consumer it
/// migrated from, and every job published is handled exactly once across the four instances.
async fn migrate_from_deploy_during_a_partition(ack: AckMode) {
    const STREAM: &str = "MIGRATE_PARTED";
    const SUBJECT: &str = "migrate_parted.jobs";
    const READY_AFTER_HEAL: Duration = Duration::from_secs(40);
    let fx = Fixture::linked_cluster().await;
    let cluster = &fx.server;
    let stream = r3_stream(STREAM, &["migrate_parted.>"]);
    // Per instance: the jobs its handler started, and those it handled.
    let started: [Ledger; 4] = Default::default();
    let ledgers: [Ledger; 4] = Default::default();
    let topology = |new: bool, started: &Ledger, done: &Ledger| -> Topology {
        let group = if new {
            QueueDecl::new("v2").migrate_from("v1")
        } else {
            QueueDecl::new("v1")
        };
        let consumer = fixture::queue("tests::migrate_parted", &stream, SUBJECT, group.ack(ack))
            .concurrency(4);
        // The old version's handlers are slower, so that the cut finds jobs in flight on it.
        let work = Duration::from_millis(if new { 5 } else { 100 });
        let (started, done) = (started.clone(), done.clone());
        Topology::new()
            .stream(stream)
            .consumer(consumer, move |incoming| {
                let (started, done) = (started.clone(), done.clone());
                Box::pin(async move {
                    let id = fixture::job_id(&incoming)?;
                    started.record(id);
                    // Simulated work, not synchronisation.
                    tokio::time::sleep(work).await;
                    done.record(id);
                    Ok::<(), HandlerError>(())
                })
            })
    };
    let runtime = |client: async_nats::Client, new: bool, i: usize| -> Runtime {
        fixture::fast(Runtime::builder(client))
            .topology(topology(new, &started[i], &ledgers[i]))
            .version(if new { "2.0.0" } else { "1.0.0" })
            .build()
            .expect("valid topology")
    };

    // The node to cut off: the meta leader's, made the stream's leader too.
    let cut = meta_leader(cluster).await;
    let majority = (cut + 1) % cluster.len();
    let other = (cut + 2) % cluster.len();
    let js = jetstream_on(cluster, majority).await;

    // The old fleet (instances 0 and 1): one instance on the node to be cut off, one on the
    // majority side.
    let (old_ledgers, new_ledgers) = ledgers.split_at(2);
    let mut old = Vec::new();
    for (i, first) in [cut, majority].into_iter().enumerate() {
        let client = client_first_on(cluster, first).await;
        let running = Running::spawn(runtime(client, false, i));
        running.ready(Duration::from_secs(30)).await;
        old.push(running);
    }
    lead_from(&js, STREAM, None, cut).await;
    lead_from(&js, STREAM, Some("v1"), other).await;
    let publisher = Publisher::start(js.clone(), SUBJECT, Duration::from_millis(20));
    for (i, ledger) in old_ledgers.iter().enumerate() {
        ledger
            .wait_len(
                20,
                Duration::from_secs(30),
                &format!("old instance {i} busy"),
            )
            .await;
    }
    let meta_at_cut = cluster.meta_leader().await;
    let stream_leader_at_cut = leader(&js, STREAM, None).await;
    let v1_leader_at_cut = leader(&js, STREAM, Some("v1")).await;
    assert_eq!(
        stream_leader_at_cut,
        Some(cut),
        "the stream is led from the node to be cut off"
    );
    assert_eq!(
        v1_leader_at_cut,
        Some(other),
        "the old consumer is led from the majority side"
    );

    // The cut lands while the old instance on the node to be cut off holds jobs: their acks
    // are held by the partition.
    eventually(
        Duration::from_secs(10),
        "the old instance on the node to be cut off holding a job",
        || {
            let holding = started[0].len() > ledgers[0].len();
            async move { holding.then_some(()) }
        },
    )
    .await;
    cluster.isolate(cut);
    let cut_at = Instant::now();
    let held: Vec<u64> = started[0]
        .unique()
        .difference(&ledgers[0].unique())
        .copied()
        .collect();
    let (milestones, watcher) = Milestones::watch(
        // Short requests, so that one unanswered read does not hide a step for long.
        jetstream::ContextBuilder::new()
            .timeout(Duration::from_millis(500))
            .build(js.client()),
        STREAM,
        ("v1", "v2"),
        cut,
    );
    // The new version (instances 2 and 3) starts during the partition: one instance on the
    // cut-off node, one on the majority side.
    let mut new = Vec::new();
    let mut new_ready = Vec::new();
    for (i, first) in [(2, cut), (3, majority)] {
        let client = client_first_on(cluster, first).await;
        let running = Running::spawn(runtime(client, true, i));
        new_ready.push(first_ready(&running.health, Duration::from_secs(90)));
        new.push(running);
    }
    // The partition lasts MIGRATION_PARTITION: the scenario, not a wait for a condition.
    tokio::time::sleep(MIGRATION_PARTITION).await;
    let during: Vec<String> = new
        .iter()
        .chain(&old)
        .map(|run| run.health.to_string())
        .collect();
    cluster.heal();
    let healed = Instant::now();

    let deadline = healed + READY_AFTER_HEAL;
    let mut new_ready_at = Vec::new();
    for (i, ready) in new_ready.into_iter().enumerate() {
        let who = format!("new instance {i}");
        new_ready_at.push(ready_by(ready, deadline, &who, &new[i].health).await);
    }
    for (i, run) in old.iter().enumerate() {
        let who = format!("old instance {i}");
        ready_by(
            first_ready(&run.health, READY_AFTER_HEAL),
            deadline,
            &who,
            &run.health,
        )
        .await;
    }
    // The new fleet takes the work: 100 more jobs handled by the new instances.
    let by_new = |ledgers: &[Ledger]| ledgers.iter().map(Ledger::len).sum::<usize>();
    let target = by_new(new_ledgers) + 100;
    eventually(
        Duration::from_secs(30),
        "the new fleet handling jobs",
        || {
            let done = by_new(new_ledgers) >= target;
            async move { done.then_some(()) }
        },
    )
    .await;
    let times = eventually(
        Duration::from_secs(10),
        "the watcher reading the new consumer",
        || {
            let times = milestones.get();
            async move { times.new_created.map(|_| times) }
        },
    )
    .await;
    watcher.abort();

    // While the old fleet runs, `v1` stays, paused; `v2` names where it migrated from.
    let v1 = fixture::consumer_info(&js, STREAM, "v1")
        .await
        .expect("the old consumer stays while the old fleet pulls from it");
    assert!(v1.paused, "the old consumer is paused: {v1:?}");
    let v2 = fixture::consumer_info(&js, STREAM, "v2")
        .await
        .expect("the new consumer exists");
    assert_eq!(
        v2.config
            .metadata
            .get("nats-topology.migrated-from")
            .map(String::as_str),
        Some("v1"),
        "{v2:?}"
    );

    // The old fleet drains; a new instance deletes `v1` once nobody pulls from it.
    for outcome in Running::stop_all(old).await {
        outcome.expect("the old instances drain");
    }
    let drained = Instant::now();
    eventually(
        Duration::from_secs(30),
        "the old consumer deleted",
        || async {
            let stream = js.get_stream(STREAM).await.ok()?;
            let read = stream.consumer_info("v1").await;
            // Not found, not merely unanswered.
            read.is_err_and(|e| e.kind() == ConsumerInfoErrorKind::NotFound)
                .then_some(())
        },
    )
    .await;
    let retired = Instant::now();

    let published = publisher.stop().await;
    eventually(Duration::from_secs(60), "every job handled", || {
        let handled = fixture::union(&ledgers);
        async move { (handled.len() as u64 >= published).then_some(()) }
    })
    .await;
    for outcome in Running::stop_all(new).await {
        outcome.expect("the new instances drain");
    }
    let split: Vec<usize> = ledgers.iter().map(Ledger::len).collect();
    let held_by: Vec<Vec<usize>> = held
        .iter()
        .map(|id| {
            (0..ledgers.len())
                .filter(|&i| ledgers[i].ids().contains(id))
                .collect()
        })
        .collect();
    let duplicates: Vec<u64> = ledgers
        .iter()
        .flat_map(Ledger::ids)
        .fold(std::collections::BTreeMap::new(), |mut n, id| {
            *n.entry(id).or_insert(0usize) += 1;
            n
        })
        .into_iter()
        .filter(|(_, n)| *n > 1)
        .map(|(id, _)| id)
        .collect();

    let ms = |at: Option<Instant>| at.map(|at| signed_ms(at, cut_at));
    eprintln!(
        "{ack:?} acks: cut node{cut} (meta leader at the cut: {meta_at_cut:?}, stream leader, v1 led from \
         node{other}) for {MIGRATION_PARTITION:?}; after the cut (ms): stream leader moved \
         {:?}, v1 paused {:?}, v2 created {:?}, healed {}, new instances ready {:?}; old fleet \
         drained {} ms after the heal, v1 deleted {} ms after that; {published} jobs: old \
         version {} (on the cut node {}, majority {}), new version {} (on the cut node {}, \
         majority {}); held by the old instance on the cut node at the cut: {held:?}, handled \
         by instance(s) {held_by:?}; handled twice: {duplicates:?}",
        ms(times.stream_leader_moved),
        ms(times.old_paused),
        ms(times.new_created),
        signed_ms(healed, cut_at),
        new_ready_at
            .iter()
            .map(|at| signed_ms(*at, cut_at))
            .collect::<Vec<_>>(),
        signed_ms(drained, healed),
        signed_ms(retired, drained),
        split[0] + split[1],
        split[0],
        split[1],
        split[2] + split[3],
        split[2],
        split[3],
    );
    eprintln!("health just before the heal:\n{}", during.join("\n"));
    fixture::assert_each_handled_once(&ledgers, published);
    assert!(split[0] + split[1] > 0, "the old version handled jobs");
    assert!(split[2] + split[3] > 0, "the new version handled jobs");
}

/// With confirmed acknowledgements (`ack = "confirmed"`): an ack is sent again until the server
/// confirms it (docs/FAULTS.md, "Acks lost"). With the default fire-and-forget acks, the acks
/// the partition holds can be lost at the heal (the old consumer's leader, on the majority
/// side, loses its quorum for a moment as the cut-off node comes back, while they arrive): the
/// migration then waits a full `ack_wait` for them and `v2` delivers their messages again, as
/// docs/FAULTS.md says of acks lost with a partition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migrate_from_deploy_with_confirmed_acks_during_a_partition_handles_each_job_once() {
    migrate_from_deploy_during_a_partition(AckMode::Confirmed).await;
}

/// The first deploy of a fleet during a partition: three replicas (each connected first to a
/// different node, every node listed) start at once, each provisioning an R3 stream and a
/// queue consumer, while the meta leader's node is cut off from the two others. The partition
/// heals after 10 s. Every replica is ready within 20 s of the heal (a request timeout of the
/// test's retry policy, 2 s, its backoff cap, 1 s, and a Raft election the heal may start,
/// 4 to 9 s, with room for a loaded 2-core machine), and jobs published afterwards are each
/// handled once across the fleet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_deploy_during_a_partition_of_the_meta_leader_becomes_ready_after_the_heal() {
    const STREAM: &str = "FIRST_PARTED";
    const SUBJECT: &str = "first_parted.jobs";
    const JOBS: u64 = 300;
    const READY_AFTER_HEAL: Duration = Duration::from_secs(20);
    let fx = Fixture::linked_cluster().await;
    let cluster = &fx.server;
    let stream = r3_stream(STREAM, &["first_parted.>"]);
    let consumer = fixture::queue(
        "tests::first_parted",
        &stream,
        SUBJECT,
        QueueDecl::new("workers"),
    )
    .concurrency(4);

    let cut = meta_leader(cluster).await;
    cluster.isolate(cut);
    let cut_at = Instant::now();
    let ledgers: [Ledger; 3] = Default::default();
    let mut runs = Vec::new();
    let mut ready = Vec::new();
    for (first, ledger) in ledgers.iter().enumerate() {
        let client = client_first_on(cluster, first).await;
        let topology =
            fixture::job_topology(stream, consumer, ledger.clone(), Duration::from_millis(5));
        let builder = fixture::fast(Runtime::builder(client)).topology(topology);
        let running = Running::spawn(builder.build().expect("valid topology"));
        ready.push(first_ready(&running.health, Duration::from_secs(90)));
        runs.push(running);
    }
    let started = Instant::now();
    // The partition lasts FIRST_DEPLOY_PARTITION: the scenario, not a wait for a condition.
    tokio::time::sleep(FIRST_DEPLOY_PARTITION).await;
    let during: Vec<String> = runs.iter().map(|run| run.health.to_string()).collect();
    cluster.heal();
    let healed = Instant::now();

    let deadline = healed + READY_AFTER_HEAL;
    let mut ready_at = Vec::new();
    for (i, ready) in ready.into_iter().enumerate() {
        let who = format!("replica {i} (on node{i} first)");
        ready_at.push(ready_by(ready, deadline, &who, &runs[i].health).await);
    }
    let all_ready = Instant::now();

    let js = jetstream_on(cluster, (cut + 1) % cluster.len()).await;
    fixture::publish_jobs(&js, SUBJECT, 0..JOBS).await;
    eventually(Duration::from_secs(30), "every job handled", || {
        let handled = fixture::union(&ledgers);
        async move { (handled.len() as u64 >= JOBS).then_some(()) }
    })
    .await;
    let restarts: Vec<u64> = runs
        .iter()
        .map(|run| run.health.consumers()[0].restarts)
        .collect();
    for outcome in Running::stop_all(runs).await {
        outcome.expect("a clean drain");
    }
    fixture::assert_each_handled_once(&ledgers, JOBS);
    let info = fixture::settled(&js, STREAM, "workers", Duration::from_secs(10)).await;
    assert_eq!(
        info.cluster.as_ref().map(|c| c.replicas.len()),
        Some(2),
        "the consumer is replicated on the three nodes (a leader and two replicas): {info:?}"
    );

    eprintln!(
        "cut node{cut} (the meta leader) for {FIRST_DEPLOY_PARTITION:?}, replicas started {} ms \
         after the cut; ready after the cut (ms): {:?}, i.e. after the heal: {:?}; all ready {} \
         ms after the heal; restarts {restarts:?}; {JOBS} jobs split {:?}",
        signed_ms(started, cut_at),
        ready_at
            .iter()
            .map(|at| signed_ms(*at, cut_at))
            .collect::<Vec<_>>(),
        ready_at
            .iter()
            .map(|at| signed_ms(*at, healed))
            .collect::<Vec<_>>(),
        signed_ms(all_ready, healed),
        ledgers.iter().map(Ledger::len).collect::<Vec<_>>(),
    );
    eprintln!("health just before the heal:\n{}", during.join("\n"));
}
