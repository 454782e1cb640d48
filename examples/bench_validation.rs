//! Validation benchmark: builds a topology of N queue consumers (one stream per 10
//! consumers) with the programmatic API and validates it, for N in 100, 1,000 and 10,000.
//!
//! ```text
//! cargo run --release --example bench_validation -- [--n 100,1000,10000] [--reps 5]
//! ```
//!
//! Per N it prints the build time (adding every stream and consumer) and the validation
//! time (`nats_topology::validate::validate`), best and median of the repetitions, and
//! checks that the topology is valid. The last line is one JSON object with every figure.
//! A second topology per N, with one overlapping stream pair and one overlapping
//! work-queue pair, checks that the problems are still found at that size.

use std::time::{Duration, Instant};

use nats_topology::model::{ConsumerDecl, QueueDecl, Retention, StreamDecl, StreamRef};
use nats_topology::{HandlerError, HandlerFuture, Incoming, Topology};
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

fn build(streams: &[&'static StreamDecl], consumers: &[ConsumerDecl]) -> Topology {
    let mut topology = Topology::new();
    for stream in streams {
        topology = topology.stream(**stream);
    }
    for consumer in consumers {
        topology = topology.consumer(*consumer, noop);
    }
    topology
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

fn stats(mut v: Vec<Duration>) -> (f64, f64) {
    v.sort();
    (ms(v[0]), ms(v[v.len() / 2]))
}

fn main() {
    let mut ns = vec![100, 1_000, 10_000];
    let mut reps = 5;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().unwrap_or_default();
        match flag.as_str() {
            "--n" => {
                ns = value
                    .split(',')
                    .map(|s| s.trim().parse().expect("--n 100,1000"))
                    .collect()
            }
            "--reps" => reps = value.parse().expect("--reps N"),
            other => panic!("unknown flag {other}; usage: [--n 100,1000,10000] [--reps 5]"),
        }
    }
    let mut results = Vec::new();
    println!(
        "| consumers | streams | build best / median ms | validate best / median ms | problems found (broken copy) |"
    );
    println!("|---:|---:|---:|---:|---:|");
    for &n in &ns {
        let (streams, consumers) = declarations(n, false);
        let mut builds = Vec::new();
        let mut validations = Vec::new();
        for _ in 0..reps {
            let t = Instant::now();
            let topology = build(&streams, &consumers);
            builds.push(t.elapsed());
            let t = Instant::now();
            let outcome = topology_runtime::validate::validate(&topology);
            validations.push(t.elapsed());
            assert!(
                outcome.is_ok(),
                "the generated topology is valid: {outcome:?}"
            );
        }
        let (broken_streams, broken_consumers) = declarations(n, true);
        let problems = match topology_runtime::validate::validate(&build(
            &broken_streams,
            &broken_consumers,
        )) {
            Ok(()) => 0,
            Err(e) => e.problems.len(),
        };
        let (build_best, build_median) = stats(builds);
        let (validate_best, validate_median) = stats(validations);
        println!(
            "| {n} | {} | {build_best} / {build_median} | {validate_best} / {validate_median} | {problems} |",
            streams.len()
        );
        results.push(json!({
            "consumers": n,
            "streams": streams.len(),
            "build_ms": {"best": build_best, "median": build_median},
            "validate_ms": {"best": validate_best, "median": validate_median},
            "problems_in_broken_copy": problems,
        }));
    }
    println!("{}", json!({"reps": reps, "runs": results}));
}
