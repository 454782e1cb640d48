//! Priority groups on real servers (nats-server 2.11 or newer).
//!
//! Pinned client: three worker processes share a queue consumer; one consumes, the others
//! stand by (ready). The pinned one SIGKILLed: another takes over within `pinned_ttl` + 1 s;
//! that one drained: the third takes over at once (the drain unpins). Every job is handled,
//! and only the killed worker's in-flight job may be handled twice. Overflow, edits and
//! refusals: `tests/priority_overflow.rs`.
//!
//! The worker processes are this test binary itself, re-invoked to run only
//! [`worker_process`] with [`WORKER_URL`] set; they report on stdout, one line per event:
//! `nt-worker: READY`, `… STATE <state>`, `… START <id>`, `… HANDLED <id>`, `… DRAINED`.

mod fixture;

use std::collections::BTreeSet;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use fixture::{Fixture, Running};
use nats_topology::model::QueueDecl;
use nats_topology::{HandlerError, Runtime, Topology};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// Set in a worker process: the server to work on.
const WORKER_URL: &str = "NATS_TOPOLOGY_TEST_PRIORITY_WORKER_URL";

/// Starts each report line.
const MARK: &str = "nt-worker: ";

/// How long the pinned worker may go without pulling before another is pinned.
const PINNED_TTL: Duration = Duration::from_secs(3);

/// Simulated work per job: a kill finds one in flight.
const WORK: Duration = Duration::from_millis(100);

const WORKERS: usize = 3;

/// How a worker reports what its handler does.
type Report = Arc<dyn Fn(&str, u64) + Send + Sync>;

/// The topology every worker runs: a pinned-client queue consumer, one job at a time.
fn worker_topology(report: Report) -> Topology {
    let stream = fixture::stream("PINNED", &["pinned.>"]);
    let consumer = fixture::queue(
        "tests::pinned_worker",
        &stream,
        "pinned.jobs",
        QueueDecl::new("active")
            .pinned_client(PINNED_TTL)
            .ack_wait(Duration::from_secs(4)),
    );
    Topology::new()
        .stream(stream)
        .consumer(consumer, move |incoming| {
            let report = report.clone();
            Box::pin(async move {
                let id = fixture::job_id(&incoming)?;
                report("START", id);
                tokio::time::sleep(WORK).await;
                report("HANDLED", id);
                Ok::<(), HandlerError>(())
            })
        })
}

/// The worker process's entry point. With [`WORKER_URL`] set, it runs [`worker_topology`]
/// on that server, reporting on stdout (its consumer's state at every change), until its
/// stdin closes, then drains. Without it, it checks in-process that a lone worker is pinned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_process() {
    fixture::trace();
    match std::env::var(WORKER_URL) {
        Ok(url) => run_worker(&url).await,
        Err(_) => lone_worker_is_pinned().await,
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
    let health = running.health.clone();
    tokio::spawn(async move {
        let mut last = String::new();
        loop {
            let changed = health.changed();
            let state = health.consumers()[0].state.to_string();
            if state != last {
                println!("{MARK}STATE {state}");
                last = state;
            }
            changed.await;
        }
    });
    running.ready(Duration::from_secs(30)).await;
    println!("{MARK}READY");
    tokio::task::spawn_blocking(|| {
        use std::io::BufRead;
        for _ in std::io::stdin().lock().lines().map_while(Result::ok) {}
    })
    .await
    .expect("the stdin reader does not panic");
    running.stop().await.expect("the worker drains cleanly");
    println!("{MARK}DRAINED");
}

/// One worker alone: ready while standing by, then pinned (running) by its first message.
async fn lone_worker_is_pinned() {
    let fx = Fixture::start().await;
    let ledger = fx.ledger.clone();
    let report: Report = Arc::new(move |event, id| {
        if event == "HANDLED" {
            ledger.record(id);
        }
    });
    let running = fx.run(worker_topology(report)).await;
    assert_eq!(
        running.health.consumers()[0].state.to_string(),
        "standby",
        "ready, and not pinned before a message"
    );
    let js = fx.jetstream().await;
    fixture::publish_jobs(&js, "pinned.jobs", 0..5).await;
    fx.ledger.wait_covers(0..5, Duration::from_secs(20)).await;
    assert_eq!(running.health.consumers()[0].state.to_string(), "running");
    fx.drain_and_settle(running, &js, ("PINNED", "active"), 5)
        .await;
}

