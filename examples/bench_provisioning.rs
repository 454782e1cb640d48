//! Cold-start provisioning benchmark: N separate processes provision one replicated (R3)
//! stream and two queue consumers at the same instant, against one 3-node cluster.
//!
//! ```text
//! cargo run --release --example bench_provisioning -- \
//!     [--n 1,2,8,16,32] [--reps 3] [--modes cold,warm] \
//!     [--variants create-first,update-first] [--retry on,off | --no-retry] \
//!     [--storage file|memory] [--settle-ms 500] [--restart-after-ms 5000] \
//!     [--restart-after-election-ms MS] [--trace DIR]
//! ```
//!
//! The leader-kill run recorded in docs/PERFORMANCE.md:
//!
//! ```text
//! cargo run --release --example bench_provisioning -- \
//!     --n 8 --reps 3 --modes leader-kill --variants create-first --retry on
//! ```
//!
//! The default run measures every combination of N in {1, 2, 8, 16, 32}, mode, variant and
//! retry, three repetitions each, on one cluster started with the test kit.
//!
//! - **mode** `cold`: the stream does not exist when the processes start (every cell and
//!   repetition uses a stream name of its own, and deletes it afterwards). `warm`: the stream
//!   and both consumers were provisioned (once, by the parent) before the processes start: a
//!   scale-up or a rolling restart. `leader-kill`: as `cold`, and at the start instant the
//!   parent kills (SIGKILL) the node that is the JetStream meta leader, restarting it
//!   `--restart-after-ms` later. The parent finds the leader before the start and watches
//!   for the new one through the nodes' monitoring endpoints every 10 ms (the meta-leader
//!   advisory goes to the system account only, which the kit's servers do not give a
//!   user). The election's instant is when the new leader takes office: its `leader_since`
//!   in `/raftz` (nats-server 2.12 and later), the moment the server announces it and
//!   starts answering; `named_ms` in the JSON line is when it first reported itself leader
//!   (they differ when its first entry takes long to commit: see docs/PERFORMANCE.md).
//!   Before 2.12, both are when every running node's `/jsz` names a new leader. Per process
//!   it reports the time to ready after the election (`after_leader_ms`: median and max per
//!   run in the JSON line).
//!   `--restart-after-election-ms MS` restarts the killed node MS after the new leader is
//!   seen instead (the old leader coming back just after the election).
//!   `--trace DIR` writes, per leader-kill cell, what happened in time order: every change
//!   of each node's view (meta leader and the meta group's Raft state from `/jsz` and
//!   `/raftz`; the stream's and its consumers' leaders, every 10 ms), the kill, restart and
//!   election, and each process's debug log (its attempts, what woke them), all in ms after
//!   the start instant, in `DIR/cell<id>.timeline`; the processes' own logs in
//!   `DIR/cell<id>.child<i>.log` and the nodes' in `DIR/cell<id>.node<i>.log`.
//! - **variant** `create-first`: our runtime, `Runtime::provision` (STREAM.CREATE first, then
//!   both consumers concurrently). `update-first`: what async-nats `create_or_update_stream`
//!   does (STREAM.UPDATE, then STREAM.CREATE on 404), then both consumers with
//!   `create_consumer` (create-or-update), concurrently.
//! - **retry** `on`: full jitter, `RetryPolicy::default()` (base 250 ms, cap 5 s, deadline
//!   60 s per step); for `update-first` the same policy through the runtime's
//!   `RetryPolicy::run`, retrying only timeouts, no responders and 10008/10009/10005. `off`:
//!   one attempt.
//!   Every request is bounded by 5 s (`RetryPolicy::request_timeout`).
//!
//! Each process is this executable re-invoked with `--child`. It connects to all three
//! nodes, prints `ready`, waits for a start instant (ms since the epoch) on stdin, sleeps
//! until that instant, provisions, and prints one JSON line: `ok`, `ms` (time to ready from
//! the start instant), `attempts` (provisioning attempts; 3 = one per stream and consumer,
//! no retry; for a failed process, the attempts of the step that failed) and `error`. The
//! parent sends the start instant once every process is ready, so process start-up and
//! connection set-up are not measured.
//!
//! Before the first cell the parent creates and deletes one R3 stream, so that the fresh
//! cluster's first replicated create (which may time out, nats-facts §6.1) is not measured.
//! Cells run N by N; within an N, repetition by repetition, and within a repetition in the
//! order cold/warm × create-first/update-first × retry on/off. Between cells the parent
//! deletes the cell's stream, waits until the server says it is gone, then pauses
//! `--settle-ms`.
//!
//! Per N, a table shows per repetition: successes/N, median and max time to ready of the
//! successful processes, and the median attempts. The last line is one JSON object with a
//! `runs` array, one object per cell and repetition.

use std::collections::BTreeMap;
use std::error::Error as _;
use std::process::Stdio;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_nats::jetstream::{self, ErrorCode, consumer, context::CreateStreamErrorKind, stream};
use nats_topology::model::{ConsumerDecl, QueueDecl, Storage, StreamDecl, StreamRef};
use nats_topology::retry::Failed;
use nats_topology::{HandlerError, HandlerFuture, Incoming, RetryPolicy, Runtime, Topology};
use nats_topology_testkit::{ClusterMonitor, NatsCluster};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::time::Instant;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How long a child may take to connect and print `ready`.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// The delay between the last `ready` and the start instant (time to write every stdin).
const START_MARGIN: Duration = Duration::from_millis(150);
/// Provisioning attempts of a process that needed no retry: the stream and two consumers.
const MIN_ATTEMPTS: u32 = 3;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Cold,
    Warm,
    LeaderKill,
}

