//! Replay benchmark: rebuilding a read model from a whole stream, our ordered replay
//! (`#[broadcast(ordered)]`) beside async-nats' own ordered pull consumer, side by side in one
//! run, on one server, over the same messages, with a handler that only counts.
//!
//! ```text
//! cargo run --release --example bench_replay -- [--messages 100000] [--reps 5]
//! ```
//!
//! Variants: **raw ordered** is `stream.create_consumer(pull::OrderedConfig { deliver_policy:
//! All, .. })` then `.messages()` (no acks: the loop a user writes for a read model, 500
//! messages per pull); **ours** is a `Runtime` running an ordered replay at the defaults a user
//! gets (explicit acks, every delivery's sequence checked, each message acknowledged);
//! **ours tuned** the same with `pull_batch(500)`, raw's batch. Each is timed from its first
//! message to its last handled (and, for ours, acknowledged) one; rounds alternate the order;
//! the table shows medians. The last line is one JSON object with the medians and the ratios
//! ours over raw.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer, stream};
use futures::StreamExt;
use nats_topology::model::{BroadcastDecl, ConsumerDecl, StreamDecl, StreamRef};
use nats_topology::{HandlerError, Runtime, Topology};
use nats_topology_testkit::NatsServer;

static LEDGER: StreamDecl = StreamDecl::new("BENCH_REPLAY", &["bench.replay.>"]);
const SUBJECT: &str = "bench.replay.entries";
const VARIANTS: [&str; 3] = ["raw ordered", "ours", "ours tuned (pull_batch 500)"];

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let (mut messages, mut reps) = (100_000u64, 5usize);
    let mut argv = std::env::args().skip(1);
    while let Some(flag) = argv.next() {
        let value = argv.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--messages" => messages = value.parse()?,
            "--reps" => reps = value.parse()?,
            other => return Err(format!("unknown flag {other} (--messages N, --reps N)").into()),
        }
    }
    let server = NatsServer::start().await?;
    let client = async_nats::connect(server.url()).await?;
    let js = jetstream::new(client.clone());
    js.create_stream(stream::Config {
        name: LEDGER.name.into(),
        subjects: vec![LEDGER.subjects[0].into()],
        storage: stream::StorageType::Memory,
        ..Default::default()
    })
    .await?;
    fill(&js, messages).await?;
    println!("replaying {messages} messages, {reps} rounds");
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); VARIANTS.len()];
    for round in 0..reps {
        let mut order: Vec<usize> = (0..VARIANTS.len()).collect();
        order.rotate_left(round % VARIANTS.len());
        for variant in order {
            let took = match variant {
                0 => raw(&js, messages).await?,
                1 => ours(&client, messages, None).await?,
                _ => ours(&client, messages, Some(500)).await?,
            };
            rates[variant].push(messages as f64 / took.as_secs_f64());
        }
    }
    let medians: Vec<f64> = rates.iter_mut().map(|r| median(r)).collect();
    println!("| variant | median msg/s | over raw |");
    println!("|---|---:|---:|");
    for (name, rate) in VARIANTS.iter().zip(&medians) {
        println!("| {name} | {rate:.0} | {:.3} |", rate / medians[0]);
    }
    println!(
        "{}",
        serde_json::json!({
            "messages": messages,
            "reps": reps,
            "raw_ordered_msgs_per_sec": medians[0].round(),
            "ours_msgs_per_sec": medians[1].round(),
            "ours_tuned_msgs_per_sec": medians[2].round(),
            "ratio": medians[1] / medians[0],
            "ratio_tuned": medians[2] / medians[0],
        })
    );
    Ok(())
}

/// Publishes `count` small entries.
async fn fill(js: &jetstream::Context, count: u64) -> Result<(), BoxError> {
    let entries = (0..count).map(|n| format!("{{\"n\":{n}}}").into_bytes());
    nats_topology_testkit::publish_all(js, SUBJECT, entries).await
}

/// async-nats' ordered pull consumer over the whole stream, until `count` messages.
async fn raw(js: &jetstream::Context, count: u64) -> Result<Duration, BoxError> {
    let stream = js.get_stream(LEDGER.name).await?;
    let consumer = stream
        .create_consumer(consumer::pull::OrderedConfig {
            filter_subject: SUBJECT.into(),
            deliver_policy: consumer::DeliverPolicy::All,
            ..Default::default()
        })
        .await?;
    let mut messages = consumer.messages().await?;
    let mut first = None;
    let mut seen = 0;
    while seen < count {
        let message = messages.next().await.ok_or("the ordered stream ended")??;
        first.get_or_insert_with(Instant::now);
        std::hint::black_box(&message.payload);
        seen += 1;
    }
    Ok(first.expect("messages arrived").elapsed())
}

/// Our ordered replay over the whole stream, until `count` messages are handled and
/// acknowledged; `pull_batch` as given, or the runtime's default.
async fn ours(
    client: &async_nats::Client,
    count: u64,
    pull_batch: Option<usize>,
) -> Result<Duration, BoxError> {
    let first = Arc::new(std::sync::OnceLock::<Instant>::new());
    let handled = Arc::new(AtomicU64::new(0));
    let decl = ConsumerDecl::broadcast(
        "bench::balances",
        StreamRef::Declared(&LEDGER),
        BroadcastDecl::new().ordered(),
    )
    .subjects(&[SUBJECT]);
    let (first_seen, counter) = (first.clone(), handled.clone());
    let topology = Topology::new()
        .stream(LEDGER)
        .consumer(decl, move |incoming| {
            first_seen.get_or_init(Instant::now);
            std::hint::black_box(incoming.payload());
            counter.fetch_add(1, Ordering::Relaxed);
            Box::pin(async { Ok::<(), HandlerError>(()) })
        });
    let mut builder = Runtime::builder(client.clone()).topology(topology);
    if let Some(batch) = pull_batch {
        builder = builder.pull_batch(batch);
    }
    let runtime = builder.build()?;
    let health = runtime.health();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(runtime.run_until(async move {
        let _ = stopped.await;
    }));
    // The handled count of health rises once each ack is sent.
    while health.consumers()[0].handled < count {
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
    let took = first.get().expect("messages arrived").elapsed();
    let _ = stop.send(());
    running.await??;
    assert_eq!(handled.load(Ordering::Relaxed), count, "each message once");
    Ok(took)
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}
