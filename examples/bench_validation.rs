//! Validation and build benchmark: a topology of N queue consumers (one stream per 10
//! consumers) made with the programmatic API, validated, and built into a runtime, for N in
//! 1,000, 5,000 and 10,000.
//!
//! ```text
//! cargo run --release --example bench_validation -- [--n 1000,5000,10000] [--reps 7]
//! ```
//!
//! Per N, best and median of the repetitions of:
//!
//! - **topology**: adding every stream and consumer (`Topology::new().stream(..).consumer(..)`)
//!   in name order, and **shuffled**: the same declarations added in a shuffled order;
//! - **validate**: `nats_topology::validate::validate` alone;
//! - **build**: end to end, the topology added in the shuffled order, then
//!   `Runtime::builder(client).topology(t).build()` (validation, provisioner, health slots),
//!   on a client connected to a local `nats-server` started by the test kit (`build` talks
//!   to no server).
//!
//! It checks that the topology is valid; a second topology per N, with one overlapping stream
//! pair and one overlapping work-queue pair, checks that the problems are still found at that
//! size. The last line is one JSON object with every figure.

use std::time::{Duration, Instant};

use nats_topology::model::{ConsumerDecl, QueueDecl, Retention, StreamDecl, StreamRef};
use nats_topology::{HandlerError, HandlerFuture, Incoming, Runtime, Topology};
use nats_topology_testkit::NatsServer;
use serde_json::json;

fn noop(_: Incoming) -> HandlerFuture {
    Box::pin(async { Ok::<(), HandlerError>(()) })
}

fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

/// The declarations of N consumers: stream `S{k}` on `s{k}.>` (work-queue for every
/// fifth stream), consumers `g{i}` on `s{k}.c{i}`. With `broken`, stream 1 also claims
/// `s0.c0` and one work-queue consumer of stream 0 reads `s0.>`.
fn declarations(n: usize, broken: bool) -> (Vec<&'static StreamDecl>, Vec<ConsumerDecl>) {
    let streams: Vec<&'static StreamDecl> = (0..n.div_ceil(10))
        .map(|k| {
            let subjects: Vec<&'static str> = if broken && k == 1 {
                vec![leak(format!("s{k}.>")), "s0.c0"]
            } else {
                vec![leak(format!("s{k}.>"))]
            };
            let subjects: &'static [&'static str] = Box::leak(subjects.into_boxed_slice());
            let mut decl = StreamDecl::new(leak(format!("S{k:05}")), subjects);
            if k % 5 == 0 {
                decl = decl.retention(Retention::WorkQueue);
            }
            &*Box::leak(Box::new(decl))
        })
        .collect();
    let consumers = (0..n)
        .map(|i| {
            let k = i / 10;
            let filter = if broken && i == 1 {
                leak(format!("s{k}.>"))
            } else {
                leak(format!("s{k}.c{i}"))
            };
            let subjects: &'static [&'static str] = Box::leak(vec![filter].into_boxed_slice());
            ConsumerDecl::queue(
                leak(format!("bench::handler_{i:05}")),
                StreamRef::Declared(streams[k]),
                QueueDecl::new(leak(format!("g{i:05}"))),
            )
            .subjects(subjects)
        })
        .collect();
    (streams, consumers)
}

fn topology(streams: &[&'static StreamDecl], consumers: &[ConsumerDecl]) -> Topology {
    let mut topology = Topology::new();
    for stream in streams {
        topology = topology.stream(**stream);
    }
    for consumer in consumers {
        topology = topology.consumer(*consumer, noop);
    }
    topology
}

/// `items` in a fixed pseudo-random order (Fisher-Yates).
fn shuffled<T: Copy>(items: &[T]) -> Vec<T> {
    let mut items = items.to_vec();
    let mut rng = topology_core::xorshift::Rng(0x9e37_79b9_7f4a_7c15);
    for i in (1..items.len()).rev() {
        items.swap(i, rng.below(i + 1));
    }
    items
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

fn stats(mut v: Vec<Duration>) -> (f64, f64) {
    v.sort();
    (ms(v[0]), ms(v[v.len() / 2]))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut ns = vec![1_000, 5_000, 10_000];
    let mut reps = 7;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().unwrap_or_default();
        match flag.as_str() {
            "--n" => {
                ns = value
                    .split(',')
                    .map(|s| s.trim().parse().expect("--n 1000,5000"))
                    .collect()
            }
            "--reps" => reps = value.parse().expect("--reps N"),
            other => panic!("unknown flag {other}; usage: [--n 1000,5000,10000] [--reps 7]"),
        }
    }
    let server = NatsServer::start().await?;
    let client = async_nats::connect(server.url()).await?;
    let mut results = Vec::new();
    println!(
        "| consumers | streams | topology best / median ms | shuffled best / median ms | validate best / median ms | build (end to end) best / median ms | problems found (broken copy) |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    for &n in &ns {
        let (streams, consumers) = declarations(n, false);
        let (shuffled_streams, shuffled_consumers) = (shuffled(&streams), shuffled(&consumers));
        let (mut sorted_adds, mut shuffled_adds, mut validations, mut builds) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..reps {
            let t = Instant::now();
            let sorted = topology(&streams, &consumers);
            sorted_adds.push(t.elapsed());
            let t = Instant::now();
            let outcome = topology_runtime::validate::validate(&sorted);
            validations.push(t.elapsed());
            assert!(
                outcome.is_ok(),
                "the generated topology is valid: {outcome:?}"
            );
            drop(sorted);
            let t = Instant::now();
            drop(topology(&shuffled_streams, &shuffled_consumers));
            shuffled_adds.push(t.elapsed());
            let t = Instant::now();
            let runtime = Runtime::builder(client.clone())
                .topology(topology(&shuffled_streams, &shuffled_consumers))
                .build()?;
            builds.push(t.elapsed());
            assert_eq!(runtime.topology().consumers().len(), n);
            drop(runtime);
        }
        let (broken_streams, broken_consumers) = declarations(n, true);
        let problems = match topology_runtime::validate::validate(&topology(
            &broken_streams,
            &broken_consumers,
        )) {
            Ok(()) => 0,
            Err(e) => e.problems.len(),
        };
        let (sorted_best, sorted_median) = stats(sorted_adds);
        let (shuffled_best, shuffled_median) = stats(shuffled_adds);
        let (validate_best, validate_median) = stats(validations);
        let (build_best, build_median) = stats(builds);
        println!(
            "| {n} | {} | {sorted_best} / {sorted_median} | {shuffled_best} / {shuffled_median} | {validate_best} / {validate_median} | {build_best} / {build_median} | {problems} |",
            streams.len()
        );
        results.push(json!({
            "consumers": n,
            "streams": streams.len(),
            "topology_ms": {"best": sorted_best, "median": sorted_median},
            "topology_shuffled_ms": {"best": shuffled_best, "median": shuffled_median},
            "validate_ms": {"best": validate_best, "median": validate_median},
            "build_ms": {"best": build_best, "median": build_median},
            "problems_in_broken_copy": problems,
        }));
    }
    println!("{}", json!({"reps": reps, "runs": results}));
    Ok(())
}
