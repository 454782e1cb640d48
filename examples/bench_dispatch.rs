//! Dispatch benchmark: a raw async-nats pull loop against our queue consumer with a no-op
//! handler, side by side in one run, on one server, over the same messages.
//!
//! ```text
//! cargo run --release --example bench_dispatch -- [--messages 200000] [--reps 3] [--batch 200]
//! ```
//!
//! Every variant consumes the same stream through its own durable pull consumer (explicit
//! ack, deliver all) with the same pull batch and the same expiry, and acks every message.
//! The raw loop is `consumer.stream().max_messages_per_batch(batch).messages()` and
//! `message.ack().await` for each. Ours is `Runtime` with a no-op handler, at concurrency
//! 1, 8 and 64. Rounds alternate the variants; the table shows medians. The last line is
//! one JSON object; `ratio` is ours at concurrency 1 (the default) over raw.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer, stream};
use futures::StreamExt;
use nats_topology::model::{ConsumerDecl, QueueDecl, StreamDecl, StreamRef};
use nats_topology::{HandlerError, Runtime, Topology};
use nats_topology_testkit::NatsServer;

static BENCH: StreamDecl = StreamDecl::new("BENCH_DISPATCH", &["bench.dispatch.>"]);
const SUBJECT: &str = "bench.dispatch.events";

struct Args {
    messages: u64,
    reps: usize,
    batch: usize,
}

fn args() -> Args {
    let mut args = Args {
        messages: 200_000,
        reps: 3,
        batch: 200,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().unwrap_or_default();
        match flag.as_str() {
            "--messages" => args.messages = value.parse().expect("--messages N"),
            "--reps" => args.reps = value.parse().expect("--reps N"),
            "--batch" => args.batch = value.parse().expect("--batch N"),
            other => panic!("unknown flag {other}; expected --messages, --reps, --batch"),
        }
    }
    args
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = args();
    let (url, _server) = match std::env::var("NATS_URL") {
        Ok(url) => (url, None),
        Err(_) => {
            let server = NatsServer::start().await?;
            (server.url(), Some(server))
        }
    };
    let client = async_nats::connect(url.as_str()).await?;
    let js = jetstream::new(client.clone());
    let _ = js.delete_stream(BENCH.name).await;
    js.create_stream(stream::Config {
        name: BENCH.name.into(),
        subjects: vec![BENCH.subjects[0].into()],
        storage: stream::StorageType::Memory,
        ..Default::default()
    })
    .await?;
    publish(&js, args.messages).await?;
    println!(
        "{} messages of {} bytes, pull batch {}, {} rounds",
        args.messages,
        payload(0).len(),
        args.batch,
        args.reps
    );

    let variants: Vec<Option<u32>> = vec![None, Some(1), Some(8), Some(64)];
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); variants.len()];
    let mut run = 0;
    for rep in 0..args.reps {
        for (i, variant) in variants.iter().enumerate() {
            run += 1;
            let durable: &'static str = format!("bench_{run}").leak();
            let elapsed = match variant {
                None => raw(&js, durable, args.messages, args.batch).await?,
                Some(c) => ours(&client, durable, args.messages, args.batch, *c).await?,
            };
            let rate = args.messages as f64 / elapsed.as_secs_f64();
            println!(
                "  round {} {:<24} {:>10.0} msg/s",
                rep + 1,
                label(*variant),
                rate
            );
            rates[i].push(rate);
            js.get_stream(BENCH.name)
                .await?
                .delete_consumer(durable)
                .await?;
        }
    }

    let medians: Vec<f64> = rates.iter().map(|r| median(r.clone())).collect();
    let raw_rate = medians[0];
    println!("\n| variant | median msg/s | ours/raw |\n|---|---:|---:|");
    for (variant, rate) in variants.iter().zip(&medians) {
        println!(
            "| {} | {:.0} | {:.3} |",
            label(*variant),
            rate,
            rate / raw_rate
        );
    }
    let ratio = medians[1] / raw_rate;
    println!(
        "{{\"messages\":{},\"batch\":{},\"reps\":{},\"raw_msgs_per_sec\":{:.0},\"ours_c1_msgs_per_sec\":{:.0},\"ours_c8_msgs_per_sec\":{:.0},\"ours_c64_msgs_per_sec\":{:.0},\"ratio\":{:.3},\"ratio_c8\":{:.3},\"ratio_c64\":{:.3}}}",
        args.messages,
        args.batch,
        args.reps,
        raw_rate,
        medians[1],
        medians[2],
        medians[3],
        ratio,
        medians[2] / raw_rate,
        medians[3] / raw_rate
    );
    Ok(())
}

