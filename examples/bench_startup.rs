//! Start-up benchmark: how long a runtime with N queue consumers (one stream per 10
//! consumers) takes from `run_until` to ready, on one local `nats-server` started by the test
//! kit, and how much memory each consumer costs.
//!
//! ```text
//! cargo run --release --example bench_startup -- [--n 1000] [--reps 3] [--idle-secs 0] [--nodes 1|3]
//! ```
//!
//! Per repetition, on a fresh server (or, with `--nodes 3`, a fresh 3-node cluster, the client
//! on its first node; the server's CPU then is the three nodes') each time:
//!
//! - **cold**: nothing exists; `run_until`, then `Health::wait_ready`. Also the time until the
//!   first consumer and half of them run (read from health on each change);
//! - **warm**: the same topology run again on that server by a new runtime (every stream and
//!   consumer exists: a restart);
//! - **provision**: `Runtime::provision()` alone on another fresh server (streams, then every
//!   consumer concurrently), without consuming;
//! - **raw**: async-nats alone on another fresh server: create the streams one by one, then
//!   every consumer concurrently (`create_consumer_on_stream`), the floor the server sets.
//!
//! CPU: user + system time of this process and of the server during the cold and the warm
//! run (`/proc/<pid>/stat`, 10 ms ticks; Linux). Memory: this process's resident set once the
//! cold run is ready, minus before its topology was collected and its runtime built (the
//! declarations are made before: a service's macros emit them as statics), per consumer (first repetition
//! only: later ones reuse what the first freed); of it, the anonymous memory (`RssAnon`: the
//! resident set without the pages of files, this program's code among them, which the first
//! run reads in once whatever the number of consumers); and the heap in use (bytes allocated
//! and not freed, counted by this program's global allocator): the anonymous memory beyond
//! the heap is what the allocator keeps of what start-up freed. The last line is one JSON object with every
//! figure (medians).
//!
//! Idle traffic (`--idle-secs S`, first repetition): once the cold run is ready and nothing
//! is published, the messages this process sends to the server over `S` seconds (the client's
//! own count: pull requests, ack-floor reads, the runtime's watches), per consumer and minute.
//!
//! The server's store is under the temporary directory: `TMPDIR=/dev/shm` puts it on tmpfs,
//! which takes the file system's cost of creating each consumer's files out of the figures.
//! The stores are removed when the benchmark ends, not between measurements (see
//! docs/PERFORMANCE.md, "Ready with 1,000 and 10,000 consumers").

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer, stream};
use nats_topology::model::{ConsumerDecl, QueueDecl, StreamDecl, StreamRef};
use nats_topology::{ConsumerState, HandlerError, HandlerFuture, Incoming, Runtime, Topology};
use nats_topology_testkit::{NatsCluster, NatsServer};
use serde_json::json;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Keeps the bytes this process holds on its heap (asked for and not yet freed): beside the
/// resident set, which also counts what the allocator keeps of what was freed.
struct Live;

static LIVE: AtomicI64 = AtomicI64::new(0);

unsafe impl GlobalAlloc for Live {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as i64, Ordering::Relaxed);
        // SAFETY: the layout is the caller's, passed on unchanged.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as i64, Ordering::Relaxed);
        // SAFETY: `ptr` was allocated by `System` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size as i64 - layout.size() as i64, Ordering::Relaxed);
        // SAFETY: as for `dealloc`, and `new_size` is the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Live = Live;

const READY_WITHIN: Duration = Duration::from_secs(120);

fn noop(_: Incoming) -> HandlerFuture {
    Box::pin(async { Ok::<(), HandlerError>(()) })
}

fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

/// Streams `B{k}` on `b{k}.>`, consumers `g{i}` on `b{k}.c{i}`, ten per stream: the
/// declarations, which a service's macros emit as statics (here leaked, to the same effect).
fn declarations(n: usize) -> Vec<ConsumerDecl> {
    let streams: Vec<&'static StreamDecl> = (0..n.div_ceil(10))
        .map(|k| {
            let subjects: &'static [&'static str] =
                Box::leak(vec![leak(format!("b{k}.>"))].into_boxed_slice());
            &*Box::leak(Box::new(StreamDecl::new(
                leak(format!("B{k:05}")),
                subjects,
            )))
        })
        .collect();
    (0..n)
        .map(|i| {
            let k = i / 10;
            let subjects: &'static [&'static str] =
                Box::leak(vec![leak(format!("b{k}.c{i}"))].into_boxed_slice());
            ConsumerDecl::queue(
                leak(format!("bench::handler_{i:05}")),
                StreamRef::Declared(streams[k]),
                QueueDecl::new(leak(format!("g{i:05}"))),
            )
            .subjects(subjects)
        })
        .collect()
}

/// The topology of `declarations`, as a service collects it when it starts.
fn topology(declarations: &[ConsumerDecl]) -> Topology {
    declarations.iter().fold(Topology::new(), |topology, decl| {
        topology.consumer(*decl, noop)
    })
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e4).round() / 10.0
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The anonymous part of this process's resident set (`RssAnon` in `/proc/self/status`), in
/// bytes.
fn rss_anon() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("RssAnon:"))
        .and_then(|kb| kb.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap_or(0)
        * 1024
}

