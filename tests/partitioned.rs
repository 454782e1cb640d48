//! Partitioned queue consumers on real servers (nats-server 2.11 or newer): the messages of
//! one key handled one at a time in stream order, different keys in parallel, across
//! replicas that join, drain and die mid-load.
//!
//! Every handler records its key, the message's sequence within its key, its replica and
//! when it started and ended; the checks read every key: sequences never go back (strictly
//! increasing, but for the one message a killed replica had in flight, handled again), none
//! missing, and no two handlings of one key overlap in time.
//!
//! The process faults (SIGKILL, SIGTERM) run replicas as processes of this test binary,
//! re-invoked to run only [`replica_process`] with [`REPLICA_URL`] set; they report on stdout
//! one line per handling: `nt-replica: H <key> <seq> <start_us> <end_us>`, and `READY`,
//! `DRAINED`.

mod fixture;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fixture::{Fixture, Running};
use nats_topology::model::{QueueDecl, SubjectTransform};
use nats_topology::{HandlerError, Runtime, Topology};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::mpsc;

/// Set in a replica process: the servers to connect to, comma-separated, its own first.
const REPLICA_URLS: &str = "NATS_TOPOLOGY_TEST_PARTITION_REPLICA_URLS";

/// Set in a replica process: its number, in its reports.
const REPLICA_INDEX: &str = "NATS_TOPOLOGY_TEST_PARTITION_REPLICA_INDEX";

/// Set in a replica process: it runs the new version of a migration onto partitions
/// ([`migrating_topology`]) from the plain queue consumer named.
const REPLICA_MIGRATES_FROM: &str = "NATS_TOPOLOGY_TEST_PARTITION_REPLICA_MIGRATES_FROM";

/// Work per message of a migrating replica process: slow enough that it is killed while it
/// reads the old consumer.
const MIGRATING_WORK: Duration = Duration::from_millis(50);

/// Starts each report line of a replica process.
const MARK: &str = "nt-replica: ";

/// Partitions of the group.
const PARTITIONS: u16 = 8;

/// Keys the test publishes for.
const KEYS: u32 = 40;

/// Simulated work per message.
const WORK: Duration = Duration::from_millis(2);

/// One message: the `seq`-th (from 1) of `key`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct Order {
    key: u32,
    seq: u64,
}

/// One handling, as a replica recorded it (microseconds since the epoch: processes compare).
#[derive(Debug, Clone, Copy)]
struct Handling {
    key: u32,
    seq: u64,
    replica: usize,
    start: u128,
    end: u128,
}

fn micros() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after the epoch")
        .as_micros()
}

/// Where handlings are recorded (in-process replicas share one); a replica process prints
/// them too.
#[derive(Clone, Default)]
struct Journal(Arc<Mutex<Vec<Handling>>>, bool);

impl Journal {
    /// A journal that also reports each handling on stdout (in a replica process).
    fn printing() -> Journal {
        Journal(Arc::default(), true)
    }

    fn push(&self, handling: Handling) {
        if self.1 {
            let Handling {
                key,
                seq,
                start,
                end,
                ..
            } = handling;
            println!("{MARK}H {key} {seq} {start} {end}");
        }
        self.0.lock().unwrap().push(handling);
    }

    fn all(&self) -> Vec<Handling> {
        self.0.lock().unwrap().clone()
    }

    /// How many distinct messages were handled.
    fn distinct(&self) -> usize {
        let all = self.all();
        let mut seen: Vec<(u32, u64)> = all.iter().map(|h| (h.key, h.seq)).collect();
        seen.sort_unstable();
        seen.dedup();
        seen.len()
    }

    /// Waits (up to a minute) until every key's messages of rounds `1..=rounds` are handled.
    async fn wait_rounds(&self, rounds: u64) {
        let n = KEYS as usize * rounds as usize;
        self.wait_distinct(n, Duration::from_secs(60), "every message handled")
            .await;
    }

    async fn wait_distinct(&self, n: usize, timeout: Duration, what: &str) {
        nats_topology_testkit::eventually(timeout, what, || {
            let done = self.distinct() >= n;
            async move { done.then_some(()) }
        })
        .await;
    }
}

/// The stream: each stored subject starts with the partition of its key.
fn orders_stream(name: &str, replicas: u8, partitions: u16) -> nats_topology::model::StreamDecl {
    fixture::stream(name, &["orders.*.paid"])
        .replicas(replicas)
        .subject_transform(SubjectTransform::new(
            "orders.*.paid",
            fixture::leak(format!(
                "{{{{partition({partitions},1)}}}}.orders.{{{{wildcard(1)}}}}.paid"
            )),
        ))
}

/// A replica's topology: the partitioned group `billing`, recording into `journal` as
/// `replica`; a handler fails the first delivery of each key's `fail_seq`-th message.
fn replica_topology(
    (stream, replicas): (&str, u8),
    journal: Journal,
    replica: usize,
    fail_seq: Option<u64>,
) -> Topology {
    replica_topology_with(
        (stream, replicas, PARTITIONS),
        journal,
        replica,
        fail_seq,
        |_| WORK,
    )
}

/// [`replica_topology`] with the work each key's messages take.
fn replica_topology_with(
    (stream, replicas, partitions): (&str, u8, u16),
    journal: Journal,
    replica: usize,
    fail_seq: Option<u64>,
    work: fn(u32) -> Duration,
) -> Topology {
    group_topology(
        orders_stream(stream, replicas, partitions),
        QueueDecl::new("billing").partitioned(partitions, &[1]),
        (journal, replica),
        fail_seq,
        work,
    )
}

/// `stream` and the queue consumer `queue` of `orders.*.paid` on it (`ack_wait` 5 s), recording
/// into `journal` as `replica` (see [`replica_topology_with`]).
fn group_topology(
    stream: nats_topology::model::StreamDecl,
    queue: QueueDecl,
    (journal, replica): (Journal, usize),
    fail_seq: Option<u64>,
    work: fn(u32) -> Duration,
) -> Topology {
    let queue = queue.ack_wait(Duration::from_secs(5));
    let consumer = fixture::queue("tests::billing", &stream, "orders.*.paid", queue);
    recording(
        Topology::new().stream(stream),
        consumer,
        (journal, replica),
        fail_seq,
        work,
    )
}

/// `topology` with `consumer`, whose handler records into `journal` as `replica` (see
/// [`replica_topology_with`]).
fn recording(
    topology: Topology,
    consumer: nats_topology::model::ConsumerDecl,
    (journal, replica): (Journal, usize),
    fail_seq: Option<u64>,
    work: fn(u32) -> Duration,
) -> Topology {
    topology.consumer(consumer, move |incoming| {
        let journal = journal.clone();
        Box::pin(async move {
            let order: Order = serde_json::from_slice(incoming.payload())
                .map_err(|e| HandlerError::permanent(format!("not an order: {e}")))?;
            if fail_seq == Some(order.seq) && incoming.context().delivered() == 1 {
                return Err(HandlerError::new("the first try of this one fails"));
            }
            let start = micros();
            tokio::time::sleep(work(order.key)).await;
            journal.push(Handling {
                key: order.key,
                seq: order.seq,
                replica,
                start,
                end: micros(),
            });
            Ok::<(), HandlerError>(())
        })
    })
}