impl Mode {
    fn parse(s: &str) -> Mode {
        match s {
            "cold" => Mode::Cold,
            "warm" => Mode::Warm,
            "leader-kill" => Mode::LeaderKill,
            other => panic!("unknown mode {other:?}; expected cold, warm or leader-kill"),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Mode::Cold => "cold",
            Mode::Warm => "warm",
            Mode::LeaderKill => "leader-kill",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    CreateFirst,
    UpdateFirst,
}

impl Variant {
    fn parse(s: &str) -> Variant {
        match s {
            "create-first" => Variant::CreateFirst,
            "update-first" => Variant::UpdateFirst,
            other => panic!("unknown variant {other:?}; expected create-first or update-first"),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Variant::CreateFirst => "create-first",
            Variant::UpdateFirst => "update-first",
        }
    }
}

fn parse_storage(s: &str) -> Storage {
    match s {
        "file" => Storage::File,
        "memory" => Storage::Memory,
        other => panic!("unknown storage {other:?}; expected file or memory"),
    }
}

fn storage_name(storage: Storage) -> &'static str {
    match storage {
        Storage::File => "file",
        Storage::Memory => "memory",
    }
}

fn list<T>(value: &str, parse: impl Fn(&str) -> T) -> Vec<T> {
    value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(parse)
        .collect()
}

const USAGE: &str = "usage: bench_provisioning [--n 1,2,8,16,32] [--reps 3] [--modes cold,warm] \
     [--variants create-first,update-first] [--retry on,off | --no-retry] [--storage file|memory] \
     [--settle-ms 500] [--restart-after-ms 5000] [--restart-after-election-ms MS] [--trace DIR]";

struct Args {
    ns: Vec<usize>,
    reps: usize,
    modes: Vec<Mode>,
    variants: Vec<Variant>,
    retry: Vec<bool>,
    storage: Storage,
    settle: Duration,
    restart_after: Duration,
    /// Restart the killed node this long after the new leader is seen (instead of
    /// `restart_after` after the start).
    restart_after_election: Option<Duration>,
    /// Where leader-kill cells write their timelines and the processes' logs.
    trace: Option<std::path::PathBuf>,
}

fn parent_args(mut it: impl Iterator<Item = String>) -> Args {
    let mut args = Args {
        ns: vec![1, 2, 8, 16, 32],
        reps: 3,
        modes: vec![Mode::Cold, Mode::Warm],
        variants: vec![Variant::CreateFirst, Variant::UpdateFirst],
        retry: vec![true, false],
        storage: Storage::File,
        settle: Duration::from_millis(500),
        restart_after: Duration::from_secs(5),
        restart_after_election: None,
        trace: None,
    };
    while let Some(flag) = it.next() {
        if flag == "--help" || flag == "-h" {
            println!("{USAGE}");
            std::process::exit(0);
        }
        if flag == "--no-retry" {
            args.retry = vec![false];
            continue;
        }
        let value = it.next().unwrap_or_default();
        match flag.as_str() {
            "--n" => args.ns = list(&value, |s| s.parse().expect("--n 1,2,8")),
            "--reps" => args.reps = value.parse().expect("--reps N"),
            "--modes" => args.modes = list(&value, Mode::parse),
            "--variants" => args.variants = list(&value, Variant::parse),
            "--retry" => {
                args.retry = list(&value, |s| match s {
                    "on" => true,
                    "off" => false,
                    other => panic!("unknown --retry {other:?}; expected on, off or on,off"),
                })
            }
            "--storage" => args.storage = parse_storage(&value),
            "--restart-after-ms" => {
                args.restart_after =
                    Duration::from_millis(value.parse().expect("--restart-after-ms N"))
            }
            "--restart-after-election-ms" => {
                args.restart_after_election = Some(Duration::from_millis(
                    value.parse().expect("--restart-after-election-ms N"),
                ))
            }
            "--trace" => args.trace = Some(value.into()),
            "--settle-ms" => {
                args.settle = Duration::from_millis(value.parse().expect("--settle-ms N"))
            }
            other => {
                eprintln!("unknown flag {other}\n{USAGE}");
                std::process::exit(2);
            }
        }
    }
    args
}

fn main() -> Result<(), BoxError> {
    let mut argv = std::env::args().skip(1).peekable();
    if argv.peek().map(String::as_str) == Some("--child") {
        argv.next();
        let child = child_args(argv);
        // One thread per process: N processes share two cores; the server does the work.
        return tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(child_main(child));
    }
    let args = parent_args(argv);
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(parent_main(args))
}

// ---------------------------------------------------------------------------------------------
// The topology every process provisions
// ---------------------------------------------------------------------------------------------

/// One R3 stream `name` on `prefix.>` and two queue consumers on `prefix.a` / `prefix.b`.
struct Shape {
    stream: &'static StreamDecl,
    subject_a: &'static str,
    subject_b: &'static str,
}

const GROUP_A: &str = "group_a";

fn noop(_: Incoming) -> HandlerFuture {
    Box::pin(async { Ok::<(), HandlerError>(()) })
}
const GROUP_B: &str = "group_b";

impl Shape {
    fn new(name: &str, prefix: &str, storage: Storage) -> Shape {
        let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
        let subjects: &'static [&'static str] = Box::leak(vec![leak(format!("{prefix}.>"))].into());
        let stream = Box::leak(Box::new(
            StreamDecl::new(leak(name.to_owned()), subjects)
                .replicas(3)
                .storage(storage),
        ));
        Shape {
            stream,
            subject_a: leak(format!("{prefix}.a")),
            subject_b: leak(format!("{prefix}.b")),
        }
    }

