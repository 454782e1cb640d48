//! Failover on real servers: a worker process killed with SIGKILL while it holds in-flight
//! messages, and a cluster node killed during consumption. Nothing is lost.
//!
//! The worker processes are this test binary itself, re-invoked to run only
//! [`worker_process`] with [`WORKER_URL`] set; they report on stdout, one line per event:
//! `nt-worker: READY`, `… START <id>`, `… HANDLED <id>`, `… DRAINED`.

mod fixture;

use std::collections::BTreeSet;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use fixture::{Fixture, Running};
use nats_topology::model::{QueueDecl, Storage};
use nats_topology::{HandlerError, Runtime, Topology};
use nats_topology_testkit::NatsCluster;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::mpsc;

/// Set in a worker process: the server to work on.
const WORKER_URL: &str = "NATS_TOPOLOGY_TEST_WORKER_URL";

/// Starts each report line (the test harness prints on the same stream, sometimes on the same
/// line: `test worker_process ... nt-worker: READY`).
const MARK: &str = "nt-worker: ";

/// How a worker reports what its handler does.
type Report = Arc<dyn Fn(&str, u64) + Send + Sync>;

/// The topology every worker runs: a slow handler (300 ms per job) at concurrency 4, on a
/// consumer whose 2 s ack_wait makes the server redeliver a dead worker's messages quickly.
fn worker_topology(report: Report) -> Topology {
    let stream = fixture::stream("FAILOVER", &["failover.>"]);
    let consumer = fixture::queue(
        "tests::failover_worker",
        &stream,
        "failover.jobs",
        QueueDecl::new("workers").ack_wait(Duration::from_secs(2)),
    )
    .concurrency(4);
    Topology::new()
        .stream(stream)
        .consumer(consumer, move |incoming| {
            let report = report.clone();
            Box::pin(async move {
                let id = fixture::job_id(&incoming)?;
                report("START", id);
                // Simulated work, so that a kill finds messages in flight.
                tokio::time::sleep(Duration::from_millis(300)).await;
                report("HANDLED", id);
                Ok::<(), HandlerError>(())
            })
        })
}

/// The worker process's entry point. With [`WORKER_URL`] set, it runs [`worker_topology`] on
/// that server, reporting on stdout, until its stdin closes, then drains. Without it, it runs
/// the same worker in-process against its own server and checks that every job is handled once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_process() {
    fixture::trace();
    match std::env::var(WORKER_URL) {
        Ok(url) => run_worker(&url).await,
        Err(_) => worker_self_test().await,
    }
}

async fn run_worker(url: &str) {
    let client = async_nats::connect(url).await.expect("the worker connects");
    let report: Report = Arc::new(|event, id| println!("{MARK}{event} {id}"));
    let runtime = fixture::fast(Runtime::builder(client))
        .topology(worker_topology(report))
        .build()
        .expect("valid topology");
    let running = Running::spawn(runtime);
    running.ready(Duration::from_secs(30)).await;
    println!("{MARK}READY");
    // Run until the parent closes stdin (read on a blocking thread: std's stdin blocks).
    tokio::task::spawn_blocking(|| {
        use std::io::BufRead;
        for _ in std::io::stdin().lock().lines().map_while(Result::ok) {}
    })
    .await
    .expect("the stdin reader does not panic");
    running.stop().await.expect("the worker drains cleanly");
    println!("{MARK}DRAINED");
}

async fn worker_self_test() {
    let fx = Fixture::start().await;
    let handled = &fx.ledger;
    let report: Report = Arc::new({
        let handled = handled.clone();
        move |event, id| {
            if event == "HANDLED" {
                handled.record(id);
            }
        }
    });
    let running = fx.run(worker_topology(report)).await;
    let js = fx.jetstream().await;
    fixture::publish_jobs(&js, "failover.jobs", 0..20).await;
    handled.wait_covers(0..20, Duration::from_secs(20)).await;
    fixture::settled(&js, "FAILOVER", "workers", Duration::from_secs(5)).await;
    running.stop().await.expect("clean drain");
    assert_eq!(handled.len(), 20, "each job handled once");
}

/// A worker process and the lines it reports.
struct Worker {
    child: tokio::process::Child,
    stdin: Option<tokio::process::ChildStdin>,
}

#[derive(Debug)]
enum Line {
    Ready,
    Start(u64),
    Handled(u64),
    Drained,
    /// Its stdout closed (it exited or was killed).
    Closed,
}