struct Worker {
    child: tokio::process::Child,
    stdin: Option<tokio::process::ChildStdin>,
}

#[derive(Debug)]
enum Line {
    Ready,
    State(String),
    Start(u64),
    Handled(u64),
    Drained,
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
            let report = &line[at + MARK.len()..];
            let mut words = report.split_whitespace();
            let event = words.next();
            let id = words.next().and_then(|w| w.parse().ok());
            let parsed = match (event, id) {
                (Some("READY"), None) => Line::Ready,
                (Some("STATE"), _) => Line::State(report["STATE ".len()..].to_owned()),
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

/// What the workers reported so far, and when each first started a job after `mark`.
#[derive(Default)]
struct Reports {
    ready: [bool; WORKERS],
    state: [String; WORKERS],
    started: [Vec<u64>; WORKERS],
    handled: [Vec<u64>; WORKERS],
    drained: [bool; WORKERS],
    closed: [bool; WORKERS],
    /// When each worker started a job, the last time.
    last_start: [Option<Instant>; WORKERS],
}

impl Reports {
    fn apply(&mut self, (worker, line): (usize, Line)) {
        match line {
            Line::Ready => self.ready[worker] = true,
            Line::State(state) => self.state[worker] = state,
            Line::Start(id) => {
                self.started[worker].push(id);
                self.last_start[worker] = Some(Instant::now());
            }
            Line::Handled(id) => self.handled[worker].push(id),
            Line::Drained => self.drained[worker] = true,
            Line::Closed => self.closed[worker] = true,
        }
    }

    fn union(&self) -> BTreeSet<u64> {
        self.handled.iter().flatten().copied().collect()
    }

    /// The workers that handled at least one job.
    fn busy(&self) -> Vec<usize> {
        (0..WORKERS)
            .filter(|w| !self.handled[*w].is_empty())
            .collect()
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
    let deadline = Instant::now() + timeout;
    while !done(reports) {
        match tokio::time::timeout_at(deadline, lines.recv()).await {
            Ok(Some(line)) => reports.apply(line),
            Ok(None) => panic!("the worker readers stopped while waiting for {what}"),
            Err(_) => panic!(
                "timed out after {timeout:?} waiting for {what}; handled {:?}, states {:?}",
                reports.handled.iter().map(Vec::len).collect::<Vec<_>>(),
                reports.state
            ),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pinned_client_one_consumes_a_kill_moves_the_pin_within_its_ttl_a_drain_at_once() {
    const FIRST: u64 = 10;
    const JOBS: u64 = 80;
    let fx = Fixture::start().await;
    let (tx, mut lines) = mpsc::unbounded_channel();
    let mut workers: Vec<Worker> = (0..WORKERS)
        .map(|i| spawn_worker(i, &fx.server.url(), tx.clone()))
        .collect();
    drop(tx);
    let mut reports = Reports::default();
    until(
        &mut lines,
        &mut reports,
        Duration::from_secs(60),
        "every worker ready (standing by)",
        |r| r.ready.iter().all(|ready| *ready),
    )
    .await;

    // One consumes; the others stand by.
    let js = fx.jetstream().await;
    fixture::publish_jobs(&js, "pinned.jobs", 0..FIRST).await;
    until(
        &mut lines,
        &mut reports,
        Duration::from_secs(30),
        "the first jobs handled",
        |r| r.union().len() as u64 == FIRST,
    )
    .await;
    let busy = reports.busy();
    assert_eq!(busy.len(), 1, "one worker consumes: {:?}", reports.handled);
    let pinned = busy[0];
    until(
        &mut lines,
        &mut reports,
        Duration::from_secs(10),
        "the pinned worker running, the others standing by",
        |r| (0..WORKERS).all(|w| r.state[w] == if w == pinned { "running" } else { "standby" }),
    )
    .await;

    // The pinned one SIGKILLed mid-job: another takes over within pinned_ttl + 1 s.
    fixture::publish_jobs(&js, "pinned.jobs", FIRST..JOBS).await;
    until(
        &mut lines,
        &mut reports,
        Duration::from_secs(30),
        "the pinned worker busy",
        |r| {
            r.handled[pinned].len() as u64 >= FIRST + 3
                && r.started[pinned].len() > r.handled[pinned].len()
        },
    )
    .await;
    workers[pinned]
        .child
        .kill()
        .await
        .expect("SIGKILL the pinned worker");
    let killed_at = Instant::now();
    until(
        &mut lines,
        &mut reports,
        Duration::from_secs(10),
        "the killed worker's last reports",
        |r| r.closed[pinned],
    )
    .await;
    let killed_started: BTreeSet<u64> = reports.started[pinned].iter().copied().collect();
    let killed_handled: BTreeSet<u64> = reports.handled[pinned].iter().copied().collect();
    let in_flight: BTreeSet<u64> = killed_started
        .difference(&killed_handled)
        .copied()
        .collect();
    until(
        &mut lines,
        &mut reports,
        PINNED_TTL + Duration::from_secs(5),
        "another worker taking over",
        |r| (0..WORKERS).any(|w| w != pinned && !r.started[w].is_empty()),
    )
    .await;
    let next = (0..WORKERS)
        .find(|w| *w != pinned && !reports.started[*w].is_empty())
        .unwrap();
    let took_over = reports.last_start[next].unwrap() - killed_at;
    assert!(
        took_over <= PINNED_TTL + Duration::from_secs(1),
        "worker {next} took over {took_over:?} after the kill (pinned_ttl {PINNED_TTL:?})"
    );
    let third = (0..WORKERS).find(|w| *w != pinned && *w != next).unwrap();
    until(
        &mut lines,
        &mut reports,
        Duration::from_secs(10),
        "the new pinned worker running, the third standing by",
        |r| {
            r.state[next] == "running" && r.state[third] == "standby" && r.started[third].is_empty()
        },
    )
    .await;

    // The new pinned one drained: the third takes over at once (unpinned), not after the ttl.
    until(
        &mut lines,
        &mut reports,
        Duration::from_secs(30),
        "the new pinned worker busy",
        |r| r.handled[next].len() >= 3,
    )
    .await;
    drop(workers[next].stdin.take());
    let drained_at = Instant::now();
    until(
        &mut lines,
        &mut reports,
        PINNED_TTL + Duration::from_secs(5),
        "the third worker taking over",
        |r| !r.started[third].is_empty(),
    )
    .await;
    let handed_over = reports.last_start[third].unwrap() - drained_at;
    assert!(
        handed_over < PINNED_TTL / 2,
        "the drained worker unpinned: the third took over {handed_over:?} after the drain began (pinned_ttl {PINNED_TTL:?})"
    );
    until(
        &mut lines,
        &mut reports,
        Duration::from_secs(30),
        "the drained worker gone",
        |r| r.drained[next] && r.closed[next],
    )
    .await;

    until(
        &mut lines,
        &mut reports,
        Duration::from_secs(60),
        "every job handled",
        |r| r.union().len() as u64 == JOBS,
    )
    .await;
    assert_eq!(reports.union(), (0..JOBS).collect(), "no job lost");
    // Handled more than once: only what the killed worker held (its job in flight, or one
    // it finished without its ack reaching the server).
    let mut seen = BTreeSet::new();
    let twice: BTreeSet<u64> = reports
        .handled
        .iter()
        .flatten()
        .filter(|id| !seen.insert(**id))
        .copied()
        .collect();
    let last_of_killed = reports.handled[pinned].last().copied();
    assert!(
        twice
            .iter()
            .all(|id| in_flight.contains(id) || Some(*id) == last_of_killed),
        "handled twice: {twice:?}; the killed worker held {in_flight:?}"
    );
    fixture::settled(&js, "PINNED", "active", Duration::from_secs(10)).await;

    drop(workers[third].stdin.take());
    until(
        &mut lines,
        &mut reports,
        Duration::from_secs(30),
        "the last worker drained",
        |r| r.drained[third] && r.closed[third],
    )
    .await;
    for w in [next, third] {
        let status = workers[w].child.wait().await.expect("the worker exits");
        assert!(status.success(), "worker {w}'s own test passed: {status}");
    }
    eprintln!(
        "pinned {pinned} killed (in flight {in_flight:?}); {next} took over after {took_over:?}; drained, {third} took over after {handed_over:?}"
    );
}