    fn topology(&self) -> Topology {
        let a: &'static [&'static str] = Box::leak(vec![self.subject_a].into());
        let b: &'static [&'static str] = Box::leak(vec![self.subject_b].into());
        Topology::new()
            .stream(*self.stream)
            .consumer(
                ConsumerDecl::queue(
                    "bench::a",
                    StreamRef::Declared(self.stream),
                    QueueDecl::new(GROUP_A),
                )
                .subjects(a),
                noop,
            )
            .consumer(
                ConsumerDecl::queue(
                    "bench::b",
                    StreamRef::Declared(self.stream),
                    QueueDecl::new(GROUP_B),
                )
                .subjects(b),
                noop,
            )
    }

    /// The stream configuration our runtime sends, for the UPDATE-first sequence.
    fn stream_config(&self) -> stream::Config {
        stream::Config {
            name: self.stream.name.to_owned(),
            subjects: self
                .stream
                .subjects
                .iter()
                .map(|s| (*s).to_owned())
                .collect(),
            num_replicas: 3,
            storage: match self.stream.storage {
                Some(Storage::Memory) => stream::StorageType::Memory,
                _ => stream::StorageType::File,
            },
            ..Default::default()
        }
    }

    /// The consumer configuration our runtime sends for a pull queue consumer.
    fn consumer_config(group: &str, subject: &str) -> consumer::pull::Config {
        consumer::pull::Config {
            durable_name: Some(group.to_owned()),
            name: Some(group.to_owned()),
            deliver_policy: consumer::DeliverPolicy::All,
            ack_policy: consumer::AckPolicy::Explicit,
            filter_subject: subject.to_owned(),
            ..Default::default()
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Child: one process provisioning once
// ---------------------------------------------------------------------------------------------

struct ChildArgs {
    urls: Vec<String>,
    stream: String,
    prefix: String,
    variant: Variant,
    retry: bool,
    storage: Storage,
    /// Where to write this process's debug log (leader-kill with `--trace`).
    trace: Option<std::path::PathBuf>,
}

fn child_args(mut it: impl Iterator<Item = String>) -> ChildArgs {
    let mut args = ChildArgs {
        urls: Vec::new(),
        stream: String::new(),
        prefix: String::new(),
        variant: Variant::CreateFirst,
        retry: true,
        storage: Storage::File,
        trace: None,
    };
    while let Some(flag) = it.next() {
        let value = it.next().unwrap_or_default();
        match flag.as_str() {
            "--trace" => args.trace = Some(value.into()),
            "--urls" => args.urls = list(&value, str::to_owned),
            "--stream" => args.stream = value,
            "--prefix" => args.prefix = value,
            "--variant" => args.variant = Variant::parse(&value),
            "--retry" => args.retry = value == "on",
            "--storage" => args.storage = parse_storage(&value),
            other => panic!("unknown child flag {other}"),
        }
    }
    args
}

fn policy(retry: bool) -> RetryPolicy {
    if retry {
        RetryPolicy::default()
    } else {
        RetryPolicy::no_retry()
    }
}

fn epoch_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("the clock is after 1970")
        .as_secs_f64()
        * 1000.0
}

/// Timestamps of a process's trace: ms since the epoch (the parent subtracts the start).
struct EpochMs;

impl tracing_subscriber::fmt::time::FormatTime for EpochMs {
    fn format_time(&self, w: &mut tracing_subscriber::fmt::format::Writer<'_>) -> std::fmt::Result {
        write!(w, "{:.1}", epoch_ms())
    }
}

async fn child_main(args: ChildArgs) -> Result<(), BoxError> {
    if let Some(path) = &args.trace {
        let file = std::fs::File::create(path)?;
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(
                "topology_runtime=debug,nats_topology=debug,bench_provisioning=debug",
            ))
            .with_timer(EpochMs)
            .with_ansi(false)
            .with_writer(std::sync::Mutex::new(file))
            .init();
    }
    let addrs = args
        .urls
        .iter()
        .map(|u| u.parse::<async_nats::ServerAddr>())
        .collect::<Result<Vec<_>, _>>()?;
    let client = match async_nats::connect(addrs).await {
        Ok(client) => client,
        Err(e) => {
            let line =
                json!({"ok": false, "ms": 0.0, "attempts": 0, "error": format!("connect: {e}")});
            println!("{line}");
            return Ok(());
        }
    };
    let shape = Shape::new(&args.stream, &args.prefix, args.storage);
    let policy = policy(args.retry);
    // Everything that does not talk to the server is done before the start instant.
    let runtime = match args.variant {
        Variant::CreateFirst => Some(
            Runtime::builder(client.clone())
                .topology(shape.topology())
                .retry(policy)
                .build()?,
        ),
        Variant::UpdateFirst => None,
    };
    let js = jetstream::ContextBuilder::new()
        .timeout(policy.request_timeout)
        .build(client.clone());

    println!("ready");
    // Tokio's stdin needs a feature this workspace does not enable: read on a blocking thread.
    let line = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).map(|_| line)
    })
    .await??;
    let start_ms: f64 = line.trim().parse()?;
    let wait = start_ms - epoch_ms();
    if wait > 0.0 {
        tokio::time::sleep(Duration::from_secs_f64(wait / 1000.0)).await;
    }

    let (ok, attempts, error) = match &runtime {
        Some(runtime) => match runtime.provision().await {
            Ok(report) => (true, report.attempts, None),
            Err(e) => (
                false,
                e.attempts(),
                Some(format!("{:?}: {e}{}", e.kind(), causes(&e))),
            ),
        },
        None => match update_first(&js, &shape, &policy).await {
            Ok(attempts) => (true, attempts, None),
            Err((attempts, e)) => (false, attempts, Some(e)),
        },
    };
    let ms = epoch_ms() - start_ms;
    tracing::debug!(ok, attempts, ?error, "provisioning done");
    println!(
        "{}",
        json!({"ok": ok, "ms": ms, "attempts": attempts, "error": error})
    );
    Ok(())
}

/// The chain of sources of an error, `": a: b"`.
fn causes(e: &dyn std::error::Error) -> String {
    let mut out = String::new();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(&format!(" <- {s}"));
        source = s.source();
    }
    out
}

/// Which request of `create_or_update_stream` failed: in async-nats 0.51 a timeout or server
/// error of the UPDATE is returned as is, while an error of the CREATE sent after the
/// UPDATE's 404 is wrapped (`with_source`), so it has a source.
fn stream_error(e: &jetstream::context::CreateStreamError) -> String {
    let request = if e.source().is_some() {
        "CREATE (after UPDATE answered 404)"
    } else {
        "UPDATE"
    };
    match e.kind() {
        CreateStreamErrorKind::TimedOut => format!("{request} timed out (no answer in 5 s)"),
        CreateStreamErrorKind::JetStream(_) => format!("{request}: {e}"),
        // Other kinds may carry a source from either request.
        _ => format!("{e}{}", causes(e)),
    }
}

/// The UPDATE-first sequence: `create_or_update_stream` (UPDATE, CREATE on 404), then both
/// consumers with `create_consumer` (create-or-update) concurrently, each step under the
/// same full-jitter retry as the runtime. Returns the attempts made, or those and the error.
async fn update_first(
    js: &jetstream::Context,
    shape: &Shape,
    policy: &RetryPolicy,
) -> Result<u32, (u32, String)> {
    let config = shape.stream_config();
    // The runtime's own retry primitive: giving up when the next sleep would pass the
    // deadline, so `RetryPolicy::no_retry()` makes one attempt.
    let stream_attempts = policy
        .run(
            || js.create_or_update_stream(config.clone()),
            stream_transient,
        )
        .await
        .map(|(_, n)| n)
        .map_err(|f| (f.attempts, format!("stream: {}", stream_error(&f.error))))?;
    let name = shape.stream.name;
    let a = Shape::consumer_config(GROUP_A, shape.subject_a);
    let b = Shape::consumer_config(GROUP_B, shape.subject_b);
    let (ra, rb) = tokio::join!(
        policy.run(
            || js.create_consumer_on_stream(a.clone(), name),
            consumer_transient
        ),
        policy.run(
            || js.create_consumer_on_stream(b.clone(), name),
            consumer_transient
        ),
    );
    let mut attempts = stream_attempts;
    let mut errors = Vec::new();
    for (group, result) in [(GROUP_A, ra), (GROUP_B, rb)] {
        match result {
            Ok((_, n)) => attempts += n,
            Err(Failed {
                error, attempts: n, ..
            }) => {
                attempts += n;
                errors.push(format!("consumer {group}: {error}{}", causes(&error)));
            }
        }
    }
    if errors.is_empty() {
        Ok(attempts)
    } else {
        Err((attempts, errors.join("; ")))
    }
}