fn spawn_worker(index: usize, url: &str, lines: mpsc::UnboundedSender<(usize, Line)>) -> Worker {
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut child = tokio::process::Command::new(exe)
        .args([
            "--exact",
            "worker_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(WORKER_URL, url)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn a worker process");
    let stdout = child.stdout.take().unwrap();
    let stdin = child.stdin.take();
    tokio::spawn(async move {
        let mut stdout = BufReader::new(stdout).lines();
        while let Ok(Some(line)) = stdout.next_line().await {
            let Some(at) = line.find(MARK) else {
                continue; // the test harness's own output
            };
            let mut words = line[at + MARK.len()..].split_whitespace();
            let parsed = match (words.next(), words.next().and_then(|w| w.parse().ok())) {
                (Some("READY"), None) => Line::Ready,
                (Some("START"), Some(id)) => Line::Start(id),
                (Some("HANDLED"), Some(id)) => Line::Handled(id),
                (Some("DRAINED"), None) => Line::Drained,
                _ => panic!("an unexpected report from worker {index}: {line}"),
            };
            let _ = lines.send((index, parsed));
        }
        let _ = lines.send((index, Line::Closed));
    });
    Worker { child, stdin }
}

/// What the workers reported so far.
#[derive(Default)]
struct Reports {
    ready: [bool; 2],
    started: [Vec<u64>; 2],
    handled: [Vec<u64>; 2],
    drained: [bool; 2],
    closed: [bool; 2],
}

impl Reports {
    fn apply(&mut self, (worker, line): (usize, Line)) {
        match line {
            Line::Ready => self.ready[worker] = true,
            Line::Start(id) => self.started[worker].push(id),
            Line::Handled(id) => self.handled[worker].push(id),
            Line::Drained => self.drained[worker] = true,
            Line::Closed => self.closed[worker] = true,
        }
    }

    /// Ids a worker started and has not reported handled.
    fn in_flight(&self, worker: usize) -> BTreeSet<u64> {
        let mut open: BTreeSet<u64> = self.started[worker].iter().copied().collect();
        for id in &self.handled[worker] {
            open.remove(id);
        }
        open
    }

    fn union(&self) -> BTreeSet<u64> {
        self.handled.iter().flatten().copied().collect()
    }
}

/// Reads reports until `done` holds, for at most `timeout`.
async fn until(
    lines: &mut mpsc::UnboundedReceiver<(usize, Line)>,
    reports: &mut Reports,
    timeout: Duration,
    what: &str,
    done: impl Fn(&Reports) -> bool,
) {
    let deadline = tokio::time::Instant::now() + timeout;
    while !done(reports) {
        match tokio::time::timeout_at(deadline, lines.recv()).await {
            Ok(Some(line)) => reports.apply(line),
            Ok(None) => panic!("the worker readers stopped while waiting for {what}"),
            Err(_) => panic!(
                "timed out after {timeout:?} waiting for {what}; handled {:?} / {:?}, closed {:?}",
                reports.handled[0].len(),
                reports.handled[1].len(),
                reports.closed
            ),
        }
    }
}

/// Two worker processes share a queue consumer; one is killed with SIGKILL while it holds
/// messages in flight. The survivor handles everything the dead one did not finish: every job
/// is handled at least once, and the server ends with nothing pending or unacknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_of_a_worker_loses_nothing() {
    const JOBS: u64 = 60;
    let fx = Fixture::start().await;
    let (tx, mut lines) = mpsc::unbounded_channel();
    let mut workers: Vec<Worker> = (0..2)
        .map(|i| spawn_worker(i, &fx.server.url(), tx.clone()))
        .collect();
    drop(tx);
    let mut reports = Reports::default();
    until(
        &mut lines,
        &mut reports,
        Duration::from_secs(60),
        "both workers ready",
        |r| r.ready.iter().all(|ready| *ready),
    )
    .await;

    let js = fx.jetstream().await;
    fixture::publish_jobs(&js, "failover.jobs", 0..JOBS).await;
    until(
        &mut lines,
        &mut reports,
        Duration::from_secs(30),
        "worker 0 busy",
        |r| r.handled[0].len() >= 4 && !r.in_flight(0).is_empty(),
    )
    .await;
    let pid = workers[0].child.id().expect("worker 0 runs");
    workers[0].child.kill().await.expect("SIGKILL worker 0");
    // What worker 0 held when it died: reports it wrote before the kill may still be in the
    // pipe, so read until its stdout closes.
    until(
        &mut lines,
        &mut reports,
        Duration::from_secs(10),
        "worker 0's last reports",
        |r| r.closed[0],
    )
    .await;
    let held = reports.in_flight(0);
    assert!(
        !held.is_empty(),
        "worker 0 (pid {pid}) was killed with messages in flight"
    );

    until(
        &mut lines,
        &mut reports,
        Duration::from_secs(60),
        "every job handled",
        |r| r.union().len() as u64 == JOBS,
    )
    .await;
    assert_eq!(reports.union(), (0..JOBS).collect(), "no job lost");
    let survivor: BTreeSet<u64> = reports.handled[1].iter().copied().collect();
    assert!(
        held.is_subset(&survivor),
        "the survivor handled what the dead worker held: {held:?}"
    );
    let info = fixture::settled(&js, "FAILOVER", "workers", Duration::from_secs(10)).await;
    assert!(
        info.delivered.consumer_sequence > info.delivered.stream_sequence,
        "the dead worker's messages were delivered again: {info:?}"
    );

    // The survivor drains cleanly when told to stop.
    drop(workers[1].stdin.take());
    until(
        &mut lines,
        &mut reports,
        Duration::from_secs(30),
        "the survivor drained",
        |r| r.drained[1] && r.closed[1],
    )
    .await;
    let status = workers[1].child.wait().await.expect("the survivor exits");
    assert!(status.success(), "the survivor's own test passed: {status}");
    let handled = reports.handled[0].len() + reports.handled[1].len();
    eprintln!(
        "{JOBS} jobs: worker 0 handled {} before SIGKILL (holding {held:?}), worker 1 handled {}; {} handled twice",
        reports.handled[0].len(),
        reports.handled[1].len(),
        handled as u64 - JOBS
    );
}

