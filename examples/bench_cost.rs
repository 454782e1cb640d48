//! What a message costs, counted rather than timed: instructions (valgrind's callgrind) and
//! heap allocations (a counting allocator) per message, ours beside raw async-nats, for the
//! same messages on the same server. Counts do not depend on the neighbours, so a change that
//! adds cost shows even on a noisy machine.
//!
//! ```text
//! cargo run --release --example bench_cost -- [--messages 2000]
//!     [--check benches/cost-baseline.json] [--write benches/cost-baseline.json]
//! ```
//!
//! Each variant runs in a child process of its own under `valgrind --tool=callgrind` (the
//! server runs natively), twice: over `--messages` and over twice as many. The difference
//! between the two, divided by the extra messages, is the cost of a message alone: start-up,
//! provisioning and shutdown cancel out. The child runs one thread (a current-thread Tokio
//! runtime), so the counts do not depend on how work is spread over threads. Variants:
//!
//! - **raw**: `consumer.messages()` of async-nats (its default batch), decoding each payload
//!   into a typed struct with serde_json, then `message.ack()`;
//! - **ours**: a queue consumer at the defaults, its handler taking the same typed payload;
//! - **raw double-ack** and **ours confirmed**: the same, with `message.double_ack()` and
//!   `ack = "confirmed"`.
//!
//! To see where one variant's allocations go: `--fill --url U --messages N` fills the stream
//! of a server of your own, then `valgrind --tool=dhat <this binary> --child ours --url U
//! --messages N`.
//!
//! `--check FILE` compares the counts with a baseline and fails when one rose more than 3%
//! above it (the confirmed pair is reported, not checked: how often a confirmation is waited
//! for depends on timing); `--write FILE` writes the baseline. `.ci/run` checks the build the
//! tests use (`cargo run --example bench_cost -- --check .ci/cost-baseline.json`): its counts
//! are not the release build's, which docs/PERFORMANCE.md reports. The last line is one JSON
//! object.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::StreamExt;
use nats_topology::model::{AckMode, ConsumerDecl, QueueDecl, StreamDecl, StreamRef};
use nats_topology::{HandlerError, Runtime, Topology};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Counts every allocation of the process (and the bytes asked for).
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
static ALLOCATED: AtomicU64 = AtomicU64::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        ALLOCATED.fetch_add(layout.size() as u64, Ordering::Relaxed);
        // SAFETY: the layout is the caller's, passed on unchanged.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        ALLOCATED.fetch_add(new_size as u64, Ordering::Relaxed);
        // SAFETY: as for `dealloc`, and `new_size` is the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

static COST: StreamDecl = StreamDecl::new("COST", &["cost.>"]);

/// The payload: a typed order, as a service would receive it.
#[derive(Serialize, Deserialize)]
struct Order {
    id: u64,
    customer: String,
    amount_cents: u64,
    lines: Vec<String>,
}

const VARIANTS: [(&str, &str); 4] = [
    ("raw", "ours"),
    ("ours", "ours"),
    ("raw double-ack", "ours confirmed"),
    ("ours confirmed", "ours confirmed"),
];

/// How far a count may rise above the baseline before `--check` fails.
const TOLERANCE: f64 = 0.03;

/// The variants `--check` reports without checking: their counts depend on timing (how often
/// a confirmation is waited for, retried).
const UNCHECKED: [&str; 2] = ["raw double-ack", "ours confirmed"];

fn arg(name: &str) -> Option<String> {
    std::env::args().skip_while(|a| a != name).nth(1)
}

fn main() -> Result<(), BoxError> {
    // For profiling one variant by hand (`valgrind --tool=dhat .. --child ours ..`): fill the
    // stream of the server at `--url` with `--messages` orders first.
    if std::env::args().any(|a| a == "--fill") {
        let url = arg("--url").ok_or("--fill needs --url")?;
        let n: u64 = arg("--messages")
            .ok_or("--fill needs --messages")?
            .parse()?;
        let runtime = tokio::runtime::Runtime::new()?;
        return runtime.block_on(async {
            let js = async_nats::jetstream::new(async_nats::connect(url).await?);
            fill(&js, n).await
        });
    }
    if let Some(variant) = arg("--child") {
        let url = arg("--url").ok_or("--child needs --url")?;
        let n: u64 = arg("--messages")
            .ok_or("--child needs --messages")?
            .parse()?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        runtime.block_on(child(&variant, &url, n))?;
        // Read by the parent: the whole process's allocations.
        println!(
            "COUNTS {} {}",
            ALLOCATIONS.load(Ordering::Relaxed),
            ALLOCATED.load(Ordering::Relaxed)
        );
        return Ok(());
    }
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(parent())
}

/// Per message, for one variant.
#[derive(Debug, Clone, Copy)]
struct Cost {
    instructions: f64,
    allocations: f64,
    bytes: f64,
}