/// 10008 (cluster not available), 10009 (not leader), 10005 (no peers).
fn transient_code(e: &jetstream::Error) -> bool {
    let code = e.error_code();
    code == ErrorCode::CLUSTER_NOT_AVAILABLE
        || code == ErrorCode::CLUSTER_NOT_LEADER
        || code == ErrorCode::CLUSTER_NO_PEERS
}

fn stream_transient(e: &jetstream::context::CreateStreamError) -> bool {
    match e.kind() {
        CreateStreamErrorKind::TimedOut | CreateStreamErrorKind::JetStreamUnavailable => true,
        CreateStreamErrorKind::JetStream(e) => transient_code(&e),
        _ => false,
    }
}

fn consumer_transient(e: &jetstream::stream::ConsumerError) -> bool {
    use jetstream::context::{RequestError, RequestErrorKind};
    use jetstream::stream::ConsumerErrorKind;
    match e.kind() {
        ConsumerErrorKind::TimedOut => true,
        ConsumerErrorKind::JetStream(e) => transient_code(&e),
        ConsumerErrorKind::Request => e
            .source()
            .and_then(|s| s.downcast_ref::<RequestError>())
            .is_some_and(|r| r.kind() == RequestErrorKind::NoResponders),
        _ => false,
    }
}

// ---------------------------------------------------------------------------------------------
// Parent: the cluster, the cells, the tables
// ---------------------------------------------------------------------------------------------

/// What one child reported.
#[derive(Debug, Clone)]
struct Outcome {
    ok: bool,
    ms: f64,
    attempts: u32,
    error: Option<String>,
}

impl Outcome {
    fn failed(error: String) -> Outcome {
        Outcome {
            ok: false,
            ms: f64::NAN,
            attempts: 0,
            error: Some(error),
        }
    }

    fn parse(line: &str) -> Outcome {
        match serde_json::from_str::<Value>(line) {
            Ok(v) => Outcome {
                ok: v["ok"].as_bool().unwrap_or(false),
                ms: v["ms"].as_f64().unwrap_or(f64::NAN),
                attempts: v["attempts"].as_u64().unwrap_or(0) as u32,
                error: v["error"].as_str().map(str::to_owned),
            },
            Err(_) => Outcome::failed(format!("unexpected output: {line}")),
        }
    }
}

/// One repetition of one cell.
struct Run {
    mode: Mode,
    variant: Variant,
    retry: bool,
    n: usize,
    rep: usize,
    outcomes: Vec<Outcome>,
    /// Leader-kill: the node killed and the new meta leader's election.
    killed: Option<usize>,
    election: Option<Election>,
}

impl Run {
    fn ok(&self) -> usize {
        self.outcomes.iter().filter(|o| o.ok).count()
    }

    fn ok_times(&self) -> Vec<f64> {
        self.outcomes
            .iter()
            .filter(|o| o.ok)
            .map(|o| o.ms)
            .collect()
    }

    fn median_ms(&self) -> Option<f64> {
        median(self.ok_times())
    }

    fn max_ms(&self) -> Option<f64> {
        self.ok_times().into_iter().reduce(f64::max)
    }

    fn attempts_median(&self) -> Option<f64> {
        median(
            self.outcomes
                .iter()
                .map(|o| f64::from(o.attempts))
                .collect(),
        )
    }

    /// Leader-kill: each successful process's time to ready after the new leader's election.
    fn after_leader(&self) -> Vec<f64> {
        match self.election {
            Some(election) => self.ok_times().iter().map(|ms| ms - election.at).collect(),
            None => Vec::new(),
        }
    }

    fn attempts_total(&self) -> u32 {
        self.outcomes.iter().map(|o| o.attempts).sum()
    }

    /// Processes that retried something (more than one attempt per stream and consumer).
    fn retried(&self) -> usize {
        self.outcomes
            .iter()
            .filter(|o| o.attempts > MIN_ATTEMPTS)
            .count()
    }

    /// Processes that took at least one request timeout to finish (or fail).
    fn slow(&self, timeout: Duration) -> usize {
        let limit = timeout.as_secs_f64() * 1000.0;
        self.outcomes.iter().filter(|o| o.ms >= limit).count()
    }

    fn errors(&self) -> BTreeMap<String, usize> {
        let mut errors = BTreeMap::new();
        for e in self.outcomes.iter().filter_map(|o| o.error.as_deref()) {
            *errors.entry(shorten(e)).or_default() += 1;
        }
        errors
    }

    fn json(&self, timeout: Duration) -> Value {
        let mut value = self.json_common(timeout);
        if self.mode == Mode::LeaderKill {
            let mut after = self.after_leader();
            after.sort_by(f64::total_cmp);
            value["killed_node"] = json!(self.killed);
            value["election_ms"] = json!(self.election.map(|e| round1(e.at)));
            value["named_ms"] = json!(self.election.map(|e| round1(e.named)));
            value["election_from"] = json!(self.election.map(|e| if e.since_leader_since {
                "leader_since"
            } else {
                "jsz"
            }));
            value["after_leader_ms"] = json!({
                "median": median(after.clone()).map(round1),
                "max": after.iter().copied().reduce(f64::max).map(round1),
                "each": after.iter().map(|v| round1(*v)).collect::<Vec<_>>(),
            });
        }
        value
    }

    fn json_common(&self, timeout: Duration) -> Value {
        json!({
            "mode": self.mode.name(),
            "variant": self.variant.name(),
            "retry": self.retry,
            "n": self.n,
            "ok": self.ok(),
            "median_ms": self.median_ms().map(round1),
            "max_ms": self.max_ms().map(round1),
            "attempts_median": self.attempts_median(),
            "attempts_total": self.attempts_total(),
            "retried": self.retried(),
            "over_timeout": self.slow(timeout),
            "rep": self.rep + 1,
            "errors": self.errors(),
        })
    }
}

/// Errors name the stream of the cell; group them across cells by removing it.
fn shorten(error: &str) -> String {
    let mut out = String::with_capacity(error.len());
    for (i, word) in error.split(' ').enumerate() {
        if i > 0 {
            out.push(' ');
        }
        if word.contains("BENCH_PROV_") {
            out.push_str("<stream>");
        } else {
            out.push_str(word);
        }
    }
    out
}

