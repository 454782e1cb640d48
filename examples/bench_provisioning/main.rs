//! Cold-start provisioning benchmark: N separate processes provision one replicated (R3)
//! stream, two queue consumers and one R3 key-value bucket at the same instant, against one
//! 3-node cluster.
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
//!   run in the JSON line). It also counts the JetStream API requests the cluster received
//!   from clients, from the survivors' `/connz` (`in_msgs` per client connection: the
//!   processes publish nothing else), over the outage (from just after the kill until the
//!   new leader is seen: `outage_requests`, with the rate) and from then until the last
//!   process is ready (`after_leader_requests`); of those, the leader watch's probes
//!   (`probes`: `$JS.API.INFO` requests, as a subscriber of that subject on a surviving node
//!   counts them); and the requests the nodes dropped from a full JetStream API queue
//!   (`api_queue_dropped`, from their logs).
//!   `--restart-after-election-ms MS` restarts the killed node MS after the new leader is
//!   seen instead (the old leader coming back just after the election).
//!   `--trace DIR` writes, per leader-kill cell, what happened in time order: every change
//!   of each node's view (meta leader and the meta group's Raft state from `/jsz` and
//!   `/raftz`; the stream's and its consumers' leaders, every 10 ms), the kill, restart and
//!   election, and each process's debug log (its attempts, what woke them), all in ms after
//!   the start instant, in `DIR/cell<id>.timeline`; the processes' own logs in
//!   `DIR/cell<id>.child<i>.log` and the nodes' in `DIR/cell<id>.node<i>.log`. A cell of
//!   another mode gets the processes' logs and a timeline of them alone.
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
//! the start instant), `attempts` (provisioning attempts; 4 = one per stream, bucket and
//! consumer, no retry; for a failed process, the attempts of the step that failed), `timed_out` (its
//! requests that went unanswered for the whole request timeout; an attempt the runtime gave
//! up earlier, woken by an election, is not one; `null` when a failed `provision` does not
//! say) and `error`. The
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
//! successful processes, the median attempts and the requests that timed out (over all
//! processes); leader-kill cells get a second table, one row per repetition. The last line
//! is one JSON object with a `runs` array, one object per cell and repetition.

mod cell;
mod child;
mod leader_kill;
mod load;
mod report;
mod shape;
mod trace;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_nats::jetstream;
use nats_topology::RetryPolicy;
use nats_topology::model::Storage;
use nats_topology_testkit::NatsCluster;
use serde_json::json;
use tokio::time::Instant;

use cell::Cell;
use report::{Run, fmt_ms, fmt_num, print_leader_kill, print_table};
use shape::{Shape, delete_stream, prepare_warm, warm_up};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How long a child may take to connect and print `ready`.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// The delay between the last `ready` and the start instant (time to write every stdin).
const START_MARGIN: Duration = Duration::from_millis(150);
/// Provisioning attempts of a process that needed no retry: the stream, the bucket and two
/// consumers.
const MIN_ATTEMPTS: u32 = 4;

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
    /// Where cells write their timelines and the processes' logs.
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
        let child = child::child_args(argv);
        // One thread per process: N processes share two cores; the server does the work.
        return tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(child::child_main(child));
    }
    let args = parent_args(argv);
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(parent_main(args))
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
         start instant) of the successful processes. attempts: per process, 4 = one per stream, \
         bucket and consumer (no retry). timed out: requests that went unanswered for the whole \
         request timeout, over all processes (an attempt given up earlier is not one)."
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
                        let trace = match &args.trace {
                            Some(dir) => {
                                std::fs::create_dir_all(dir)?;
                                Some(dir.join(format!("cell{id}")))
                            }
                            None => None,
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
                        let (outcomes, leader_kill) = if mode == Mode::LeaderKill {
                            let (outcomes, kill) = leader_kill::run_cell(
                                &mut cluster,
                                &cell,
                                &args,
                                trace.as_deref(),
                                reports_leader_since,
                            )
                            .await?;
                            (outcomes, Some(kill))
                        } else {
                            (trace::run_cell(&cell, trace.as_deref()).await?, None)
                        };
                        let run = Run {
                            mode,
                            variant,
                            retry,
                            n,
                            rep,
                            outcomes,
                            leader_kill,
                        };
                        eprintln!(
                            "[{:>5.0}s] n={n:<2} rep {} {:<4} {:<12} retry {:<3}: {}/{n} ok, median {} ms, max {} ms, attempts median {}, timed out {}",
                            started.elapsed().as_secs_f64(),
                            rep + 1,
                            mode.name(),
                            variant.name(),
                            if retry { "on" } else { "off" },
                            run.ok(),
                            fmt_ms(run.median_ms()),
                            fmt_ms(run.max_ms()),
                            fmt_num(run.attempts_median()),
                            run.timed_out_text(),
                        );
                        for (error, count) in run.errors() {
                            eprintln!("        {count} x {error}");
                        }
                        if let Some(kill) = &run.leader_kill {
                            let mut after = run.after_leader();
                            after.sort_by(f64::total_cmp);
                            eprintln!(
                                "        killed node{}, new meta leader named at {} ms, in office from {} ms; ready after it (ms): {:?}",
                                kill.killed,
                                fmt_ms(kill.election.map(|e| e.named)),
                                fmt_ms(kill.election.map(|e| e.at)),
                                after.iter().map(|v| v.round() as i64).collect::<Vec<_>>()
                            );
                            eprintln!(
                                "        API requests from clients: outage {}, after the leader {}; API queue drops {}",
                                kill.outage.map_or("-".to_owned(), |l| l.text()),
                                kill.after_leader.map_or("-".to_owned(), |l| l.text()),
                                kill.dropped,
                            );
                        }
                        for name in shape.stream_names() {
                            delete_stream(&js, &name).await;
                        }
                        tokio::time::sleep(args.settle).await;
                        runs_n.push(run);
                    }
                }
            }
        }
        print_table(n, &args, &runs_n);
        print_leader_kill(n, &runs_n);
        runs.extend(runs_n);
    }

    let summary = json!({
        "runs": runs.iter().map(Run::json).collect::<Vec<_>>(),
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