/// Publishes `per_key` messages for each key, round-robin over the keys, `pause` between
/// rounds; returns how many.
async fn publish(
    js: &async_nats::jetstream::Context,
    rounds: std::ops::Range<u64>,
    pause: Duration,
) {
    for seq in rounds {
        for key in 0..KEYS {
            let order = Order { key, seq };
            let payload: bytes::Bytes = serde_json::to_vec(&order).unwrap().into();
            // Through a node's loss the stream's leader moves: published again until stored,
            // once (the message id deduplicates a retry of one that was stored).
            let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
            loop {
                let publish = async_nats::jetstream::message::PublishMessage::build()
                    .payload(payload.clone())
                    .message_id(format!("{key}-{seq}"));
                let stored = match js.send_publish(format!("orders.{key}.paid"), publish).await {
                    Ok(ack) => ack.await.map(|_| ()).map_err(|e| e.to_string()),
                    Err(e) => Err(e.to_string()),
                };
                match stored {
                    Ok(()) => break,
                    Err(_) if tokio::time::Instant::now() < deadline => {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    Err(e) => panic!("order {key}/{seq} not stored within 30 s: {e}"),
                }
            }
        }
        if !pause.is_zero() {
            tokio::time::sleep(pause).await;
        }
    }
}

/// [`publish`] of rounds `1..=rounds` in a task of its own.
fn in_background(
    js: &async_nats::jetstream::Context,
    rounds: u64,
    pause: Duration,
) -> tokio::task::JoinHandle<()> {
    let js = js.clone();
    tokio::spawn(async move { publish(&js, 1..rounds + 1, pause).await })
}

/// The checks on every key: each handled `1..=rounds` in order (`repeats`: handlings that
/// may repeat the message before them, a killed replica's in-flight message), and no two
/// handlings of a key overlapping in time.
fn assert_in_order(journal: &[Handling], rounds: u64, repeats_allowed: bool) {
    let mut by_key: BTreeMap<u32, Vec<Handling>> = BTreeMap::new();
    for h in journal {
        by_key.entry(h.key).or_default().push(*h);
    }
    assert_eq!(by_key.len(), KEYS as usize, "every key handled");
    for (key, mut handlings) in by_key {
        handlings.sort_by_key(|h| h.start);
        let mut expected = 1;
        for pair in handlings.windows(2) {
            assert!(
                pair[1].start >= pair[0].end,
                "key {key}: seq {} (replica {}) started before seq {} (replica {}) ended: {} µs of overlap",
                pair[1].seq,
                pair[1].replica,
                pair[0].seq,
                pair[0].replica,
                pair[0].end - pair[1].start
            );
        }
        for h in &handlings {
            if h.seq + 1 == expected && repeats_allowed {
                continue; // the message before, again
            }
            assert_eq!(
                h.seq,
                expected,
                "key {key}: handled out of order or one is missing: {:?}",
                handlings
                    .iter()
                    .map(|h| (h.seq, h.replica, h.start))
                    .collect::<Vec<_>>()
            );
            expected += 1;
        }
        assert_eq!(expected, rounds + 1, "key {key}: every message handled");
    }
}

/// The replica process's entry point. With [`REPLICA_URLS`] set, it runs [`replica_topology`]
/// on those servers, reporting each handling on stdout, until SIGTERM, which drains. Without
/// it, it checks in-process that a lone replica holds every partition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replica_process() {
    fixture::trace();
    let Ok(urls) = std::env::var(REPLICA_URLS) else {
        return lone_replica_holds_every_partition().await;
    };
    let urls: Vec<String> = urls.split(',').map(str::to_owned).collect();
    let replica = std::env::var(REPLICA_INDEX)
        .ok()
        .and_then(|i| i.parse().ok())
        .unwrap_or(0);
    let client = fixture::connect_in_order(&urls).await;
    let topology = match std::env::var(REPLICA_MIGRATES_FROM) {
        // `<group>:<partitions>`: from a partitioned group of that count.
        Ok(old) if old.contains(':') => {
            let (old, count) = old.split_once(':').expect("a count");
            recounting_topology(
                (
                    fixture::leak(old.to_owned()),
                    count.parse().expect("a count"),
                ),
                (&Journal::printing(), replica),
                |_| MIGRATING_WORK,
            )
        }
        Ok(old) => migrating_topology(
            ("ORDERS", 3),
            fixture::leak(old),
            (&Journal::printing(), replica),
            |_| MIGRATING_WORK,
        ),
        Err(_) => replica_topology(("ORDERS", 3), Journal::printing(), replica, None),
    };
    let runtime = fixture::fast(Runtime::builder(client))
        .topology(topology)
        .build()
        .expect("valid topology");
    let health = runtime.health();
    let run = tokio::spawn(runtime.run_until_signal());
    fixture::wait_ready(&health, Duration::from_secs(30)).await;
    println!("{MARK}READY");
    run.await
        .expect("the runtime does not panic")
        .expect("the replica drains cleanly");
    println!("{MARK}DRAINED");
}

/// One replica alone holds (runs) every partition once it has read the members.
async fn lone_replica_holds_every_partition() {
    let fx = Fixture::start().await;
    let journal = Journal::default();
    let topology = replica_topology(("ALONE", 1), journal.clone(), 0, None);
    let running = fx.run(topology).await;
    let states: Vec<String> = (running.health.consumers().iter())
        .map(|c| format!("{} {}", c.consumer, c.state))
        .collect();
    assert_eq!(
        states.len(),
        usize::from(PARTITIONS),
        "one consumer per partition: {states:?}"
    );
    let js = fx.jetstream().await;
    publish(&js, 1..4, Duration::ZERO).await;
    journal
        .wait_distinct(
            KEYS as usize * 3,
            Duration::from_secs(20),
            "every message handled",
        )
        .await;
    // Held here, each partition was pinned to this replica by its first message.
    nats_topology_testkit::eventually(
        Duration::from_secs(10),
        "every partition running here",
        || {
            let all = (running.health.consumers().iter()).all(|c| c.state.to_string() == "running");
            async move { all.then_some(()) }
        },
    )
    .await;
    assert_in_order(&journal.all(), 3, false);
    running.stop().await.expect("clean drain");
}

/// A replica process, and the lines it reports.
struct Replica {
    child: tokio::process::Child,
}

#[derive(Debug)]
enum Line {
    Ready,
    Handled(Handling),
    Drained,
    Closed,
}

fn spawn_replica(
    replica: usize,
    urls: &[String],
    lines: mpsc::UnboundedSender<(usize, Line)>,
) -> Replica {
    spawn_replica_with(replica, urls, lines, None)
}