fn round1(v: f64) -> f64 {
    (v * 10.0).round() / 10.0
}

fn median(mut values: Vec<f64>) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    Some(if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    })
}

async fn parent_main(args: Args) -> Result<(), BoxError> {
    let started = Instant::now();
    let mut cluster = NatsCluster::start().await?;
    let urls = cluster.urls();
    let client = async_nats::connect(cluster.server_addrs()).await?;
    let server = client.server_info().version.clone();
    // The meta leader's `leader_since` in `/raftz`: nats-server 2.12 and later.
    let reports_leader_since = client.is_server_compatible(2, 12, 0);
    let timeout = RetryPolicy::default().request_timeout;
    let js = jetstream::ContextBuilder::new()
        .timeout(timeout)
        .build(client.clone());
    let cpu = cpu_model();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "nats-server {server}, 3-node loopback cluster; {cores} cores ({cpu}); {} storage, R3; \
         request timeout {timeout:?}; {} repetitions",
        storage_name(args.storage),
        args.reps
    );
    println!(
        "Per cell, one value per repetition. median/max: time to ready (ms from the common \
         start instant) of the successful processes. attempts: per process, 3 = one per stream \
         and consumer (no retry). ≥ 5s: processes that took at least one request timeout \
         (to succeed or to fail)."
    );
    // The first R3 create on a fresh cluster may time out (nats-facts §6.1): warm the meta
    // layer up once, so that the first measured cell does not pay for it.
    warm_up(&client, &js, args.storage).await?;

    let mut cell_id = 0u32;
    let mut runs: Vec<Run> = Vec::new();
    for &n in &args.ns {
        let mut runs_n = Vec::new();
        for rep in 0..args.reps {
            for &mode in &args.modes {
                for &variant in &args.variants {
                    for &retry in &args.retry {
                        let id = cell_id;
                        cell_id += 1;
                        let shape_name = format!("BENCH_PROV_{id}");
                        let prefix = format!("bench.prov.{id}");
                        let shape = Shape::new(&shape_name, &prefix, args.storage);
                        let trace = match (&args.trace, mode) {
                            (Some(dir), Mode::LeaderKill) => {
                                std::fs::create_dir_all(dir)?;
                                Some(dir.join(format!("cell{id}")))
                            }
                            _ => None,
                        };
                        let cell = Cell {
                            trace: trace.clone(),
                            urls: &urls,
                            shape: &shape,
                            prefix: &prefix,
                            variant,
                            retry,
                            storage: args.storage,
                            n,
                        };
                        if mode == Mode::Warm {
                            prepare_warm(&client, &shape).await?;
                        }
                        let (outcomes, killed, election) = if mode == Mode::LeaderKill {
                            let leader = wait_for_leader(&cluster).await?;
                            let (start_tx, start_rx) = tokio::sync::watch::channel(None);
                            let (done_tx, done_rx) = tokio::sync::watch::channel(false);
                            let monitor = cluster.monitor();
                            let restart = match args.restart_after_election {
                                Some(after) => Restart::AfterElection(after),
                                None => Restart::AfterStart(args.restart_after),
                            };
                            let (outcomes, killed, views) = tokio::join!(
                                async {
                                    let outcomes = cell.run(Some(start_tx)).await;
                                    let _ = done_tx.send(true);
                                    outcomes
                                },
                                kill_leader(
                                    &mut cluster,
                                    leader,
                                    start_rx.clone(),
                                    restart,
                                    reports_leader_since,
                                ),
                                async {
                                    match &trace {
                                        Some(_) => {
                                            watch_views(
                                                &monitor,
                                                shape.stream.name,
                                                start_rx.clone(),
                                                done_rx,
                                            )
                                            .await
                                        }
                                        None => Vec::new(),
                                    }
                                },
                            );
                            let (election, events) = killed?;
                            if let Some(base) = &trace {
                                let start = *start_rx.borrow();
                                if let Some(start) = start {
                                    write_timeline(base, start, &events, &views, n)?;
                                }
                                // The nodes' own logs (all cells so far), for what /jsz
                                // does not show.
                                for node in 0..cluster.len() {
                                    let log = cluster.store_dir(node).join("server.log");
                                    let _ = std::fs::copy(
                                        log,
                                        base.with_extension(format!("node{node}.log")),
                                    );
                                }
                            }
                            (outcomes?, Some(leader), election)
                        } else {
                            (cell.run(None).await?, None, None)
                        };
                        let run = Run {
                            mode,
                            variant,
                            retry,
                            n,
                            rep,
                            outcomes,
                            killed,
                            election,
                        };
                        eprintln!(
                            "[{:>5.0}s] n={n:<2} rep {} {:<4} {:<12} retry {:<3}: {}/{n} ok, median {} ms, max {} ms, attempts median {}",
                            started.elapsed().as_secs_f64(),
                            rep + 1,
                            mode.name(),
                            variant.name(),
                            if retry { "on" } else { "off" },
                            run.ok(),
                            fmt_ms(run.median_ms()),
                            fmt_ms(run.max_ms()),
                            fmt_num(run.attempts_median()),
                        );
                        for (error, count) in run.errors() {
                            eprintln!("        {count} x {error}");
                        }
                        if mode == Mode::LeaderKill {
                            let mut after = run.after_leader();
                            after.sort_by(f64::total_cmp);
                            eprintln!(
                                "        killed node{}, new meta leader named at {} ms, in office from {} ms; ready after it (ms): {:?}",
                                killed.unwrap_or(0),
                                fmt_ms(election.map(|e| e.named)),
                                fmt_ms(election.map(|e| e.at)),
                                after.iter().map(|v| v.round() as i64).collect::<Vec<_>>()
                            );
                        }
                        delete_stream(&js, shape.stream.name).await;
                        tokio::time::sleep(args.settle).await;
                        runs_n.push(run);
                    }
                }
            }
        }
        print_table(n, &args, &runs_n, timeout);
        runs.extend(runs_n);
    }

    let summary = json!({
        "runs": runs.iter().map(|r| r.json(timeout)).collect::<Vec<_>>(),
        "server": server,
        "cluster": "3 nodes, loopback",
        "storage": storage_name(args.storage),
        "replicas": 3,
        "request_timeout_ms": timeout.as_millis() as u64,
        "retry_policy": {
            "base_ms": RetryPolicy::default().base.as_millis() as u64,
            "cap_ms": RetryPolicy::default().cap.as_millis() as u64,
            "deadline_ms": RetryPolicy::default().deadline.as_millis() as u64,
        },
        "reps": args.reps,
        "cores": cores,
        "cpu": cpu,
        "elapsed_s": started.elapsed().as_secs(),
    });
    println!("{summary}");
    Ok(())
}