async fn parent() -> Result<(), BoxError> {
    let n: u64 = arg("--messages").map_or(Ok(2_000), |v| v.parse())?;
    if std::process::Command::new("valgrind")
        .arg("--version")
        .output()
        .is_err()
    {
        return Err(
            "valgrind is not installed: `apt-get install valgrind` (Debian), then run \
                    this again"
                .into(),
        );
    }
    let server = nats_topology_testkit::NatsServer::start().await?;
    let client = async_nats::connect(server.url()).await?;
    let js = async_nats::jetstream::new(client);
    let exe = std::env::current_exe()?;
    let out = std::env::temp_dir().join(format!("bench-cost-{}", std::process::id()));
    std::fs::create_dir_all(&out)?;

    let mut costs = Vec::new();
    for (variant, _) in VARIANTS {
        let mut runs = Vec::new();
        for count in [n, 2 * n] {
            fill(&js, count).await?;
            let file = out.join(format!("{}-{count}.out", variant.replace(' ', "-")));
            let output = tokio::process::Command::new("valgrind")
                .arg("--tool=callgrind")
                .arg(format!("--callgrind-out-file={}", file.display()))
                .arg(&exe)
                .args(["--child", variant, "--url", &server.url()])
                .args(["--messages", &count.to_string()])
                .output()
                .await?;
            if !output.status.success() {
                return Err(format!(
                    "{variant} over {count} messages failed: {}",
                    String::from_utf8_lossy(&output.stderr)
                )
                .into());
            }
            let stdout = String::from_utf8_lossy(&output.stdout);
            let counts: Vec<u64> = stdout
                .lines()
                .find_map(|l| l.strip_prefix("COUNTS "))
                .ok_or("the child printed no counts")?
                .split(' ')
                .map(str::parse)
                .collect::<Result<_, _>>()?;
            runs.push((instructions(&file)?, counts[0], counts[1]));
        }
        let extra = n as f64;
        let per = |a: u64, b: u64| (b as f64 - a as f64) / extra;
        costs.push((
            variant,
            Cost {
                instructions: per(runs[0].0, runs[1].0),
                allocations: per(runs[0].1, runs[1].1),
                bytes: per(runs[0].2, runs[1].2),
            },
        ));
    }
    let _ = std::fs::remove_dir_all(&out);

    println!(
        "{:<16} {:>14} {:>14} {:>12}",
        "per message", "instructions", "allocations", "bytes"
    );
    for (variant, cost) in &costs {
        println!(
            "{variant:<16} {:>14.0} {:>14.2} {:>12.0}",
            cost.instructions, cost.allocations, cost.bytes
        );
    }
    let of = |name: &str| costs.iter().find(|(v, _)| *v == name).map(|(_, c)| *c);
    let mut pairs = serde_json::Map::new();
    for (raw, ours) in [("raw", "ours"), ("raw double-ack", "ours confirmed")] {
        let (Some(r), Some(o)) = (of(raw), of(ours)) else {
            continue;
        };
        println!(
            "{ours} / {raw}: instructions {:.2}x, allocations {:+.2}",
            o.instructions / r.instructions,
            o.allocations - r.allocations
        );
        pairs.insert(
            ours.replace(' ', "_"),
            json!({
                "instructions_ratio": o.instructions / r.instructions,
                "allocations_over_raw": o.allocations - r.allocations,
            }),
        );
    }
    let counts: serde_json::Map<String, Value> = costs
        .iter()
        .map(|(variant, c)| {
            (
                variant.replace(' ', "_"),
                json!({
                    "instructions": c.instructions.round(),
                    "allocations": (c.allocations * 100.0).round() / 100.0,
                    "bytes": c.bytes.round(),
                }),
            )
        })
        .collect();
    let counts = Value::Object(counts);
    if let Some(path) = arg("--write") {
        std::fs::write(&path, serde_json::to_string_pretty(&counts)? + "\n")?;
        println!("wrote {path}");
    }
    let mut failed = Vec::new();
    if let Some(path) = arg("--check") {
        let baseline: Value = serde_json::from_str(&std::fs::read_to_string(&path)?)?;
        for (variant, now) in counts.as_object().into_iter().flatten() {
            // Reported, not checked: how often a confirmation is retried depends on timing.
            if UNCHECKED
                .iter()
                .any(|u| variant.as_str() == u.replace(' ', "_"))
            {
                continue;
            }
            for key in ["instructions", "allocations"] {
                let (Some(was), Some(is)) = (baseline[variant][key].as_f64(), now[key].as_f64())
                else {
                    continue;
                };
                if is > was * (1.0 + TOLERANCE) + 0.01 {
                    failed.push(format!(
                        "{variant}: {key} per message rose from {was} to {is} (more than 3%)"
                    ));
                }
            }
        }
        if failed.is_empty() {
            println!("every count within 3% of {path}");
        }
    }
    println!(
        "{}",
        json!({ "messages": n, "per_message": counts, "pairs": Value::Object(pairs) })
    );
    if !failed.is_empty() {
        return Err(format!(
            "{}; if the rise is deliberate, run with `--write {}` and commit the baseline",
            failed.join("; "),
            arg("--check").unwrap_or_default()
        )
        .into());
    }
    Ok(())
}