/// The resident set of this process, in bytes.
fn rss() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

/// CPU time (user + system) of process `pid` so far, in ms (clock ticks of 10 ms).
fn cpu_ms(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (in parentheses, which may contain spaces).
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|t| t.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15 of stat, 12 and 13 after the name and state.
    (ticks(11) + ticks(12)) * 10.0
}

struct Run {
    first: Duration,
    half: Duration,
    ready: Duration,
    stop: tokio::sync::oneshot::Sender<()>,
    running: tokio::task::JoinHandle<Result<(), nats_topology::RunError>>,
}

/// Runs `topology` on `client` until ready; the times are counted from `run_until`.
async fn run(client: &async_nats::Client, topology: Topology) -> Result<Run, BoxError> {
    let runtime = Runtime::builder(client.clone())
        .topology(topology)
        .build()?;
    let health = runtime.health();
    let n = health.consumers().len();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let started = Instant::now();
    let running = tokio::spawn(runtime.run_until(async move {
        let _ = stopped.await;
    }));
    // Samples health on its changes (bounded waits: a change it misses costs 10 ms) until
    // half of the consumers run.
    let sampler = {
        let health = health.clone();
        tokio::spawn(async move {
            let mut first = None;
            loop {
                let up = health
                    .consumers()
                    .iter()
                    .filter(|c| c.state == ConsumerState::Running)
                    .count();
                if up > 0 {
                    first.get_or_insert_with(|| started.elapsed());
                }
                if up * 2 >= n {
                    return (first, started.elapsed());
                }
                let _ = tokio::time::timeout(Duration::from_millis(10), health.changed()).await;
            }
        })
    };
    health.wait_ready(READY_WITHIN).await?;
    let ready = started.elapsed();
    let (first, half) = sampler.await?;
    Ok(Run {
        first: first.unwrap_or(half),
        half,
        ready,
        stop,
        running,
    })
}

/// async-nats alone: the streams, then every consumer concurrently.
async fn raw(client: &async_nats::Client, topology: &Topology) -> Result<Duration, BoxError> {
    let js = jetstream::new(client.clone());
    let started = Instant::now();
    for s in topology.streams() {
        js.create_stream(stream::Config {
            name: s.name.into(),
            subjects: s.subjects.iter().map(|x| x.to_string()).collect(),
            ..Default::default()
        })
        .await?;
    }
    let creates = topology.consumers().iter().map(|c| {
        let js = js.clone();
        let group = c.decl.as_queue().map(|q| q.group).unwrap_or_default();
        let (stream, subject) = (c.decl.stream.name(), c.decl.subjects[0]);
        async move {
            js.create_consumer_on_stream(
                consumer::pull::Config {
                    durable_name: Some(group.into()),
                    filter_subject: subject.into(),
                    ack_policy: consumer::AckPolicy::Explicit,
                    ..Default::default()
                },
                stream,
            )
            .await
            .map(|_| ())
        }
    });
    futures::future::try_join_all(creates).await?;
    Ok(started.elapsed())
}

/// A fresh server, or a fresh 3-node cluster (`--nodes 3`).
enum Fresh {
    Server(Box<NatsServer>),
    Cluster(NatsCluster),
}

impl Fresh {
    async fn start(nodes: usize) -> Result<Fresh, BoxError> {
        Ok(match nodes {
            1 => Fresh::Server(Box::new(NatsServer::start().await?)),
            3 => Fresh::Cluster(NatsCluster::start().await?),
            other => panic!("--nodes {other}: 1 or 3"),
        })
    }

    fn url(&self) -> String {
        match self {
            Fresh::Server(server) => server.url(),
            Fresh::Cluster(cluster) => cluster.url(0),
        }
    }

    /// CPU time of every node so far, in ms.
    fn cpu_ms(&self) -> f64 {
        match self {
            Fresh::Server(server) => server.pid().map_or(0.0, cpu_ms),
            Fresh::Cluster(cluster) => (0..cluster.len())
                .filter_map(|i| cluster.pid(i))
                .map(cpu_ms)
                .sum(),
        }
    }