struct Cell<'a> {
    /// Leader-kill with `--trace`: the children write `<trace>.child<i>.log`.
    trace: Option<std::path::PathBuf>,
    urls: &'a [String],
    shape: &'a Shape,
    prefix: &'a str,
    variant: Variant,
    retry: bool,
    storage: Storage,
    n: usize,
}

struct Proc {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    stderr: tokio::task::JoinHandle<String>,
}

impl Cell<'_> {
    /// Starts N children, waits until each is connected, releases them at one instant and
    /// collects their outcomes.
    /// `started` (leader-kill) receives the start instant, ms since the epoch.
    async fn run(
        &self,
        started: Option<tokio::sync::watch::Sender<Option<f64>>>,
    ) -> Result<Vec<Outcome>, BoxError> {
        let exe = std::env::current_exe()?;
        let mut procs = Vec::with_capacity(self.n);
        for i in 0..self.n {
            let mut command = Command::new(&exe);
            command.arg("--child");
            if let Some(base) = &self.trace {
                command.arg("--trace").arg(child_log(base, i));
            }
            let mut child = command
                .args(["--urls", &self.urls.join(",")])
                .args(["--stream", self.shape.stream.name])
                .args(["--prefix", self.prefix])
                .args(["--variant", self.variant.name()])
                .args(["--retry", if self.retry { "on" } else { "off" }])
                .args(["--storage", storage_name(self.storage)])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .kill_on_drop(true)
                .spawn()?;
            let stdin = child.stdin.take();
            let lines = BufReader::new(child.stdout.take().expect("piped")).lines();
            let mut err = child.stderr.take().expect("piped");
            let stderr = tokio::spawn(async move {
                let mut text = String::new();
                let _ = tokio::io::AsyncReadExt::read_to_string(&mut err, &mut text).await;
                text
            });
            procs.push(Proc {
                child,
                stdin,
                lines,
                stderr,
            });
        }

        // Barrier: every child connected (or failed to).
        let mut early: Vec<Option<Outcome>> = vec![None; self.n];
        for (i, proc) in procs.iter_mut().enumerate() {
            match tokio::time::timeout(READY_TIMEOUT, proc.lines.next_line()).await {
                Ok(Ok(Some(line))) if line == "ready" => {}
                Ok(Ok(Some(line))) => early[i] = Some(Outcome::parse(&line)),
                Ok(Ok(None)) | Ok(Err(_)) => {
                    early[i] = Some(Outcome::failed("exited before ready".into()))
                }
                Err(_) => early[i] = Some(Outcome::failed("not ready within 30 s".into())),
            }
        }
        let start = epoch_ms() + START_MARGIN.as_secs_f64() * 1000.0;
        let start_line = format!("{start:.3}\n");
        if let Some(started) = started {
            let _ = started.send(Some(start));
        }
        for proc in procs.iter_mut() {
            if let Some(stdin) = proc.stdin.as_mut() {
                let _ = stdin.write_all(start_line.as_bytes()).await;
                let _ = stdin.flush().await;
            }
        }

        // Collect, killing stragglers by pid. A process cannot legitimately run past the
        // retry deadline of its two steps plus a request timeout each.
        let policy = policy(self.retry);
        let limit = START_MARGIN
            + 2 * (policy.deadline + policy.cap + 2 * policy.request_timeout)
            + Duration::from_secs(10);
        let collect_until = Instant::now() + limit;
        let mut outcomes = Vec::with_capacity(self.n);
        for (i, mut proc) in procs.into_iter().enumerate() {
            let outcome = match early[i].take() {
                Some(outcome) => outcome,
                None => {
                    match tokio::time::timeout_at(collect_until, proc.lines.next_line()).await {
                        Ok(Ok(Some(line))) => Outcome::parse(&line),
                        Ok(Ok(None)) | Ok(Err(_)) => {
                            Outcome::failed("exited without a result".into())
                        }
                        Err(_) => Outcome {
                            // Killed after the limit: certainly longer than a timeout.
                            ms: limit.as_secs_f64() * 1000.0,
                            ..Outcome::failed(format!("no result within {limit:?}; killed"))
                        },
                    }
                }
            };
            if tokio::time::timeout(Duration::from_secs(5), proc.child.wait())
                .await
                .is_err()
            {
                // `Child::kill` sends SIGKILL to this child's pid and reaps it.
                let _ = proc.child.kill().await;
            }
            let stderr = proc.stderr.await.unwrap_or_default();
            let outcome = match (&outcome.error, stderr.trim()) {
                (Some(e), s) if !s.is_empty() && !outcome.ok => Outcome {
                    error: Some(format!("{e}; stderr: {s}")),
                    ..outcome
                },
                _ => outcome,
            };
            outcomes.push(outcome);
        }
        Ok(outcomes)
    }
}

/// The meta leader once every node runs and they agree on one (after a restart, a node
/// may take a moment to rejoin).
async fn wait_for_leader(cluster: &NatsCluster) -> Result<usize, BoxError> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if (0..cluster.len()).all(|i| cluster.pid(i).is_some())
            && let Some(leader) = cluster.meta_leader().await
        {
            return Ok(leader);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err("no agreed meta leader within 60 s".into())
}

/// When leader-kill restarts the node it killed.
#[derive(Debug, Clone, Copy)]
enum Restart {
    /// This long after the start instant.
    AfterStart(Duration),
    /// This long after the new leader is seen.
    AfterElection(Duration),
}

/// The start instant once the cell sends it (ms since the epoch), `None` if it never does.
async fn start_instant(mut start: tokio::sync::watch::Receiver<Option<f64>>) -> Option<f64> {
    start.wait_for(Option::is_some).await.ok().and_then(|s| *s)
}

