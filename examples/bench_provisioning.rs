//! Cold-start provisioning benchmark: N separate processes provision one replicated (R3)
//! stream and two queue consumers at the same instant, against one 3-node cluster.
//!
//! ```text
//! cargo run --release --example bench_provisioning -- \
//!     [--n 1,2,8,16,32] [--reps 3] [--modes cold,warm] \
//!     [--variants create-first,update-first] [--retry on,off | --no-retry] \
//!     [--storage file|memory] [--settle-ms 500] [--restart-after-ms 5000]
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
//!   for the new one through the nodes' monitoring endpoint (`/jsz`, polled every 10 ms;
//!   the meta-leader advisory goes to the system account only, which the kit's servers do
//!   not give a user). Per process it reports the time to ready after that election
//!   (`after_leader_ms`: median and max per run in the JSON line).
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
use nats_topology_testkit::NatsCluster;
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
     [--settle-ms 500] [--restart-after-ms 5000]";

struct Args {
    ns: Vec<usize>,
    reps: usize,
    modes: Vec<Mode>,
    variants: Vec<Variant>,
    retry: Vec<bool>,
    storage: Storage,
    settle: Duration,
    restart_after: Duration,
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
}

fn child_args(mut it: impl Iterator<Item = String>) -> ChildArgs {
    let mut args = ChildArgs {
        urls: Vec::new(),
        stream: String::new(),
        prefix: String::new(),
        variant: Variant::CreateFirst,
        retry: true,
        storage: Storage::File,
    };
    while let Some(flag) = it.next() {
        let value = it.next().unwrap_or_default();
        match flag.as_str() {
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

async fn child_main(args: ChildArgs) -> Result<(), BoxError> {
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
    /// Leader-kill: the node killed and when (ms after the start instant) the new meta leader
    /// was seen.
    killed: Option<usize>,
    election_ms: Option<f64>,
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
        match self.election_ms {
            Some(election) => self.ok_times().iter().map(|ms| ms - election).collect(),
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
            value["election_ms"] = json!(self.election_ms.map(round1));
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
                        let cell = Cell {
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
                        let (outcomes, killed, election_ms) = if mode == Mode::LeaderKill {
                            let leader = wait_for_leader(&cluster).await?;
                            let (start_tx, start_rx) = tokio::sync::oneshot::channel();
                            let (outcomes, election) = tokio::join!(
                                cell.run(Some(start_tx)),
                                kill_leader(&mut cluster, leader, start_rx, args.restart_after),
                            );
                            (outcomes?, Some(leader), election?)
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
                            election_ms,
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
                                "        killed node{}, new meta leader at {} ms; ready after it (ms): {:?}",
                                killed.unwrap_or(0),
                                fmt_ms(election_ms),
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
        started: Option<tokio::sync::oneshot::Sender<f64>>,
    ) -> Result<Vec<Outcome>, BoxError> {
        let exe = std::env::current_exe()?;
        let mut procs = Vec::with_capacity(self.n);
        for _ in 0..self.n {
            let mut child = Command::new(&exe)
                .arg("--child")
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
            let _ = started.send(start);
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

/// Leader-kill: at the start instant, kills `leader`; watches the monitoring endpoints for
/// the new meta leader (every 10 ms) while, `restart_after` after the start, the killed node
/// is restarted. Returns when the new leader was seen, in ms after the start instant.
async fn kill_leader(
    cluster: &mut NatsCluster,
    leader: usize,
    start: tokio::sync::oneshot::Receiver<f64>,
    restart_after: Duration,
) -> Result<Option<f64>, BoxError> {
    let Ok(start) = start.await else {
        return Ok(None);
    };
    let wait = start - epoch_ms();
    if wait > 0.0 {
        tokio::time::sleep(Duration::from_secs_f64(wait / 1000.0)).await;
    }
    cluster.kill(leader);
    let monitor = cluster.monitor();
    let watch = async {
        let deadline = Instant::now() + Duration::from_secs(120);
        while Instant::now() < deadline {
            if let Some(new) = monitor.meta_leader().await
                && new != leader
            {
                return Some(epoch_ms() - start);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        None
    };
    let restart = async {
        let at = start + restart_after.as_secs_f64() * 1000.0;
        let wait = at - epoch_ms();
        if wait > 0.0 {
            tokio::time::sleep(Duration::from_secs_f64(wait / 1000.0)).await;
        }
        cluster.restart(leader).await
    };
    let (election, restarted) = tokio::join!(watch, restart);
    restarted?;
    Ok(election)
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