/// [`spawn_replica`], of the new version of a migration from `migrates_from` when set.
fn spawn_replica_with(
    replica: usize,
    urls: &[String],
    lines: mpsc::UnboundedSender<(usize, Line)>,
    migrates_from: Option<&str>,
) -> Replica {
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut command = tokio::process::Command::new(exe);
    if let Some(old) = migrates_from {
        command.env(REPLICA_MIGRATES_FROM, old);
    }
    let mut child = command
        .args([
            "--exact",
            "replica_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(REPLICA_URLS, urls.join(","))
        .env(REPLICA_INDEX, replica.to_string())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn a replica process");
    let stdout = child.stdout.take().expect("piped stdout");
    tokio::spawn(async move {
        let mut stdout = BufReader::new(stdout).lines();
        while let Ok(Some(line)) = stdout.next_line().await {
            let Some(at) = line.find(MARK) else {
                continue; // the test harness's own output
            };
            let words: Vec<&str> = line[at + MARK.len()..].split_whitespace().collect();
            let number = |i: usize| words.get(i).and_then(|w| w.parse::<u128>().ok());
            let parsed = match words.first() {
                Some(&"READY") => Line::Ready,
                Some(&"DRAINED") => Line::Drained,
                Some(&"H") => match (number(1), number(2), number(3), number(4)) {
                    (Some(key), Some(seq), Some(start), Some(end)) => Line::Handled(Handling {
                        key: key as u32,
                        seq: seq as u64,
                        replica,
                        start,
                        end,
                    }),
                    _ => panic!("a malformed report from replica {replica}: {line}"),
                },
                _ => panic!("an unexpected report from replica {replica}: {line}"),
            };
            let _ = lines.send((replica, parsed));
        }
        let _ = lines.send((replica, Line::Closed));
    });
    Replica { child }
}

/// What the replica processes reported so far.
#[derive(Default)]
struct Reports {
    ready: BTreeMap<usize, bool>,
    drained: BTreeMap<usize, bool>,
    closed: BTreeMap<usize, bool>,
    journal: Journal,
}

impl Reports {
    fn apply(&mut self, (replica, line): (usize, Line)) {
        match line {
            Line::Ready => {
                self.ready.insert(replica, true);
            }
            Line::Handled(handling) => self.journal.push(handling),
            Line::Drained => {
                self.drained.insert(replica, true);
            }
            Line::Closed => {
                self.closed.insert(replica, true);
            }
        }
    }

    /// SIGKILLs `replica` (number `index`) and reads its last reports.
    async fn kill(
        &mut self,
        lines: &mut mpsc::UnboundedReceiver<(usize, Line)>,
        replica: &mut Replica,
        index: usize,
    ) {
        replica.child.kill().await.expect("SIGKILL a replica");
        let what = format!("replica {index}'s last reports after SIGKILL");
        self.until(lines, Duration::from_secs(10), &what, |r| {
            r.closed.contains_key(&index)
        })
        .await;
    }

    /// SIGTERMs `replica` (number `index`) and reads until it drained and its reports ended.
    async fn drain(
        &mut self,
        lines: &mut mpsc::UnboundedReceiver<(usize, Line)>,
        replica: &Replica,
        index: usize,
    ) {
        sigterm(replica.child.id().expect("the replica runs"));
        let what = format!("replica {index} drained");
        self.until(lines, Duration::from_secs(30), &what, |r| {
            r.drained.contains_key(&index) && r.closed.contains_key(&index)
        })
        .await;
    }

    /// Reads reports until `done` holds, for at most `timeout`.
    async fn until(
        &mut self,
        lines: &mut mpsc::UnboundedReceiver<(usize, Line)>,
        timeout: Duration,
        what: &str,
        done: impl Fn(&Reports) -> bool,
    ) {
        let deadline = tokio::time::Instant::now() + timeout;
        while !done(self) {
            match tokio::time::timeout_at(deadline, lines.recv()).await {
                Ok(Some(line)) => self.apply(line),
                Ok(None) => panic!("the replica readers stopped while waiting for {what}"),
                Err(_) => panic!(
                    "timed out after {timeout:?} waiting for {what}; {} distinct handled",
                    self.journal.distinct()
                ),
            }
        }
    }
}

fn sigterm(pid: u32) {
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -TERM {pid}");
}

/// The cluster's URLs, starting at node `first`.
fn urls_from(urls: &[String], first: usize) -> Vec<String> {
    (0..urls.len())
        .map(|i| urls[(first + i) % urls.len()].clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn order_per_key_holds_through_a_replica_killed_one_drained_by_sigterm_and_one_added() {
    const ROUNDS: u64 = 60;
    let fx = Fixture::cluster().await;
    let urls = fx.server.urls();
    let (tx, mut lines) = mpsc::unbounded_channel();
    let mut replicas: Vec<Replica> = (0..3)
        .map(|r| spawn_replica(r, &urls_from(&urls, r), tx.clone()))
        .collect();
    let mut reports = Reports::default();
    reports
        .until(
            &mut lines,
            Duration::from_secs(60),
            "three replicas ready",
            |r| r.ready.len() == 3,
        )
        .await;
    let js = fx.jetstream().await;
    let publisher = in_background(&js, ROUNDS, Duration::from_millis(100));
    let progress =
        |rounds: usize| move |r: &Reports| r.journal.distinct() >= KEYS as usize * rounds;
    reports
        .until(
            &mut lines,
            Duration::from_secs(30),
            "the first rounds",
            progress(5),
        )
        .await;
    // SIGKILL mid-load.
    reports.kill(&mut lines, &mut replicas[0], 0).await;
    let killed_at = reports.journal.all().len();
    reports
        .until(
            &mut lines,
            Duration::from_secs(30),
            "rounds after the kill",
            progress(15),
        )
        .await;
    // One added mid-load.
    replicas.push(spawn_replica(3, &urls_from(&urls, 0), tx.clone()));
    reports
        .until(
            &mut lines,
            Duration::from_secs(60),
            "the new replica ready and handling",
            |r| r.ready.contains_key(&3) && r.journal.all().iter().any(|h| h.replica == 3),
        )
        .await;
    // One drained mid-load (SIGTERM): it hands its partitions back before it exits.
    reports.drain(&mut lines, &replicas[1], 1).await;
    publisher.await.expect("the publisher ends");
    reports
        .until(
            &mut lines,
            Duration::from_secs(60),
            "every message handled",
            progress(ROUNDS as usize),
        )
        .await;
    drop(tx);
    let all = reports.journal.all();
    assert!(killed_at > 0);
    assert_in_order(&all, ROUNDS, true);
    for r in [2, 3] {
        assert!(
            all.iter().any(|h| h.replica == r),
            "replica {r} handled a share"
        );
    }
    for mut replica in replicas.drain(2..) {
        let pid = replica.child.id().expect("a replica still runs");
        sigterm(pid);
        let status = replica.child.wait().await.expect("the replica exits");
        assert!(
            status.success(),
            "a replica drained by SIGTERM exits cleanly: {status}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_share_the_partitions_and_order_per_key_holds_through_a_join_and_a_drain() {
    const ROUNDS: u64 = 30;
    let fx = Fixture::cluster().await;
    let journal = Journal::default();
    let run = |replica: usize| {
        let topology = replica_topology(("ORDERS", 3), journal.clone(), replica, Some(7));
        let fx = &fx;
        async move { fx.run(topology).await }
    };
    let first = run(0).await;
    let second = run(1).await;
    let js = fx.jetstream().await;
    // Both replicas hold a share.
    let shares = |running: &Running| {
        running
            .health
            .consumers()
            .iter()
            .filter(|c| c.state.to_string() == "running" || c.state.to_string() == "standby")
            .count()
    };
    assert_eq!(shares(&first), usize::from(PARTITIONS));
    let publisher = in_background(&js, ROUNDS, Duration::from_millis(50));
    journal
        .wait_distinct(
            KEYS as usize * 5,
            Duration::from_secs(30),
            "the first rounds handled",
        )
        .await;
    // A third replica joins mid-load, then the first drains mid-load.
    let third = run(2).await;
    journal
        .wait_distinct(
            KEYS as usize * 12,
            Duration::from_secs(30),
            "rounds after the join",
        )
        .await;
    first.stop().await.expect("the first replica drains");
    publisher.await.expect("the publisher ends");
    journal.wait_rounds(ROUNDS).await;
    let all = journal.all();
    assert_in_order(&all, ROUNDS, false);
    let by_replica = |r: usize| all.iter().filter(|h| h.replica == r).count();
    assert!(
        (0..3).all(|r| by_replica(r) > 0),
        "every replica handled a share: {:?}",
        (0..3).map(by_replica).collect::<Vec<_>>()
    );
    Running::stop_all(vec![second, third])
        .await
        .into_iter()
        .for_each(|r| r.expect("clean drain"));
}

/// The new version's topology in a migration onto partitions: `stream` routed by partition,
/// and the partitioned group `billing-v2` migrating from the plain queue consumer `old`.
fn migrating_topology(
    (stream, replicas): (&str, u8),
    old: &'static str,
    (journal, replica): (&Journal, usize),
    work: fn(u32) -> Duration,
) -> Topology {
    group_topology(
        orders_stream(stream, replicas, PARTITIONS),
        QueueDecl::new("billing-v2")
            .partitioned(PARTITIONS, &[1])
            .migrate_from(old),
        (journal.clone(), replica),
        None,
        work,
    )
}

/// The new version's topology in a partition count change: `ORDERS` routed into
/// [`PARTITIONS`] through a layout of its own (`<p>.v2.orders.<key>.paid`), and the group
/// `billing-v2` migrating from the partitioned group `old` of `count` partitions.
fn recounting_topology(
    (old, count): (&'static str, u16),
    (journal, replica): (&Journal, usize),
    work: fn(u32) -> Duration,
) -> Topology {
    let stream = fixture::stream("ORDERS", &["orders.*.paid"])
        .replicas(3)
        .subject_transform(SubjectTransform::new(
            "orders.*.paid",
            fixture::leak(format!(
                "{{{{partition({PARTITIONS},1)}}}}.v2.orders.{{{{wildcard(1)}}}}.paid"
            )),
        ));
    group_topology(
        stream,
        QueueDecl::new("billing-v2")
            .partitioned(PARTITIONS, &[1])
            .migrate_from(old)
            .migrate_from_partitions(count),
        (journal.clone(), replica),
        None,
        work,
    )
}

/// The checks after a migration onto partitions, on every key: rounds `1..=before` were stored
/// before the stream routed by partition, the rest after; each later one is handled once, in
/// order, never two at once, and after every earlier one ended.
fn assert_later_follow_earlier(journal: &[Handling], before: u64, rounds: u64) {
    let mut by_key: BTreeMap<u32, Vec<Handling>> = BTreeMap::new();
    for h in journal {
        by_key.entry(h.key).or_default().push(*h);
    }
    assert_eq!(by_key.len(), KEYS as usize, "every key handled");
    for (key, handlings) in by_key {
        let (earlier, mut later): (Vec<Handling>, Vec<Handling>) =
            handlings.into_iter().partition(|h| h.seq <= before);
        let mut seen: Vec<u64> = earlier.iter().map(|h| h.seq).collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(
            seen.len() as u64,
            before,
            "key {key}: every earlier message handled"
        );
        let last_earlier = earlier.iter().map(|h| h.end).max().unwrap_or(0);
        later.sort_by_key(|h| h.start);
        assert!(
            later.first().is_some_and(|h| h.start >= last_earlier),
            "key {key}: a message stored after the routing ran before the earlier ones ended"
        );
        let seqs: Vec<u64> = later.iter().map(|h| h.seq).collect();
        assert_eq!(
            seqs,
            (before + 1..rounds + 1).collect::<Vec<_>>(),
            "key {key}: the later messages, once each, in order"
        );
        assert!(
            later.windows(2).all(|w| w[1].start >= w[0].end),
            "key {key}: two later messages at once"
        );
    }
}

/// With the new version's replicas started (the stream routed into the new partitions): rounds
/// `before + 1..=rounds` published while the `old` replica drains away; every handling once all
/// rounds are handled.
async fn take_over(
    js: &async_nats::jetstream::Context,
    old: Running,
    journal: &Journal,
    (before, rounds): (u64, u64),
) -> Vec<Handling> {
    let publisher = {
        let js = js.clone();
        tokio::spawn(async move {
            publish(&js, before + 1..rounds + 1, Duration::from_millis(50)).await
        })
    };
    old.stop().await.expect("the old replica drains");
    publisher.await.expect("the publisher ends");
    journal.wait_rounds(rounds).await;
    journal.all()
}

/// The old fleet's work per message in [`a_plain_queue_consumer_becomes_partitioned_beside_its_old_fleet`]:
/// slow, so that the new fleet finds a backlog to read through the old consumer.
fn slow(_key: u32) -> Duration {
    Duration::from_millis(100)
}

/// `migrate_from` onto partitions (docs/PARTITIONS.md, "Migrating onto partitions"): an old
/// fleet runs a plain queue consumer `billing` on a stream stored as published, with a backlog;
/// two replicas of the new version (the stream routed by partition, the partitioned group
/// `billing-v2` migrating from `billing`) start beside it while publishing goes on; the old
/// replica drains away mid-way. Every message is handled; what was stored before the routing
/// (rounds up to `BEFORE`) through `billing`, by both fleets; each key's later messages only
/// after all of its earlier ones, in order, one at a time; `billing` is deleted, its slot
/// `retired` (ready), and the old replica's drain is clean.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_queue_consumer_becomes_partitioned_beside_its_old_fleet() {
    const BEFORE: u64 = 10;
    const ROUNDS: u64 = 30;
    let fx = Fixture::cluster().await;
    let journal = Journal::default();
    let plain = fixture::stream("ORDERS", &["orders.*.paid"]).replicas(3);
    let old = fixture::queue(
        "tests::billing_v1",
        &plain,
        "orders.*.paid",
        QueueDecl::new("billing").ack_wait(Duration::from_secs(5)),
    )
    .concurrency(4);
    let old = fx
        .run(recording(
            Topology::new().stream(plain),
            old,
            (journal.clone(), 0),
            None,
            slow,
        ))
        .await;
    let js = fx.jetstream().await;
    publish(&js, 1..BEFORE + 1, Duration::ZERO).await;
    journal
        .wait_distinct(8, Duration::from_secs(30), "the old fleet handles")
        .await;
    let new = |replica: usize| {
        migrating_topology(("ORDERS", 3), "billing", (&journal, replica), |_| WORK)
    };
    // The plan shows the old consumer read to its end, then deleted.
    let planned = fixture::fast(fx.builder().await)
        .topology(new(9))
        .build()
        .expect("a valid declaration")
        .plan()
        .await
        .expect("a plan");
    let old_item = planned
        .items
        .iter()
        .find(|i| i.consumer.as_deref() == Some("billing"))
        .unwrap_or_else(|| panic!("the old consumer is planned: {planned}"));
    assert!(
        matches!(&old_item.action, nats_topology::report::Action::Retire { into, pending, .. }
            if into == "billing-v2" && *pending > 0),
        "{planned}"
    );
    let [first, second] = [fx.run(new(1)).await, fx.run(new(2)).await];
    let all = take_over(&js, old, &journal, (BEFORE, ROUNDS)).await;
    let before = |h: &&Handling| h.seq <= BEFORE;
    assert!(
        all.iter().filter(before).any(|h| h.replica != 0),
        "the new fleet read what the old consumer still held"
    );
    assert_later_follow_earlier(&all, BEFORE, ROUNDS);
    let mut stream = js.get_stream("ORDERS").await.expect("the stream");
    let gone = stream.consumer_info("billing").await;
    assert!(gone.is_err(), "the old consumer is deleted: {gone:?}");
    for running in [&first, &second] {
        nats_topology_testkit::eventually(
            Duration::from_secs(10),
            "the consumer migrated from shows retired",
            || {
                let retired = running
                    .health
                    .consumers()
                    .iter()
                    .any(|c| c.consumer == "billing" && c.state.to_string() == "retired");
                async move { retired.then_some(()) }
            },
        )
        .await;
        // The partitions start once the old consumer is gone: each is `provisioning` until
        // its first pull reaches it, then `running`.
        fixture::wait_ready(&running.health, Duration::from_secs(30)).await;
    }
    // A new partition count through `migrate_from` is refused before the stream changes:
    // without `migrate_from_partitions`, and with it but stored in the old layout (the old
    // partitions' filters would read the new count's messages).
    let recount = |from: Option<u16>| {
        let stream = orders_stream("ORDERS", 3, 16);
        let queue = QueueDecl::new("billing-v3")
            .partitioned(16, &[1])
            .migrate_from("billing-v2");
        let queue = match from {
            Some(n) => queue.migrate_from_partitions(n),
            None => queue,
        };
        let consumer = fixture::queue("tests::billing_v3", &stream, "orders.*.paid", queue);
        recording(
            Topology::new().stream(stream),
            consumer,
            (Journal::default(), 3),
            None,
            |_| WORK,
        )
    };
    for (from, says) in [
        (None, "migrate_from_partitions = N"),
        (Some(PARTITIONS), "a layout of its own"),
    ] {
        // `plan` shows the refusal, on the consumer migrated from.
        let planned = fixture::fast(fx.builder().await)
            .topology(recount(from))
            .build()
            .expect("a valid declaration")
            .plan()
            .await
            .expect("a plan");
        assert!(planned.fails(), "{planned}");
        assert!(
            planned.items.iter().any(|i| {
                i.consumer.as_deref().is_some_and(|c| c.starts_with("billing-v2"))
                    && matches!(&i.action, nats_topology::report::Action::Refused(why) if why.contains(says))
            }),
            "{planned}"
        );
        let outcome = fixture::fast(fx.builder().await)
            .topology(recount(from))
            .build()
            .expect("a valid declaration")
            .run_until(std::future::pending::<()>())
            .await;
        let Err(nats_topology::RunError::Provision(error)) = outcome else {
            panic!("refused at start-up: {outcome:?}");
        };
        assert_eq!(error.kind(), nats_topology::ProvisionErrorKind::Unsupported);
        assert!(error.to_string().contains(says), "{error}");
    }
    let routed = stream
        .info()
        .await
        .expect("the stream's info")
        .config
        .clone();
    assert_eq!(
        routed.subject_transform.map(|t| t.destination),
        Some(format!(
            "{{{{partition({PARTITIONS},1)}}}}.orders.{{{{wildcard(1)}}}}.paid"
        )),
        "the stream still routes by the old count"
    );
    Running::stop_all(vec![first, second])
        .await
        .into_iter()
        .for_each(|r| r.expect("clean drain"));
}

/// A partitioned group's count changes through `migrate_from` (docs/PARTITIONS.md, "Changing
/// the count"): an old fleet runs `billing` in 4 partitions, with a backlog; two replicas of
/// the new version (the stream routed into 8 partitions through a layout of its own, the group
/// `billing-v2` migrating from `billing`'s 4 partitions) start beside it while publishing goes
/// on; the old replica drains away mid-way. Every key's messages are handled once each, in
/// order, never two at once, across the change: what was stored before the routing through
/// the old partitions (by both fleets), the rest through the new ones, after; the old
/// partitions are deleted, their slots `retired`, and each new partition names the old one
/// it follows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_group_changes_its_count_beside_its_old_fleet() {
    const BEFORE: u64 = 10;
    const ROUNDS: u64 = 30;
    const OLD: u16 = 4;
    let fx = Fixture::cluster().await;
    let journal = Journal::default();
    let old = fx
        .run(replica_topology_with(
            ("ORDERS", 3, OLD),
            journal.clone(),
            0,
            None,
            slow,
        ))
        .await;
    let js = fx.jetstream().await;
    publish(&js, 1..BEFORE + 1, Duration::ZERO).await;
    journal
        .wait_distinct(8, Duration::from_secs(30), "the old fleet handles")
        .await;
    let new = |replica: usize| recounting_topology(("billing", OLD), (&journal, replica), |_| WORK);
    // A count lower than the old group's is refused before the stream changes.
    let outcome = fixture::fast(fx.builder().await)
        .topology(recounting_topology(
            ("billing", OLD - 1),
            (&journal, 8),
            |_| WORK,
        ))
        .build()
        .expect("a valid declaration")
        .run_until(std::future::pending::<()>())
        .await;
    let Err(nats_topology::RunError::Provision(error)) = outcome else {
        panic!("refused at start-up: {outcome:?}");
    };
    assert!(error.to_string().contains("`billing-p3` exists"), "{error}");
    // The plan shows each old partition read to its end, then deleted.
    let planned = fixture::fast(fx.builder().await)
        .topology(new(9))
        .build()
        .expect("a valid declaration")
        .plan()
        .await
        .expect("a plan");
    for index in 0..OLD {
        let name = format!("billing-p{index}");
        let item = planned
            .items
            .iter()
            .find(|i| i.consumer.as_deref() == Some(name.as_str()))
            .unwrap_or_else(|| panic!("the old partition {name} is planned: {planned}"));
        assert!(
            matches!(&item.action, nats_topology::report::Action::Retire { into, deleted: true, .. }
                if into == "billing-v2"),
            "{planned}"
        );
    }
    let [first, second] = [fx.run(new(1)).await, fx.run(new(2)).await];
    let all = take_over(&js, old, &journal, (BEFORE, ROUNDS)).await;
    assert!(
        all.iter().any(|h| h.seq <= BEFORE && h.replica != 0),
        "the new fleet read what the old partitions still held"
    );
    assert!(
        all.iter().all(|h| h.seq <= BEFORE || h.replica != 0),
        "nothing stored after the routing reached the old partitions"
    );
    assert_in_order(&all, ROUNDS, false);
    let stream = js.get_stream("ORDERS").await.expect("the stream");
    for index in 0..OLD {
        let name = format!("billing-p{index}");
        nats_topology_testkit::eventually(
            Duration::from_secs(10),
            "the old partition is deleted",
            || {
                let gone = first
                    .health
                    .consumers()
                    .iter()
                    .any(|c| c.consumer == name && c.state.to_string() == "retired");
                async move { gone.then_some(()) }
            },
        )
        .await;
        let gone = stream.consumer_info(&name).await;
        assert!(gone.is_err(), "{name} is deleted: {gone:?}");
        let successor = stream
            .consumer_info(&format!("billing-v2-p{index}"))
            .await
            .expect("the new partition");
        assert_eq!(
            successor
                .config
                .metadata
                .get("nats-topology.migrated-from")
                .map(String::as_str),
            Some(name.as_str()),
            "the new partition names the old one it follows"
        );
    }
    for running in [&first, &second] {
        fixture::wait_ready(&running.health, Duration::from_secs(30)).await;
    }
    Running::stop_all(vec![first, second])
        .await
        .into_iter()
        .for_each(|r| r.expect("clean drain"));
}

/// A replica of the test's own (in this process) on `client`.
async fn run_on(client: async_nats::Client, topology: Topology) -> Running {
    Running::start(fixture::fast(nats_topology::Runtime::builder(client)).topology(topology)).await
}

/// Key 0's messages take long enough that a cut-off replica is likely mid-way through one.
fn slow_key_zero(key: u32) -> Duration {
    if key == 0 {
        Duration::from_millis(400)
    } else {
        WORK
    }
}

/// What the fault tests share: three replicas in this process (replica 0 on `first`, the
/// others on the whole cluster), load published while `fault` runs after the first rounds,
/// `heal` after more, then every message handled, in order per key, never two at once.
async fn through_a_fault<F, H>(
    fx: &mut Fixture<nats_topology_testkit::NatsCluster>,
    first: async_nats::Client,
    fault: F,
    heal: H,
) where
    F: AsyncFnOnce(&mut nats_topology_testkit::NatsCluster),
    H: AsyncFnOnce(&mut nats_topology_testkit::NatsCluster),
{
    const ROUNDS: u64 = 40;
    let journal = Journal::default();
    let topology = |replica: usize| {
        replica_topology_with(
            ("ORDERS", 3, PARTITIONS),
            journal.clone(),
            replica,
            None,
            slow_key_zero,
        )
    };
    let mut replicas = vec![run_on(first, topology(0)).await];
    for replica in 1..3 {
        let client = fixture::connect_in_order(&urls_from(&fx.server.urls(), replica)).await;
        replicas.push(run_on(client, topology(replica)).await);
    }
    let js = fixture::connect_in_order(&urls_from(&fx.server.urls(), 2)).await;
    let js = async_nats::jetstream::new(js);
    let publisher = in_background(&js, ROUNDS, Duration::from_millis(100));
    journal
        .wait_distinct(
            KEYS as usize * 5,
            Duration::from_secs(30),
            "the first rounds",
        )
        .await;
    fault(&mut fx.server).await;
    let at_fault = journal.distinct();
    journal
        .wait_distinct(
            at_fault + KEYS as usize * 8,
            Duration::from_secs(40),
            "rounds after the fault",
        )
        .await;
    heal(&mut fx.server).await;
    publisher.await.expect("the publisher ends");
    journal.wait_rounds(ROUNDS).await;
    assert_in_order(&journal.all(), ROUNDS, true);
    for result in Running::stop_all(replicas).await {
        result.expect("a clean drain");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn order_per_key_holds_through_a_node_killed() {
    let mut fx = Fixture::cluster().await;
    let first = fixture::connect_in_order(&urls_from(&fx.server.urls(), 1)).await;
    through_a_fault(
        &mut fx,
        first,
        async |cluster| cluster.kill(1),
        async |_| {},
    )
    .await;
}

/// Every node restarted gracefully in turn (SIGTERM, then started again on its store), as an
/// upgrade of the cluster does; replica 0 is connected to node 1 first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn order_per_key_holds_through_a_rolling_restart_of_the_cluster() {
    let mut fx = Fixture::cluster().await;
    let first = fixture::connect_in_order(&urls_from(&fx.server.urls(), 1)).await;
    through_a_fault(
        &mut fx,
        first,
        async |cluster| {
            for node in 0..cluster.len() {
                cluster
                    .restart(node)
                    .await
                    .unwrap_or_else(|e| panic!("node {node} restarts: {e}"));
            }
        },
        async |_| {},
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn order_per_key_holds_through_a_stalled_link_to_one_replica() {
    let mut fx = Fixture::linked_cluster().await;
    let link = fx
        .server
        .client_link(0)
        .await
        .expect("a link of replica 0's own");
    let first = fixture::connect_in_order(&[link.url()]).await;
    let stalled = link.clone();
    through_a_fault(
        &mut fx,
        first,
        async move |_| stalled.stall(),
        async move |_| link.heal(),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn order_per_key_holds_through_a_network_partition_of_one_replicas_node() {
    let mut fx = Fixture::linked_cluster().await;
    let link = fx
        .server
        .client_link(0)
        .await
        .expect("a link of replica 0's own");
    // Replica 0 knows node 0 only: isolated with it, it is cut off from the majority.
    let first = fixture::connect_in_order(&[link.url()]).await;
    through_a_fault(
        &mut fx,
        first,
        async |cluster| cluster.isolate(0),
        async |cluster| cluster.heal(),
    )
    .await;
}

/// The fence, staged: a delivery held in a stalled link while the partition moved to another
/// replica reaches its old holder once the link heals; handled then, it would run after the
/// later messages of its key. It is not handled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_held_in_a_stalled_link_is_not_handled_once_the_partition_moved_on() {
    let fx = Fixture::linked_cluster().await;
    let journal = Journal::default();
    let topology = |replica: usize| {
        replica_topology_with(("HELD", 3, 1), journal.clone(), replica, None, |_| WORK)
    };
    let link = fx
        .server
        .client_link(0)
        .await
        .expect("a link of replica 0's own");
    let held = run_on(fixture::connect_in_order(&[link.url()]).await, topology(0)).await;
    let js = async_nats::jetstream::new(
        fixture::connect_in_order(&urls_from(&fx.server.urls(), 1)).await,
    );
    let one = |seq: u64| {
        let js = js.clone();
        async move {
            let order = serde_json::to_vec(&Order { key: 0, seq }).unwrap();
            js.publish("orders.0.paid", order.into())
                .await
                .unwrap()
                .await
                .unwrap();
        }
    };
    one(1).await;
    journal
        .wait_distinct(
            1,
            Duration::from_secs(20),
            "the first message handled by replica 0",
        )
        .await;
    // Replica 0 holds the partition and has a pull request open: the next message goes into
    // its link, which stalls first.
    link.stall();
    one(2).await;
    let stream = js.get_stream("HELD").await.unwrap();
    nats_topology_testkit::eventually(
        Duration::from_secs(5),
        "message 2 delivered to replica 0",
        || {
            let stream = stream.clone();
            async move {
                let info = stream
                    .get_consumer::<async_nats::jetstream::consumer::pull::Config>("billing-p0")
                    .await
                    .ok()?
                    .cached_info()
                    .clone();
                (info.delivered.stream_sequence == 2).then_some(())
            }
        },
    )
    .await;
    for seq in 3..=5 {
        one(seq).await;
    }
    // Replica 1 takes the partition once replica 0's membership and pin lapse, and message 2
    // once its ack_wait ran out.
    let other = run_on(
        fixture::connect_in_order(&urls_from(&fx.server.urls(), 1)).await,
        topology(1),
    )
    .await;
    journal
        .wait_distinct(
            5,
            Duration::from_secs(30),
            "messages 2 to 5 handled by replica 1",
        )
        .await;
    // The link heals: the held delivery of message 2 reaches replica 0, which asks, and
    // leaves it.
    link.heal();
    nats_topology_testkit::eventually(
        Duration::from_secs(20),
        "replica 0 hears the server again",
        || {
            let state = held.health.consumers()[0].state.to_string();
            async move { (state == "standby").then_some(()) }
        },
    )
    .await;
    one(6).await;
    journal
        .wait_distinct(6, Duration::from_secs(20), "message 6 handled")
        .await;
    let all = journal.all();
    assert_in_order_one_key(&all, 6);
    let by_zero: Vec<u64> = all
        .iter()
        .filter(|h| h.replica == 0)
        .map(|h| h.seq)
        .collect();
    assert_eq!(
        by_zero,
        vec![1],
        "replica 0 handled only what it held before the stall"
    );
    for result in Running::stop_all(vec![held, other]).await {
        result.expect("a clean drain");
    }
}

/// A handling stopped before it ended (its handler's future dropped, as the grace period
/// stops a handler): recorded into its journal with the time it was dropped as its end.
struct UntilDropped {
    handling: Option<Handling>,
    stopped: Journal,
}

impl Drop for UntilDropped {
    fn drop(&mut self) {
        if let Some(mut handling) = self.handling.take() {
            handling.end = micros();
            self.stopped.push(handling);
        }
    }
}

/// The round whose handlers replica 0 runs far past its grace period, and for how long.
const STUCK: u64 = 3;
const STUCK_FOR: Duration = Duration::from_secs(8);

/// [`a_handler_outlasting_the_grace_period_of_a_move_is_stopped_before_its_message_moves`]'s
/// replica: handlings into `journal`, stopped ones into `stopped`; replica 0's first
/// [`PARTITIONS`] handlers of round [`STUCK`] (counted in `stuck`) run for [`STUCK_FOR`].
fn stuck_topology(
    journal: Journal,
    stopped: Journal,
    stuck: Arc<AtomicUsize>,
    replica: usize,
) -> Topology {
    let stream = orders_stream("MOVES", 3, PARTITIONS);
    let queue = QueueDecl::new("billing")
        .partitioned(PARTITIONS, &[1])
        .ack_wait(Duration::from_secs(5));
    let consumer = fixture::queue("tests::billing", &stream, "orders.*.paid", queue);
    Topology::new()
        .stream(stream)
        .consumer(consumer, move |incoming| {
            let (journal, stopped, stuck) = (journal.clone(), stopped.clone(), stuck.clone());
            Box::pin(async move {
                let Order { key, seq } = serde_json::from_slice(incoming.payload())
                    .map_err(|e| HandlerError::permanent(format!("not an order: {e}")))?;
                let start = micros();
                let mut running = UntilDropped {
                    handling: Some(Handling {
                        key,
                        seq,
                        replica,
                        start,
                        end: start,
                    }),
                    stopped,
                };
                // The first of round `STUCK` in each partition (each runs one at a time).
                let work = if replica == 0
                    && seq == STUCK
                    && stuck.fetch_add(1, Ordering::SeqCst) < usize::from(PARTITIONS)
                {
                    STUCK_FOR
                } else {
                    WORK
                };
                // The handler's work (past the grace period) is the scenario, not synchronisation.
                tokio::time::sleep(work).await;
                running.handling = None;
                journal.push(Handling {
                    key,
                    seq,
                    replica,
                    start,
                    end: micros(),
                });
                Ok::<(), HandlerError>(())
            })
        })
}

/// A partition moves while its handler runs past the grace period: replica 0 (grace period
/// 1 s) holds every partition, each stuck in a handler of round [`STUCK`] for 8 s; replica 1
/// joins, and the partitions the new assignment gives it are drained on replica 0. Their
/// handlers are stopped at the grace period and their messages given back, and replica 1
/// handles each before the later messages of its key. Checked on every key: in order, none
/// missing or repeated, and no handling overlapping another of its key, the stopped ones
/// (until they were dropped) included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_outlasting_the_grace_period_of_a_move_is_stopped_before_its_message_moves() {
    const ROUNDS: u64 = 6;
    let fx = Fixture::cluster().await;
    let (journal, stopped) = (Journal::default(), Journal::default());
    let stuck = Arc::new(AtomicUsize::new(0));
    let js = fx.jetstream().await;
    let first = Running::start(
        fixture::fast(fx.builder().await)
            .grace_period(Duration::from_secs(1))
            .topology(stuck_topology(
                journal.clone(),
                stopped.clone(),
                stuck.clone(),
                0,
            )),
    )
    .await;
    publish(&js, 1..ROUNDS + 1, Duration::ZERO).await;
    nats_topology_testkit::eventually(
        Duration::from_secs(30),
        "every partition stuck in a handler of round 3 on replica 0",
        || {
            let n = stuck.load(Ordering::SeqCst);
            async move { (n >= usize::from(PARTITIONS)).then_some(()) }
        },
    )
    .await;
    let second = fx
        .run(stuck_topology(
            journal.clone(),
            stopped.clone(),
            stuck.clone(),
            1,
        ))
        .await;
    journal.wait_rounds(ROUNDS).await;
    let handled = journal.all();
    assert_in_order(&handled, ROUNDS, false);
    let stopped = stopped.all();
    assert!(
        !stopped.is_empty() && stopped.iter().all(|h| h.replica == 0 && h.seq == STUCK),
        "replica 0's stuck handlers of the partitions that moved were stopped: {stopped:?}"
    );
    // Every stopped handling's message was handled by replica 1, after the stop.
    let mut all = handled.clone();
    all.extend(&stopped);
    let mut by_key: BTreeMap<u32, Vec<Handling>> = BTreeMap::new();
    for h in &all {
        by_key.entry(h.key).or_default().push(*h);
    }
    for (key, mut handlings) in by_key {
        handlings.sort_by_key(|h| h.start);
        for pair in handlings.windows(2) {
            assert!(
                pair[1].start >= pair[0].end,
                "key {key}: seq {} (replica {}) started {} µs before seq {} (replica {}, stopped \
                 or ended) ended",
                pair[1].seq,
                pair[1].replica,
                pair[0].end - pair[1].start,
                pair[0].seq,
                pair[0].replica,
            );
        }
    }
    for s in &stopped {
        assert!(
            handled
                .iter()
                .any(|h| (h.key, h.seq, h.replica) == (s.key, s.seq, 1)),
            "key {}: the stopped seq {} handled by replica 1: {handled:?}",
            s.key,
            s.seq
        );
    }
    Running::stop_all(vec![first, second])
        .await
        .into_iter()
        .for_each(|r| r.expect("clean drain"));
}

/// Key 0 handled `1..=n` in order, once each.
fn assert_in_order_one_key(journal: &[Handling], n: u64) {
    let mut handlings = journal.to_vec();
    handlings.sort_by_key(|h| h.start);
    let seqs: Vec<u64> = handlings.iter().map(|h| h.seq).collect();
    assert_eq!(seqs, (1..=n).collect::<Vec<_>>(), "{handlings:?}");
}

/// Two replicas of a partitioned group, each on a user holding exactly the group's generated
/// permissions (role `owner`): they provision the partitions and the members' bucket, share
/// the partitions, keep the order, and one drains (removing its key) without a denial.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_group_runs_under_exactly_its_generated_permissions() {
    use nats_topology::export::{self, Role, Verb};
    const ROUNDS: u64 = 5;
    const SERVICE: &str = "billing";
    let journal = Journal::default();
    let topology =
        |replica: usize| replica_topology(("GRANTED", 1), journal.clone(), replica, None);
    let role = Role::owner(SERVICE);
    let permissions = export::permissions(&topology(0), &role);
    let api = |request: &str| format!("$JS.API.{request}");
    for (verb, subject) in [
        (Verb::Publish, api("CONSUMER.MSG.NEXT.GRANTED.billing-p3")),
        (Verb::Publish, api("CONSUMER.UNPIN.GRANTED.billing-p3")),
        (
            Verb::Publish,
            api("CONSUMER.CREATE.GRANTED.billing-p7.7.orders.*.paid"),
        ),
        (
            Verb::Publish,
            "$JS.ACK.GRANTED.billing-p7.1.2.3.4.5".to_owned(),
        ),
        (
            Verb::Publish,
            "$KV.ntopo_members.GRANTED.billing.0123".to_owned(),
        ),
        (Verb::Publish, api("STREAM.INFO.KV_ntopo_members")),
        (Verb::Publish, api("STREAM.PURGE.KV_ntopo_members")),
        (Verb::Publish, api("STREAM.MSG.GET.GRANTED")),
    ] {
        assert!(
            permissions.allows(verb, &subject),
            "{verb:?} {subject} is granted:\n{}",
            permissions.permissions_map()
        );
    }
    let server = nats_topology_testkit::NatsServer::builder()
        .config(fixture::users_config(&[(SERVICE, "pw", &permissions)]))
        .probe_user("admin", "admin")
        .start()
        .await
        .expect("nats-server starts");
    let url = server.url();
    let client = || fixture::client_of(&url, SERVICE, "pw", role.inbox_prefix());
    let first =
        Running::start(fixture::fast(Runtime::builder(client().await)).topology(topology(0))).await;
    let second =
        Running::start(fixture::fast(Runtime::builder(client().await)).topology(topology(1))).await;
    let admin = async_nats::jetstream::new(fixture::admin_of(&server.url()).await);
    publish(&admin, 1..ROUNDS + 1, Duration::ZERO).await;
    journal.wait_rounds(ROUNDS).await;
    assert_in_order(&journal.all(), ROUNDS, false);
    let denials = [first.health.denials(), second.health.denials()].concat();
    assert!(denials.is_empty(), "no permission denied: {denials:?}");
    for result in Running::stop_all(vec![first, second]).await {
        result.expect("a clean drain");
    }
    // Both left the group: their keys were purged (a denied purge would leave them).
    let members = admin.get_stream("KV_ntopo_members").await.unwrap();
    let mut subjects = members
        .info_with_subjects("$KV.ntopo_members.>")
        .await
        .unwrap();
    use futures::StreamExt;
    assert!(subjects.next().await.is_none(), "no member keys left");
}

/// Beside the migration: the old fleet is gone (its consumer holds a backlog), and a replica
/// of the new version is SIGKILLed while it reads the old consumer. What it held unacknowledged
/// comes back after the old consumer's `ack_wait`, to the survivor, before the partitions start:
/// every message handled, each key's later messages after all of its earlier ones, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migration_onto_partitions_holds_through_a_new_replica_killed_mid_way() {
    const BEFORE: u64 = 20;
    const ROUNDS: u64 = 30;
    let fx = Fixture::cluster().await;
    let urls = fx.server.urls();
    let js = fx.jetstream().await;
    // The old version's stream (stored as published) and consumer, its fleet gone.
    old_version(&js, ("ORDERS", 3), "billing").await;
    publish(&js, 1..BEFORE + 1, Duration::ZERO).await;
    let all = killed_while_reading(&urls, &js, "billing", (BEFORE, ROUNDS)).await;
    assert_later_follow_earlier(&all, BEFORE, ROUNDS);
    let stream = js.get_stream("ORDERS").await.expect("the stream");
    assert!(
        stream.consumer_info("billing").await.is_err(),
        "the old consumer is deleted"
    );
}

/// Beside a migration from `from` (see [`REPLICA_MIGRATES_FROM`]), with rounds `1..=before`
/// stored before it: two replica processes of the new version start, the first to handle a
/// message is SIGKILLed before what was stored before the routing is read, and rounds up to
/// `rounds` are published. Every handling once all are handled, the survivor drained.
async fn killed_while_reading(
    urls: &[String],
    js: &async_nats::jetstream::Context,
    from: &str,
    (before, rounds): (u64, u64),
) -> Vec<Handling> {
    let (tx, mut lines) = mpsc::unbounded_channel();
    let mut replicas: Vec<Replica> = (0..2)
        .map(|r| spawn_replica_with(r, &urls_from(urls, r), tx.clone(), Some(from)))
        .collect();
    let mut reports = Reports::default();
    reports
        .until(
            &mut lines,
            Duration::from_secs(60),
            "a new replica reading what the stream stored before the routing",
            |r| !r.journal.all().is_empty(),
        )
        .await;
    let killed = reports.journal.all()[0].replica;
    reports
        .kill(&mut lines, &mut replicas[killed], killed)
        .await;
    assert!(
        reports.journal.distinct() < (KEYS as u64 * before) as usize,
        "killed before what was stored before the routing was read"
    );
    // The stream routes by partition since the new version started: these reach the partitions.
    publish(js, before + 1..rounds + 1, Duration::from_millis(20)).await;
    reports
        .until(
            &mut lines,
            Duration::from_secs(90),
            "every message handled",
            |r| r.journal.distinct() >= KEYS as usize * rounds as usize,
        )
        .await;
    let survivor = 1 - killed;
    reports
        .drain(&mut lines, &replicas[survivor], survivor)
        .await;
    reports.journal.all()
}

/// Beside a partition count change: the old fleet (4 partitions) leaves a backlog and is gone,
/// and a replica of the new version is SIGKILLed while it reads the old partitions. What it
/// held comes back after the old partitions' `ack_wait`, to the survivor, once its pins lapse,
/// in order: every key's messages handled in order, never two at once, the later ones (the new
/// count's) after all of the earlier ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_count_change_holds_through_a_new_replica_killed_mid_way() {
    const BEFORE: u64 = 20;
    const ROUNDS: u64 = 30;
    const OLD: u16 = 4;
    let fx = Fixture::cluster().await;
    let urls = fx.server.urls();
    let js = fx.jetstream().await;
    // The old fleet: provisions its group of 4 partitions and leaves, its backlog unread.
    let old = fx
        .run(replica_topology_with(
            ("ORDERS", 3, OLD),
            Journal::default(),
            9,
            None,
            |_| WORK,
        ))
        .await;
    old.stop().await.expect("the old fleet drains");
    publish(&js, 1..BEFORE + 1, Duration::ZERO).await;
    let from = format!("billing:{OLD}");
    let all = killed_while_reading(&urls, &js, &from, (BEFORE, ROUNDS)).await;
    assert_in_order(&all, ROUNDS, true);
    assert_later_follow_earlier(&all, BEFORE, ROUNDS);
    let stream = js.get_stream("ORDERS").await.expect("the stream");
    for index in 0..OLD {
        assert!(
            stream
                .consumer_info(&format!("billing-p{index}"))
                .await
                .is_err(),
            "the old partition {index} is deleted"
        );
    }
}

/// What an old version left, as someone else's: the stream `name` of `orders.*.paid`, stored
/// as published, and its plain pull consumer `consumer` (`ack_wait` 5 s).
async fn old_version(
    js: &async_nats::jetstream::Context,
    (name, replicas): (&str, usize),
    consumer: &str,
) {
    let stream = js
        .create_stream(async_nats::jetstream::stream::Config {
            name: name.to_owned(),
            subjects: vec!["orders.*.paid".to_owned()],
            num_replicas: replicas,
            ..Default::default()
        })
        .await
        .expect("the old stream");
    stream
        .create_consumer(async_nats::jetstream::consumer::pull::Config {
            durable_name: Some(consumer.to_owned()),
            filter_subject: "orders.*.paid".to_owned(),
            ack_wait: Duration::from_secs(5),
            ..Default::default()
        })
        .await
        .expect("the old consumer");
}

/// A migration onto partitions under the permissions generated for it, and no more: the old
/// plain consumer (created by someone else, with a backlog) is read to its end and deleted,
/// the partitions start, and nothing is denied. Without the grant to delete it, health names
/// the denial and the declaration that needs it, and the old consumer stays, with the
/// partitions standing by.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migration_onto_partitions_runs_under_exactly_its_generated_permissions() {
    use nats_topology::export::{self, Role};
    const BEFORE: u64 = 5;
    const ROUNDS: u64 = 10;
    let journal = Journal::default();
    let role = Role::owner("billing");
    let permissions = export::permissions(&migration_under_topology(&journal, 0), &role);
    let (server, admin, replicas) =
        migration_under(&permissions, &role, (&journal, BEFORE), Old::Plain).await;
    publish(&admin, BEFORE + 1..ROUNDS + 1, Duration::ZERO).await;
    journal.wait_rounds(ROUNDS).await;
    assert_later_follow_earlier(&journal.all(), BEFORE, ROUNDS);
    let stream = admin.get_stream("GRANTED").await.unwrap();
    assert!(
        stream.consumer_info("billing-old").await.is_err(),
        "the old consumer is deleted"
    );
    let denials: Vec<_> = replicas.iter().flat_map(|r| r.health.denials()).collect();
    assert!(denials.is_empty(), "no permission denied: {denials:?}");
    restarted_after(&server, &role, migration_under_topology(&journal, 3)).await;
    for result in Running::stop_all(replicas).await {
        result.expect("a clean drain");
    }

    // The other way: without the grant to delete the old consumer.
    let delete = "$JS.API.CONSUMER.DELETE.GRANTED.billing-old";
    let journal = Journal::default();
    let without = fixture::without_grant(&permissions, delete);
    let (_server, admin, replicas) =
        migration_under(&without, &role, (&journal, BEFORE), Old::Plain).await;
    deletion_denied(
        (&journal, BEFORE),
        (&admin, replicas),
        (delete, "billing-old"),
    )
    .await;
}

/// A partition count change (4 partitions to 8) under the permissions generated for it, and no
/// more: the old partitions (provisioned by an admin, with a backlog) are read to their end
/// and deleted, the new ones start, every key in order, and nothing is denied. Without the
/// grant to delete one old partition, health names the denial and the new partitions stand
/// by, that old partition staying.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_count_change_runs_under_exactly_its_generated_permissions() {
    use nats_topology::export::{self, Role};
    const BEFORE: u64 = 5;
    const ROUNDS: u64 = 10;
    let journal = Journal::default();
    let role = Role::owner("billing");
    let permissions = export::permissions(&recount_under_topology(&journal, 0), &role);
    let (server, admin, replicas) =
        migration_under(&permissions, &role, (&journal, BEFORE), Old::Partitions).await;
    publish(&admin, BEFORE + 1..ROUNDS + 1, Duration::ZERO).await;
    journal.wait_rounds(ROUNDS).await;
    assert_in_order(&journal.all(), ROUNDS, false);
    assert_later_follow_earlier(&journal.all(), BEFORE, ROUNDS);
    let stream = admin.get_stream("GRANTED").await.unwrap();
    for index in 0..4 {
        nats_topology_testkit::eventually(
            Duration::from_secs(10),
            "the old partitions are deleted",
            || {
                let stream = stream.clone();
                async move {
                    let name = format!("billing-p{index}");
                    stream.consumer_info(&name).await.is_err().then_some(())
                }
            },
        )
        .await;
    }
    let denials: Vec<_> = replicas.iter().flat_map(|r| r.health.denials()).collect();
    assert!(denials.is_empty(), "no permission denied: {denials:?}");
    restarted_after(&server, &role, recount_under_topology(&journal, 3)).await;
    for result in Running::stop_all(replicas).await {
        result.expect("a clean drain");
    }

    // The other way: without the grant to delete the old partition 0.
    let delete = "$JS.API.CONSUMER.DELETE.GRANTED.billing-p0";
    let journal = Journal::default();
    let without = fixture::without_grant(&permissions, delete);
    let (_server, admin, replicas) =
        migration_under(&without, &role, (&journal, BEFORE), Old::Partitions).await;
    deletion_denied(
        (&journal, BEFORE),
        (&admin, replicas),
        (delete, "billing-p0"),
    )
    .await;
}

/// A replica of the new version started on `server` as the service once the migration is
/// done (what it migrated from deleted): it starts under the same grants, ready, nothing
/// denied.
async fn restarted_after(
    server: &nats_topology_testkit::NatsServer,
    role: &nats_topology::export::Role,
    topology: Topology,
) {
    let client = fixture::client_of(&server.url(), "billing", "pw", role.inbox_prefix()).await;
    let running = Running::start(fixture::fast(Runtime::builder(client)).topology(topology)).await;
    let denials = running.health.denials();
    assert!(
        denials.is_empty(),
        "no permission denied on a restart: {denials:?}"
    );
    running.stop().await.expect("a clean drain");
}

/// A migration on `GRANTED` without the grant to `delete` the consumer `old`: once what was
/// stored before the routing (rounds `1..=before`) is read, every replica's health names the
/// denied deletion, `old` stays, and the new partitions stand by.
async fn deletion_denied(
    (journal, before): (&Journal, u64),
    (admin, replicas): (&async_nats::jetstream::Context, Vec<Running>),
    (delete, old): (&str, &str),
) {
    journal
        .wait_distinct(
            KEYS as usize * before as usize,
            Duration::from_secs(30),
            "what was stored before the routing read to its end",
        )
        .await;
    for running in &replicas {
        nats_topology_testkit::eventually(
            Duration::from_secs(15),
            "health names the denied deletion",
            || {
                let named = running
                    .health
                    .denials()
                    .iter()
                    .any(|d| d.subject == delete && d.to_string().contains("tests::billing"));
                async move { named.then_some(()) }
            },
        )
        .await;
    }
    let stream = admin.get_stream("GRANTED").await.unwrap();
    assert!(stream.consumer_info(old).await.is_ok(), "{old} stays");
    let standing_by = replicas[0]
        .health
        .consumers()
        .iter()
        .filter(|c| c.consumer.starts_with("billing-v2-p"))
        .all(|c| c.state.to_string() == "standby");
    assert!(standing_by, "the partitions stand by until it is gone");
    for result in Running::stop_all(replicas).await {
        result.expect("a clean drain");
    }
}

/// The new version of a count change on the single-replica stream `GRANTED`: 8 partitions in a
/// layout of their own, from the 4 of `billing`.
fn recount_under_topology(journal: &Journal, replica: usize) -> Topology {
    let stream =
        fixture::stream("GRANTED", &["orders.*.paid"]).subject_transform(SubjectTransform::new(
            "orders.*.paid",
            fixture::leak(format!(
                "{{{{partition({PARTITIONS},1)}}}}.v2.orders.{{{{wildcard(1)}}}}.paid"
            )),
        ));
    group_topology(
        stream,
        QueueDecl::new("billing-v2")
            .partitioned(PARTITIONS, &[1])
            .migrate_from("billing")
            .migrate_from_partitions(4),
        (journal.clone(), replica),
        None,
        |_| WORK,
    )
}

/// [`migrating_topology`] on the single-replica stream `GRANTED`, from `billing-old`.
fn migration_under_topology(journal: &Journal, replica: usize) -> Topology {
    migrating_topology(("GRANTED", 1), "billing-old", (journal, replica), |_| WORK)
}

/// What the new version migrates from in [`migration_under`], on the single-replica stream
/// `GRANTED`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Old {
    /// The stream stored as published and the plain queue consumer `billing-old`, created by
    /// an admin ([`migration_under_topology`] migrates from it).
    Plain,
    /// The group `billing` of 4 partitions, provisioned by an admin's runtime of the old
    /// version, drained ([`recount_under_topology`] migrates from it).
    Partitions,
}

/// A server whose only user is the service, granted `permissions`; the old version (`old`),
/// with rounds `1..=before` published; two replicas of the new version started on it.
async fn migration_under(
    permissions: &nats_topology::export::Permissions,
    role: &nats_topology::export::Role,
    (journal, before): (&Journal, u64),
    old: Old,
) -> (
    nats_topology_testkit::NatsServer,
    async_nats::jetstream::Context,
    Vec<Running>,
) {
    let server = nats_topology_testkit::NatsServer::builder()
        .config(fixture::users_config(&[("billing", "pw", permissions)]))
        .probe_user("admin", "admin")
        .start()
        .await
        .expect("nats-server starts");
    let url = server.url();
    let admin_client = fixture::admin_of(&url).await;
    let admin = async_nats::jetstream::new(admin_client.clone());
    match old {
        Old::Plain => old_version(&admin, ("GRANTED", 1), "billing-old").await,
        Old::Partitions => {
            let topology =
                replica_topology_with(("GRANTED", 1, 4), Journal::default(), 9, None, |_| WORK);
            let builder = fixture::fast(Runtime::builder(admin_client)).topology(topology);
            let running = Running::start(builder).await;
            running.stop().await.expect("the old version drains");
        }
    }
    publish(&admin, 1..before + 1, Duration::ZERO).await;
    let mut replicas = Vec::new();
    for replica in 0..2 {
        let client = fixture::client_of(&url, "billing", "pw", role.inbox_prefix()).await;
        let topology = match old {
            Old::Plain => migration_under_topology(journal, replica),
            Old::Partitions => recount_under_topology(journal, replica),
        };
        let builder = fixture::fast(Runtime::builder(client)).topology(topology);
        replicas.push(Running::start(builder).await);
    }
    (server, admin, replicas)
}