/// Creates the stream afresh with `count` orders in it.
async fn fill(js: &async_nats::jetstream::Context, count: u64) -> Result<(), BoxError> {
    let _ = js.delete_stream(COST.name).await;
    js.create_stream(async_nats::jetstream::stream::Config {
        name: COST.name.to_owned(),
        subjects: vec!["cost.>".to_owned()],
        ..Default::default()
    })
    .await?;
    let mut acks = Vec::new();
    for id in 0..count {
        let order = Order {
            id,
            customer: format!("customer-{}", id % 97),
            amount_cents: 1_250 + id,
            lines: vec!["sku-1".to_owned(), "sku-2".to_owned()],
        };
        acks.push(
            js.publish("cost.orders", serde_json::to_vec(&order)?.into())
                .await?,
        );
    }
    for ack in acks {
        ack.await?;
    }
    Ok(())
}

/// The total instructions callgrind counted (its `summary:` line).
fn instructions(file: &std::path::Path) -> Result<u64, BoxError> {
    let text = std::fs::read_to_string(file)?;
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("summary: ").or(l.strip_prefix("totals: ")))
        .ok_or("no summary in callgrind's output")?;
    Ok(line.split_whitespace().next().unwrap_or("0").parse()?)
}

/// Consumes `n` orders from `COST` as `variant` does, then returns.
async fn child(variant: &str, url: &str, n: u64) -> Result<(), BoxError> {
    let client = async_nats::connect(url).await?;
    match variant {
        "raw" | "raw double-ack" => raw(&client, n, variant == "raw double-ack").await,
        "ours" | "ours confirmed" => {
            let ack = if variant == "ours" {
                AckMode::FireAndForget
            } else {
                AckMode::Confirmed
            };
            ours(client, n, ack).await
        }
        other => Err(format!("no variant {other:?}").into()),
    }
}

async fn raw(client: &async_nats::Client, n: u64, double_ack: bool) -> Result<(), BoxError> {
    let js = async_nats::jetstream::new(client.clone());
    let consumer: async_nats::jetstream::consumer::PullConsumer = js
        .get_stream(COST.name)
        .await?
        .create_consumer(async_nats::jetstream::consumer::pull::Config {
            durable_name: Some("raw".to_owned()),
            ack_policy: async_nats::jetstream::consumer::AckPolicy::Explicit,
            ..Default::default()
        })
        .await?;
    let mut messages = consumer.messages().await?.take(usize::try_from(n)?);
    let mut total = 0u64;
    while let Some(message) = messages.next().await {
        let message = message?;
        let order: Order = serde_json::from_slice(&message.payload)?;
        total = total.wrapping_add(order.amount_cents);
        if double_ack {
            message.double_ack().await?;
        } else {
            message.ack().await?;
        }
    }
    std::hint::black_box(total);
    // The acks are flushed before the process ends.
    client.flush().await?;
    Ok(())
}

async fn ours(client: async_nats::Client, n: u64, ack: AckMode) -> Result<(), BoxError> {
    let handled = std::sync::Arc::new(AtomicU64::new(0));
    let done = std::sync::Arc::new(tokio::sync::Notify::new());
    let (count, finished) = (handled.clone(), done.clone());
    let decl = ConsumerDecl::queue(
        "bench::order",
        StreamRef::Declared(&COST),
        QueueDecl::new("ours"),
    );
    let topology = Topology::new()
        .stream(COST)
        .consumer(decl, move |incoming| {
            let (count, finished) = (count.clone(), finished.clone());
            Box::pin(async move {
                let order: Order = serde_json::from_slice(incoming.payload())
                    .map_err(|e| HandlerError::permanent(e.to_string()))?;
                std::hint::black_box(order.amount_cents);
                if count.fetch_add(1, Ordering::Relaxed) + 1 == n {
                    finished.notify_one();
                }
                Ok::<(), HandlerError>(())
            })
        });
    let runtime = Runtime::builder(client)
        .topology(topology)
        .ack(ack)
        .build()?;
    let health = runtime.health();
    let stop = async move {
        done.notified().await;
        // The last ack follows the last handler: wait until health counts it.
        while health.consumers()[0].handled < n {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    };
    runtime.run_until(stop).await?;
    Ok(())
}