/// A 3-node cluster with an R3 file stream: the consumer's leader node is killed while jobs
/// are handled and more are published. The runtime resumes on the surviving nodes; no job is
/// lost, and the server ends with nothing pending or unacknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_node_killed_during_consumption_loses_nothing() {
    let mut fx = Fixture::cluster().await;
    let stream = fixture::stream("REPLICATED", &["replicated.>"])
        .replicas(3)
        .storage(Storage::File);
    let consumer = fixture::queue(
        "tests::replicated",
        &stream,
        "replicated.jobs",
        QueueDecl::new("workers").ack_wait(Duration::from_secs(2)),
    )
    .concurrency(4);
    let ledger = &fx.ledger;
    let runtime = fixture::fast(fx.builder().await)
        .topology(fixture::job_topology(
            stream,
            consumer,
            ledger.clone(),
            Duration::from_millis(10),
        ))
        .build()
        .expect("valid topology");
    let running = Running::spawn(runtime);
    running.ready(Duration::from_secs(60)).await;

    let publisher = fx.connect().await;
    let js = async_nats::jetstream::ContextBuilder::new()
        .timeout(Duration::from_secs(2))
        .build(publisher);
    for id in 0..200 {
        fixture::publish_job_until_acked(&js, "replicated.jobs", id).await;
    }
    ledger
        .wait_len(50, Duration::from_secs(30), "some jobs handled")
        .await;
    let leader = fixture::consumer_info(&js, "REPLICATED", "workers")
        .await
        .and_then(|info| info.cluster)
        .and_then(|cluster| cluster.leader)
        .expect("the consumer has a leader");
    let node = NatsCluster::node_index(&leader).expect("nodes are named node<i>");
    fx.server.kill(node);

    for id in 200..300 {
        fixture::publish_job_until_acked(&js, "replicated.jobs", id).await;
    }
    ledger.wait_covers(0..300, Duration::from_secs(60)).await;
    let info = fixture::settled(&js, "REPLICATED", "workers", Duration::from_secs(30)).await;
    running.ready(Duration::from_secs(10)).await;
    running.stop().await.expect("clean drain");
    assert_eq!(ledger.unique(), (0..300).collect(), "no job lost");
    eprintln!(
        "killed {leader}; new consumer leader {:?}; handled twice: {:?}",
        info.cluster.and_then(|c| c.leader),
        ledger.duplicates()
    );
}