/// Leader-kill: at the start instant, kills `leader`; watches the monitoring endpoints for
/// the new meta leader (every 10 ms) and restarts the killed node as `restart` says. Returns
/// when the new leader was seen (ms after the start instant), and the kill and restart as
/// timeline events.
async fn kill_leader(
    cluster: &mut NatsCluster,
    leader: usize,
    start: tokio::sync::watch::Receiver<Option<f64>>,
    restart: Restart,
    with_leader_since: bool,
) -> Result<(Option<Election>, Vec<(f64, String)>), BoxError> {
    let Some(start) = start_instant(start).await else {
        return Ok((None, Vec::new()));
    };
    let wait = start - epoch_ms();
    if wait > 0.0 {
        tokio::time::sleep(Duration::from_secs_f64(wait / 1000.0)).await;
    }
    cluster.kill(leader);
    let mut events = vec![(epoch_ms() - start, format!("parent: killed node{leader}"))];
    let monitor = cluster.monitor();
    let (elected_tx, elected_rx) = tokio::sync::oneshot::channel::<f64>();
    let watch = async {
        let election = watch_election(&monitor, leader, start, with_leader_since).await;
        if let Some(election) = &election {
            let _ = elected_tx.send(election.at);
        }
        election
    };
    let restart = async {
        let at = match restart {
            Restart::AfterStart(after) => start + after.as_secs_f64() * 1000.0,
            Restart::AfterElection(after) => match elected_rx.await {
                Ok(elected) => start + elected + after.as_secs_f64() * 1000.0,
                // No election within the watch's deadline: restart now.
                Err(_) => epoch_ms(),
            },
        };
        let wait = at - epoch_ms();
        if wait > 0.0 {
            tokio::time::sleep(Duration::from_secs_f64(wait / 1000.0)).await;
        }
        let began = epoch_ms() - start;
        let result = cluster.restart(leader).await;
        (began, epoch_ms() - start, result)
    };
    let (election, (began, answered, restarted)) = tokio::join!(watch, restart);
    restarted?;
    if let Some(election) = &election {
        events.push((
            election.named,
            format!(
                "parent: node{} leads the meta group, in a term after the kill",
                election.leader
            ),
        ));
        if election.since_leader_since {
            events.push((
                election.at,
                format!(
                    "parent: node{} takes office (its leader_since)",
                    election.leader
                ),
            ));
        }
    }
    events.push((began, format!("parent: restarting node{leader}")));
    events.push((
        answered,
        format!("parent: node{leader} restarted, answers the JetStream API"),
    ));
    Ok((election, events))
}

/// The new meta leader, as leader-kill sees it.
#[derive(Debug, Clone, Copy)]
struct Election {
    /// The new leader.
    leader: usize,
    /// When every running node first named it in `/jsz` (ms after the start instant).
    named: f64,
    /// When it became leader in full (ms after the start instant): its `leader_since`, or
    /// `named` where the server does not report it.
    at: f64,
    /// Whether `at` is the leader's `leader_since`.
    since_leader_since: bool,
}