fn label(variant: Option<u32>) -> String {
    match variant {
        None => "raw async-nats".to_owned(),
        Some(c) => format!("ours, concurrency {c}"),
    }
}

fn payload(id: u64) -> Vec<u8> {
    format!("{{\"id\":{id:08},\"kind\":\"bench\"}}").into_bytes()
}

async fn publish(js: &jetstream::Context, count: u64) -> Result<(), Box<dyn std::error::Error>> {
    let mut pending = Vec::with_capacity(1024);
    for id in 0..count {
        pending.push(js.publish(SUBJECT, payload(id).into()).await?);
        if pending.len() == 1024 {
            for ack in pending.drain(..) {
                ack.await?;
            }
        }
    }
    for ack in pending {
        ack.await?;
    }
    Ok(())
}

/// The raw loop: pull, ack each, until `count` messages; timed from the first message.
async fn raw(
    js: &jetstream::Context,
    durable: &str,
    count: u64,
    batch: usize,
) -> Result<Duration, Box<dyn std::error::Error>> {
    let stream = js.get_stream(BENCH.name).await?;
    let consumer: consumer::PullConsumer = stream
        .create_consumer(consumer::pull::Config {
            durable_name: Some(durable.to_owned()),
            ack_policy: consumer::AckPolicy::Explicit,
            ..Default::default()
        })
        .await?;
    let mut messages = consumer
        .stream()
        .max_messages_per_batch(batch)
        .expires(Duration::from_secs(30))
        .heartbeat(Duration::from_secs(5))
        .messages()
        .await?;
    let mut started = None;
    let mut seen = 0;
    while let Some(message) = messages.next().await {
        let message = message?;
        started.get_or_insert_with(Instant::now);
        message.ack().await.map_err(|e| e.to_string())?;
        seen += 1;
        if seen == count {
            break;
        }
    }
    let elapsed = started.expect("messages arrived").elapsed();
    js.get_stream(BENCH.name).await?; // a round trip: acks are flushed before the next run
    Ok(elapsed)
}

/// Our runtime with a no-op handler: timed from the first handled message to the last ack.
async fn ours(
    client: &async_nats::Client,
    durable: &'static str,
    count: u64,
    batch: usize,
    concurrency: u32,
) -> Result<Duration, Box<dyn std::error::Error>> {
    let first: Arc<std::sync::OnceLock<Instant>> = Arc::default();
    let handled = Arc::new(AtomicU64::new(0));
    let done = Arc::new(tokio::sync::Notify::new());
    let (h_first, h_handled, h_done) = (first.clone(), handled.clone(), done.clone());
    let decl = ConsumerDecl::queue(
        "bench::noop",
        StreamRef::Declared(&BENCH),
        QueueDecl::new(durable),
    )
    .concurrency(concurrency);
    let topology = Topology::new()
        .stream(BENCH)
        .consumer(decl, move |_incoming| {
            h_first.get_or_init(Instant::now);
            if h_handled.fetch_add(1, Ordering::Relaxed) + 1 == count {
                h_done.notify_one();
            }
            Box::pin(async { Ok::<(), HandlerError>(()) })
        });
    let runtime = Runtime::builder(client.clone())
        .topology(topology)
        .pull_batch(batch)
        .build()?;
    let health = runtime.health();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(runtime.run_until(async move {
        let _ = stopped.await;
    }));
    done.notified().await;
    // The last handler has returned; its ack follows at once. Wait for the counter of acked
    // messages so that the time includes every ack.
    while health.consumers()[0].handled < count {
        tokio::task::yield_now().await;
    }
    let elapsed = first.get().expect("messages arrived").elapsed();
    let _ = stop.send(());
    running.await??;
    Ok(elapsed)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(|a, b| a.total_cmp(b));
    values[values.len() / 2]
}
