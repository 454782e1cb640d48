//! A fleet larger than the server's default wait list: N runtimes (default 1,000) in one
//! process, each on a connection of its own, share one queue consumer on one local
//! `nats-server` started by the test kit. Each keeps its pull requests open at the consumer;
//! the consumer's `max_waiting` is how many it holds at once.
//!
//! ```text
//! cargo run --release --example bench_fleet -- [--n 1000] [--max-waiting 512]
//! ```
//!
//! Without `--max-waiting` the consumer is created as the runtime creates it by default
//! (`DEFAULT_MAX_WAITING`, 4,096); `--max-waiting 512` is the server's own default, which a
//! fleet past about 250 replicas outgrows. It prints how many replicas were ready, how many
//! were `crowded out` (their requests refused or dropped: not ready, saying why), how many
//! handled at least one of the messages published (5 per replica, each handler 10 ms), and
//! how long it took. The last line is one JSON object.

use std::time::{Duration, Instant};

use nats_topology::model::{ConsumerDecl, QueueDecl, StreamDecl, StreamRef};
use nats_topology::{ConsumerState, HandlerError, HandlerFuture, Incoming, Runtime, Topology};
use nats_topology_testkit::NatsServer;
use serde_json::json;

static STREAM: StreamDecl = StreamDecl::new("FLEET", &["fleet.>"]);

fn work(_: Incoming) -> HandlerFuture {
    Box::pin(async {
        // A handler's work: the scenario, not synchronisation.
        tokio::time::sleep(Duration::from_millis(10)).await;
        Ok::<(), HandlerError>(())
    })
}

fn arg(name: &str) -> Option<u64> {
    std::env::args()
        .skip_while(|a| a != name)
        .nth(1)
        .and_then(|v| v.parse().ok())
}

#[tokio::main]
async fn main() {
    let n = arg("--n").unwrap_or(1_000) as usize;
    let max_waiting = arg("--max-waiting").map(|m| m as i64);
    let server = NatsServer::start().await.expect("nats-server starts");
    let group = match max_waiting {
        Some(m) => QueueDecl::new("fleet").max_waiting(m),
        None => QueueDecl::new("fleet"),
    };
    let decl = ConsumerDecl::queue("bench::work", StreamRef::Named("FLEET"), group)
        .subjects(&["fleet.jobs"])
        .concurrency(1);

    let started = Instant::now();
    let mut fleet = Vec::with_capacity(n);
    for _ in 0..n {
        let client = async_nats::connect(server.url()).await.expect("connect");
        let runtime = Runtime::builder(client)
            .topology(Topology::new().stream(STREAM).consumer(decl, work))
            .build()
            .expect("valid topology");
        let health = runtime.health();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let run = tokio::spawn(runtime.run_until(async move {
            let _ = stopped.await;
        }));
        fleet.push((health, stop, run));
    }
    // Settled: every replica running or crowded out, for two heartbeats in a row.
    let deadline = Instant::now() + Duration::from_secs(180);
    let count = |fleet: &[(nats_topology::Health, _, _)]| {
        let states: Vec<ConsumerState> = fleet
            .iter()
            .map(|(h, _, _)| h.consumers()[0].state.clone())
            .collect();
        let running = states
            .iter()
            .filter(|s| **s == ConsumerState::Running)
            .count();
        let crowded = states
            .iter()
            .filter(|s| matches!(s, ConsumerState::Crowded { .. }))
            .count();
        (running, crowded)
    };
    let mut settled_reads = 0;
    let (mut running, mut crowded) = (0, 0);
    while Instant::now() < deadline && settled_reads < 2 {
        // Polling the fleet's health: the benchmark's clock, not synchronisation.
        tokio::time::sleep(Duration::from_secs(5)).await;
        let now = count(&fleet);
        settled_reads = if now.0 + now.1 == n && now == (running, crowded) {
            settled_reads + 1
        } else {
            0
        };
        (running, crowded) = now;
        println!(
            "{:>6.1?}: {running} running, {crowded} crowded out",
            started.elapsed()
        );
    }
    let settled = started.elapsed();

    let client = async_nats::connect(server.url()).await.expect("connect");
    let js = async_nats::jetstream::new(client);
    let messages = n * 5;
    let mut acks = Vec::with_capacity(messages);
    for i in 0..messages {
        acks.push(
            js.publish("fleet.jobs", format!("{i}").into())
                .await
                .expect("publish"),
        );
    }
    for ack in acks {
        ack.await.expect("stored");
    }
    let published = Instant::now();
    let handled = |fleet: &[(nats_topology::Health, _, _)]| -> (u64, usize) {
        let each: Vec<u64> = fleet
            .iter()
            .map(|(h, _, _)| h.consumers()[0].handled)
            .collect();
        (each.iter().sum(), each.iter().filter(|&&h| h > 0).count())
    };
    let (mut total, mut took_work) = handled(&fleet);
    while (total as usize) < messages && published.elapsed() < Duration::from_secs(120) {
        tokio::time::sleep(Duration::from_millis(500)).await;
        (total, took_work) = handled(&fleet);
    }
    let info = js
        .get_stream("FLEET")
        .await
        .expect("the stream")
        .consumer_info("fleet")
        .await
        .expect("the consumer");
    println!(
        "{n} replicas, max_waiting {} (num_waiting {}): {running} running, {crowded} crowded \
         out after {settled:.1?}; {total} of {messages} handled in {:.1?}; {took_work} replicas \
         took work",
        info.config.max_waiting,
        info.num_waiting,
        published.elapsed()
    );
    println!(
        "{}",
        json!({
            "replicas": n,
            "max_waiting": info.config.max_waiting,
            "running": running,
            "crowded_out": crowded,
            "settled_s": settled.as_secs_f64(),
            "messages": messages,
            "handled": total,
            "replicas_that_took_work": took_work,
        })
    );
    for (_, stop, run) in fleet {
        let _ = stop.send(());
        let _ = run.await;
    }
}