/// Watches (every 10 ms, up to 120 s) for the meta leader elected after `killed` was
/// killed.
///
/// A node names itself leader (`/jsz` `meta_cluster.leader`) as soon as it has the votes,
/// but takes office only once the first entry of its term (its peer state, the Raft no-op)
/// is committed and applied, which needs a quorum of followers to store it: until then it
/// answers no JetStream API request, and the server announces the election (logs "Self is
/// new JetStream cluster metadata leader", publishes
/// `$JS.EVENT.ADVISORY.DOMAIN.LEADER_ELECTED`) only then. That moment is the meta group's
/// `leader_since` in `/raftz` (nats-server 2.12 and later, `with_leader_since`; set on the
/// leader only, absent until then): the instant of the election. `named` is when a node
/// first reported itself leader in a term after the kill (the killed node too, restarted:
/// it may win again). Before 2.12 both are when every running node's `/jsz` names a leader
/// other than the killed node.
async fn watch_election(
    monitor: &ClusterMonitor,
    killed: usize,
    start: f64,
    with_leader_since: bool,
) -> Option<Election> {
    let deadline = Instant::now() + Duration::from_secs(120);
    if !with_leader_since {
        while Instant::now() < deadline {
            if let Some(new) = monitor.meta_leader().await
                && new != killed
            {
                let at = epoch_ms() - start;
                return Some(Election {
                    leader: new,
                    named: at,
                    at,
                    since_leader_since: false,
                });
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        return None;
    }
    // The term the killed leader led: the survivors still have it right after the kill.
    let mut old_term: Option<u64> = None;
    let mut named: Option<(usize, f64)> = None;
    while Instant::now() < deadline {
        let groups =
            futures::future::join_all((0..monitor.nodes()).map(|i| meta_raft(monitor, i))).await;
        let at = epoch_ms() - start;
        let term = |g: &Value| g["term"].as_u64().unwrap_or(0);
        let Some(old) = old_term else {
            old_term = groups.iter().flatten().map(term).max();
            continue;
        };
        for (i, group) in groups.iter().enumerate() {
            let Some(group) = group else { continue };
            if group["state"] != "LEADER" || term(group) <= old {
                continue;
            }
            let named_at = match named {
                Some((leader, named_at)) if leader == i => named_at,
                _ => {
                    named = Some((i, at));
                    at
                }
            };
            if let Some(since) = group["leader_since"].as_str().and_then(parse_rfc3339_ms) {
                return Some(Election {
                    leader: i,
                    named: named_at,
                    at: since - start,
                    since_leader_since: true,
                });
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    None
}

/// An RFC 3339 time (as the server writes `leader_since`) in ms since the epoch.
fn parse_rfc3339_ms(text: &str) -> Option<f64> {
    let time =
        time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339).ok()?;
    Some(time.unix_timestamp_nanos() as f64 / 1e6)
}

/// Node `node`'s view of the meta group's Raft state (`/raftz`, under the system account),
/// `None` when it does not answer.
async fn meta_raft(monitor: &ClusterMonitor, node: usize) -> Option<Value> {
    let raft = monitor.node_json(node, "/raftz?group=_meta_").await?;
    raft.as_object()?
        .values()
        .find_map(|groups| groups.get("_meta_"))
        .cloned()
}

/// One node's view, as its `/jsz` reports it: the meta leader, and the leaders of the
/// stream and of its consumers (`-` where it names none; `down` when it does not answer).
async fn node_view(monitor: &ClusterMonitor, node: usize, stream: &str) -> String {
    let Some(jsz) = monitor
        .node_json(node, "/jsz?accounts=true&streams=true&consumers=true")
        .await
    else {
        return "down".to_owned();
    };
    let name = |v: &Value| {
        v.as_str()
            .filter(|s| !s.is_empty())
            .unwrap_or("-")
            .to_owned()
    };
    let meta = name(&jsz["meta_cluster"]["leader"]);
    let mut view = format!("meta {meta}");
    // The meta group's raft state (nats-server 2.12 and later): `leader_since` is set on the
    // leader once its first entry of the term is applied, when it starts answering.
    if let Some(group) = meta_raft(monitor, node).await {
        view.push_str(&format!(
            " [{} term {} pindex {} commit {} applied {}{}]",
            group["state"].as_str().unwrap_or("?"),
            group["term"],
            group["pindex"],
            group["committed"],
            group["applied"],
            if group["leader_since"].is_string() {
                ", leader since set"
            } else {
                ""
            },
        ));
    }
    let streams = jsz["account_details"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|a| a["stream_detail"].as_array().into_iter().flatten());
    for detail in streams.filter(|d| d["name"] == stream) {
        view.push_str(&format!(", stream {}", name(&detail["cluster"]["leader"])));
        for consumer in detail["consumer_detail"].as_array().into_iter().flatten() {
            view.push_str(&format!(
                ", {} {}",
                consumer["name"].as_str().unwrap_or("?"),
                name(&consumer["cluster"]["leader"])
            ));
        }
    }
    view
}

/// Leader-kill with `--trace`: every change of each node's view (see [`node_view`]), every
/// 10 ms from the start instant until `done`, in ms after the start.
async fn watch_views(
    monitor: &ClusterMonitor,
    stream: &str,
    start: tokio::sync::watch::Receiver<Option<f64>>,
    mut done: tokio::sync::watch::Receiver<bool>,
) -> Vec<(f64, String)> {
    let Some(start) = start_instant(start).await else {
        return Vec::new();
    };
    let nodes = monitor.nodes();
    let mut last: Vec<Option<String>> = vec![None; nodes];
    let mut events = Vec::new();
    while !*done.borrow() {
        let views =
            futures::future::join_all((0..nodes).map(|i| node_view(monitor, i, stream))).await;
        let at = epoch_ms() - start;
        for (i, view) in views.into_iter().enumerate() {
            if last[i].as_ref() != Some(&view) {
                events.push((at, format!("node{i}: {view}")));
                last[i] = Some(view);
            }
        }
        tokio::select! {
            _ = done.changed() => {}
            () = tokio::time::sleep(Duration::from_millis(10)) => {}
        }
    }
    events
}

/// Where process `i` of the cell traced at `base` writes its log.
fn child_log(base: &std::path::Path, i: usize) -> std::path::PathBuf {
    base.with_extension(format!("child{i}.log"))
}

/// Writes `<base>.timeline`: the parent's events and the nodes' views, and every line of the
/// `n` processes' logs (their epoch timestamps made relative to `start`), in time order.
fn write_timeline(
    base: &std::path::Path,
    start: f64,
    events: &[(f64, String)],
    views: &[(f64, String)],
    n: usize,
) -> Result<(), BoxError> {
    let mut lines: Vec<(f64, String)> = events.iter().chain(views).cloned().collect();
    for i in 0..n {
        let Ok(log) = std::fs::read_to_string(child_log(base, i)) else {
            continue;
        };
        for line in log.lines() {
            let (time, rest) = line.split_once(' ').unwrap_or((line, ""));
            if let Ok(epoch) = time.parse::<f64>() {
                lines.push((epoch - start, format!("p{i}: {}", rest.trim())));
            }
        }
    }
    lines.sort_by(|a, b| a.0.total_cmp(&b.0));
    let text: String = lines
        .iter()
        .map(|(at, line)| format!("{at:>9.1} {line}\n"))
        .collect();
    std::fs::write(base.with_extension("timeline"), text)?;
    Ok(())
}

/// Provisions the shape once (our runtime, with retry): the stream and both consumers exist
/// before the warm cell's processes start.
async fn prepare_warm(client: &async_nats::Client, shape: &Shape) -> Result<(), BoxError> {
    Runtime::builder(client.clone())
        .topology(shape.topology())
        .build()?
        .provision()
        .await?;
    Ok(())
}

/// One R3 stream created and deleted, so the cluster has done it once.
async fn warm_up(
    client: &async_nats::Client,
    js: &jetstream::Context,
    storage: Storage,
) -> Result<(), BoxError> {
    let shape = Shape::new("BENCH_PROV_WARMUP", "bench.prov.warmup", storage);
    prepare_warm(client, &shape).await?;
    delete_stream(js, shape.stream.name).await;
    Ok(())
}

/// Deletes a stream and waits until the server says it is gone (a storm may delay it).
async fn delete_stream(js: &jetstream::Context, name: &str) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while Instant::now() < deadline {
        let _ = js.delete_stream(name).await;
        match js.get_stream(name).await {
            Err(e)
                if matches!(
                    e.kind(),
                    jetstream::context::GetStreamErrorKind::JetStream(ref j)
                        if j.error_code() == ErrorCode::STREAM_NOT_FOUND
                ) =>
            {
                return;
            }
            _ => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
    eprintln!("warning: stream {name} still exists after 120 s of deleting it");
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".to_owned())
}

fn fmt_ms(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| format!("{v:.0}"))
}

fn fmt_num(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| format!("{v}"))
}

/// One Markdown table per N: a row per mode, variant and retry; per repetition, `a, b, c`.
fn print_table(n: usize, args: &Args, runs: &[Run], timeout: Duration) {
    println!("\n### N = {n}\n");
    println!(
        "| mode | variant | retry | ok (per rep) | median ms | max ms | attempts (median) | ≥ {}s |",
        timeout.as_secs()
    );
    println!("|---|---|---|---|---:|---:|---:|---:|");
    for &mode in &args.modes {
        for &variant in &args.variants {
            for &retry in &args.retry {
                let cell: Vec<&Run> = runs
                    .iter()
                    .filter(|r| r.mode == mode && r.variant == variant && r.retry == retry)
                    .collect();
                let join = |f: &dyn Fn(&Run) -> String| {
                    cell.iter().map(|r| f(r)).collect::<Vec<_>>().join(", ")
                };
                println!(
                    "| {} | {} | {} | {} | {} | {} | {} | {} |",
                    mode.name(),
                    variant.name(),
                    if retry { "on" } else { "off" },
                    join(&|r| format!("{}/{n}", r.ok())),
                    join(&|r| fmt_ms(r.median_ms())),
                    join(&|r| fmt_ms(r.max_ms())),
                    join(&|r| fmt_num(r.attempts_median())),
                    join(&|r| r.slow(timeout).to_string()),
                );
            }
        }
    }
    let mut errors: BTreeMap<String, usize> = BTreeMap::new();
    for run in runs {
        for (error, count) in run.errors() {
            *errors
                .entry(format!(
                    "{} {} retry {}: {error}",
                    run.mode.name(),
                    run.variant.name(),
                    if run.retry { "on" } else { "off" }
                ))
                .or_default() += count;
        }
    }
    if !errors.is_empty() {
        println!("\nErrors at N = {n} (count over all repetitions):\n");
        for (error, count) in errors {
            println!("- {count} × {error}");
        }
    }
}