    /// Kills every node (by pid); the stores stay until the value is dropped.
    fn kill(&mut self) {
        match self {
            Fresh::Server(server) => server.kill(),
            Fresh::Cluster(cluster) => (0..cluster.len()).for_each(|i| cluster.kill(i)),
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let mut n = 1_000;
    let mut reps = 3;
    let mut idle_secs = 0u64;
    let mut nodes = 1;
    let mut idle_per_consumer_minute = None;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().unwrap_or_default();
        match flag.as_str() {
            "--n" => n = value.parse().expect("--n 1000"),
            "--reps" => reps = value.parse().expect("--reps 3"),
            "--idle-secs" => idle_secs = value.parse().expect("--idle-secs 60"),
            "--nodes" => nodes = value.parse().expect("--nodes 1 or 3"),
            other => panic!(
                "unknown flag {other}; usage: [--n 1000] [--reps 3] [--idle-secs 0] [--nodes 1|3]"
            ),
        }
    }
    let mut figures: Vec<[f64; 13]> = Vec::new();
    println!(
        "| rep | cold: first / half / ready ms | cold CPU ms: ours / server | warm ready ms | warm CPU ms: ours / server | provision ms | raw async-nats ms | KB per consumer: resident / anonymous / heap |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|");
    // Every server's store is removed at the end, not between measurements: removing
    // thousands of files loads the disk for seconds after (this machine's file system discards
    // the freed blocks as it goes), and the next measurement would pay for the last one's.
    let mut stopped = Vec::new();
    let mut keep = |mut server: Fresh| {
        server.kill();
        stopped.push(server);
    };
    for rep in 0..reps {
        let server = Fresh::start(nodes).await?;
        let client = async_nats::connect(server.url()).await?;
        let ours = std::process::id();
        // Built before the memory is read: a service's declarations are statics its macros
        // emit, in the binary, not on the heap (this program makes them up at run time).
        let declared = declarations(n);
        let before = (rss(), LIVE.load(Ordering::Relaxed), rss_anon());
        let cpu = (cpu_ms(ours), server.cpu_ms());
        let cold = run(&client, topology(&declared)).await?;
        let cold_cpu = (cpu_ms(ours) - cpu.0, server.cpu_ms() - cpu.1);
        // The first repetition only: later ones reuse what the first freed.
        let per_consumer = (
            rss().saturating_sub(before.0) as f64 / n as f64 / 1024.0,
            (LIVE.load(Ordering::Relaxed) - before.1) as f64 / n as f64 / 1024.0,
            rss_anon().saturating_sub(before.2) as f64 / n as f64 / 1024.0,
        );
        if rep == 0 && idle_secs > 0 {
            let sent = || client.statistics().out_messages.load(Ordering::Relaxed);
            let from = sent();
            tokio::time::sleep(Duration::from_secs(idle_secs)).await;
            let per = (sent() - from) as f64 / n as f64 / (idle_secs as f64 / 60.0);
            println!("idle: {per:.2} messages sent per consumer and minute over {idle_secs} s");
            idle_per_consumer_minute = Some((per * 100.0).round() / 100.0);
        }
        cold.stop.send(()).ok();
        cold.running.await??;
        let cpu = (cpu_ms(ours), server.cpu_ms());
        let warm = run(&client, topology(&declared)).await?;
        let warm_cpu = (cpu_ms(ours) - cpu.0, server.cpu_ms() - cpu.1);
        warm.stop.send(()).ok();
        warm.running.await??;
        drop(client);
        keep(server);

        let server = Fresh::start(nodes).await?;
        let client = async_nats::connect(server.url()).await?;
        let runtime = Runtime::builder(client.clone())
            .topology(topology(&declared))
            .build()?;
        let provision = ms(runtime.provision().await?.elapsed);
        drop((runtime, client));
        keep(server);

        let server = Fresh::start(nodes).await?;
        let client = async_nats::connect(server.url()).await?;
        let raw = ms(raw(&client, &topology(&declared)).await?);
        drop(client);
        keep(server);

        let row = [
            ms(cold.first),
            ms(cold.half),
            ms(cold.ready),
            cold_cpu.0,
            cold_cpu.1,
            ms(warm.ready),
            warm_cpu.0,
            warm_cpu.1,
            provision,
            raw,
            (per_consumer.0 * 10.0).round() / 10.0,
            (per_consumer.1 * 10.0).round() / 10.0,
            (per_consumer.2 * 10.0).round() / 10.0,
        ];
        println!(
            "| {rep} | {} / {} / {} | {} / {} | {} | {} / {} | {} | {} | {} |",
            row[0],
            row[1],
            row[2],
            row[3],
            row[4],
            row[5],
            row[6],
            row[7],
            row[8],
            row[9],
            if rep == 0 {
                format!("{} / {} / {}", row[10], row[12], row[11])
            } else {
                "-".to_owned()
            }
        );
        figures.push(row);
    }
    let median_of = |i: usize| median(figures.iter().map(|row| row[i]).collect());
    println!(
        "{}",
        json!({
            "consumers": n,
            "reps": reps,
            "cold_first_running_ms": median_of(0),
            "cold_half_running_ms": median_of(1),
            "cold_ready_ms": median_of(2),
            "cold_cpu_ms": {"ours": median_of(3), "server": median_of(4)},
            "warm_ready_ms": median_of(5),
            "warm_cpu_ms": {"ours": median_of(6), "server": median_of(7)},
            "provision_ms": median_of(8),
            "raw_create_ms": median_of(9),
            "idle_messages_per_consumer_minute": idle_per_consumer_minute,
            "kb_per_consumer": {
                "resident": figures[0][10],
                "anonymous": figures[0][12],
                "heap": figures[0][11],
            },
        })
    );
    Ok(())
}
