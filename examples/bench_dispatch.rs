//! Dispatch benchmark: raw async-nats pull loops against our queue consumer, side by side in
//! one run, on one server, over the same messages, with a no-op handler and with a handler
//! that waits (an awaited sleep standing for I/O).
//!
//! ```text
//! cargo run --release --features tower --example bench_dispatch -- [--messages 200000] [--wait-messages 5000]
//!     [--work-us 1000] [--reps 3] [--batch 200] [--recorder none|prometheus]
//!     [--pull-ahead-ms N]
//! ```
//!
//! `--pull-ahead-ms` sets `RuntimeBuilder::pull_ahead` on every variant of ours (the default
//! is the runtime's; `0` fetches only what can start at once).
//!
//! Every variant consumes the same stream through its own durable pull consumer (explicit
//! ack, deliver all) with the same expiry, and acks every message. The raw loops pull in
//! batches of `--batch`; **ours C** runs at the defaults a user gets (no `pull_batch`), and
//! **ours tuned C** beside it with `pull_batch(--batch)`, the raw loops' batch.
//! Two phases, each round running every variant of both:
//!
//! - **no-op** (`--messages`): the handler does nothing;
//! - **wait** (`--wait-messages`, skipped with `--work-us 0`): the handler awaits a
//!   `--work-us` sleep. The sequential variants (raw sequential, ours at concurrency 1) take a
//!   tenth of the messages there, since they handle one message per sleep.
//!
//! Variants: **raw sequential** is `consumer.stream().max_messages_per_batch(batch).messages()`
//! and, for each message, the work then `message.ack().await`; **raw concurrent C** is the same
//! stream with `for_each_concurrent(C)` (the loop a user writes in ten lines); **ours C** is
//! `Runtime` at concurrency C (1, 8, 64), at the defaults; **ours tuned C** the same with
//! `pull_batch` set to the raw loops' batch (8, 64). **raw double-ack C** and **ours confirmed C** are the
//! same with confirmed acks: the raw loops call `message.double_ack().await` instead of `ack()`,
//! ours runs with `ack = "confirmed"` (`RuntimeBuilder::ack(AckMode::Confirmed)`), so that the
//! ratio compares a confirmed ack with a confirmed ack. The raw loops go on past the stream's non-fatal errors
//! (missed heartbeats, a failed pull request) and count them. Rounds alternate the variants;
//! the tables show medians. The last line is one JSON object: `ratio` is ours at concurrency
//! 1 over raw sequential (no-op); `ratio_c8_noop`, `ratio_c64_noop` are ours at 8 and 64 over
//! raw sequential (no-op); `ratio_c8_wait`, `ratio_c64_wait` ours at 8 and 64 over raw
//! concurrent at the same C (wait); `ratio_tuned_*` the same for ours tuned. The confirmed variants add `raw_double_*` and
//! `ours_confirmed_*` rates, `ratio_confirmed_*` (ours confirmed over raw double-ack: sequential
//! for no-op, the same C for wait) and `confirmed_cost_*` (ours confirmed over ours
//! fire-and-forget at the same C: what confirmation costs). **ours + timeout layer C** (1,
//! 64) is ours at the defaults with a `tower::timeout::TimeoutLayer` of 10 s around the
//! handler (`RuntimeBuilder::layer`; the example needs the `tower` feature), compared with the
//! same raw loop as ours: `ratio_timeout_c{1,64}_{noop,wait}`.
//!
//! With `--work-us` set, a last table compares a **batch handler** (`batch = 50`, one
//! `--work-us` wait per batch: a bulk insert), at its default concurrency (one batch at a time)
//! and at 100 (two at once), with the **per-message** handler at concurrency 50 (one wait per
//! message) and raw concurrent 50, over `--wait-messages` messages; the JSON adds
//! `ours_batch50_msgs_per_sec`, `ours_batch50_c100_msgs_per_sec`, `ours_c50_wait_msgs_per_sec`,
//! `raw_c50_wait_msgs_per_sec`, `ratio_batch50_over_c50` and `ratio_batch50_c100_over_c50`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer, stream};
use futures::{StreamExt, TryStreamExt};
use nats_topology::model::{AckMode, BatchDecl, ConsumerDecl, QueueDecl, StreamDecl, StreamRef};
use nats_topology::{HandlerError, Runtime, Topology};
use nats_topology_testkit::NatsServer;

static BENCH: StreamDecl = StreamDecl::new("BENCH_DISPATCH", &["bench.dispatch.>"]);
const SUBJECT: &str = "bench.dispatch.events";

type BoxError = Box<dyn std::error::Error + Send + Sync>;

struct Args {
    messages: u64,
    wait_messages: u64,
    work_us: u64,
    reps: usize,
    batch: usize,
    /// `prometheus`: our metrics recorded by `metrics-exporter-prometheus` (the cost of metrics).
    recorder: String,
    /// `RuntimeBuilder::pull_ahead` for ours, if set.
    pull_ahead: Option<Duration>,
}

fn args() -> Args {
    let mut args = Args {
        messages: 200_000,
        wait_messages: 5_000,
        work_us: 1_000,
        reps: 3,
        batch: 200,
        recorder: "none".to_owned(),
        pull_ahead: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().unwrap_or_default();
        match flag.as_str() {
            "--messages" => args.messages = value.parse().expect("--messages N"),
            "--wait-messages" => args.wait_messages = value.parse().expect("--wait-messages N"),
            "--work-us" => args.work_us = value.parse().expect("--work-us N"),
            "--reps" => args.reps = value.parse().expect("--reps N"),
            "--batch" => args.batch = value.parse().expect("--batch N"),
            "--recorder" => args.recorder = value,
            "--pull-ahead-ms" => {
                args.pull_ahead = Some(Duration::from_millis(
                    value.parse().expect("--pull-ahead-ms N"),
                ))
            }
            other => panic!(
                "unknown flag {other}; expected --messages, --wait-messages, --work-us, --reps, --batch, --recorder, --pull-ahead-ms"
            ),
        }
    }
    args
}

#[derive(Clone, Copy, PartialEq)]
enum Variant {
    /// The raw loop; `1` is the plain sequential loop, more is `for_each_concurrent`.
    Raw(usize),
    /// Our runtime at this concurrency, at the defaults (no `pull_batch`).
    Ours(u32),
    /// Our runtime at this concurrency with `pull_batch` set to the raw loops' batch.
    OursTuned(u32),
    /// The raw loop acknowledging with `double_ack()` (confirmed by the server).
    RawDouble(usize),
    /// Our runtime with confirmed acks.
    OursConfirmed(u32),
    /// Our runtime at the defaults with a `tower` timeout layer around the handler.
    OursTimeout(u32),
}

const VARIANTS: [Variant; 16] = [
    Variant::Raw(1),
    Variant::Raw(8),
    Variant::Raw(64),
    Variant::Ours(1),
    Variant::Ours(8),
    Variant::Ours(64),
    Variant::OursTuned(8),
    Variant::OursTuned(64),
    Variant::RawDouble(1),
    Variant::RawDouble(8),
    Variant::RawDouble(64),
    Variant::OursConfirmed(1),
    Variant::OursConfirmed(8),
    Variant::OursConfirmed(64),
    Variant::OursTimeout(1),
    Variant::OursTimeout(64),
];

impl Variant {
    fn label(self) -> String {
        match self {
            Variant::Raw(1) => "raw sequential".to_owned(),
            Variant::Raw(c) => format!("raw concurrent {c}"),
            Variant::Ours(c) => format!("ours, concurrency {c}"),
            Variant::OursTuned(c) => format!("ours tuned, concurrency {c}"),
            Variant::RawDouble(1) => "raw double-ack sequential".to_owned(),
            Variant::RawDouble(c) => format!("raw double-ack concurrent {c}"),
            Variant::OursConfirmed(c) => format!("ours confirmed, concurrency {c}"),
            Variant::OursTimeout(c) => format!("ours + timeout layer, concurrency {c}"),
        }
    }

    fn sequential(self) -> bool {
        matches!(
            self,
            Variant::Raw(1)
                | Variant::Ours(1)
                | Variant::RawDouble(1)
                | Variant::OursConfirmed(1)
                | Variant::OursTimeout(1)
        )
    }

    /// The raw loop it is compared with: raw sequential with a no-op handler (what it costs
    /// per message), raw concurrent at the same concurrency when handlers wait.
    /// The confirmed variants are compared with the raw double-ack loop in the same way.
    fn reference(self, waits: bool) -> Variant {
        match self {
            Variant::Ours(c) | Variant::OursTuned(c) | Variant::OursTimeout(c) if waits => {
                Variant::Raw(c as usize)
            }
            Variant::OursConfirmed(c) if waits => Variant::RawDouble(c as usize),
            Variant::RawDouble(_) | Variant::OursConfirmed(_) => Variant::RawDouble(1),
            _ => Variant::Raw(1),
        }
    }
}

struct Phase {
    name: &'static str,
    work: Duration,
    messages: u64,
}

impl Phase {
    fn count(&self, variant: Variant) -> u64 {
        if self.work.is_zero() || !variant.sequential() {
            self.messages
        } else {
            (self.messages / 10).max(100)
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args = args();
    if args.recorder == "prometheus" {
        let handle = metrics_exporter_prometheus::PrometheusBuilder::new().install_recorder()?;
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(5)).await;
                handle.run_upkeep();
            }
        });
    }
    println!(
        "metrics recorder: {}; ours' pull_ahead: {}",
        args.recorder,
        args.pull_ahead
            .map_or("the default".to_owned(), |d| format!("{d:?}"))
    );
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
    let mut phases = vec![Phase {
        name: "no-op",
        work: Duration::ZERO,
        messages: args.messages,
    }];
    if args.work_us > 0 {
        phases.push(Phase {
            name: "wait",
            work: Duration::from_micros(args.work_us),
            messages: args.wait_messages,
        });
    }
    let stored = phases.iter().map(|p| p.messages).max().unwrap_or(0);
    publish(&js, stored).await?;
    println!(
        "{stored} messages of {} bytes, raw and tuned pull batch {} (ours at the defaults: none), {} rounds; no-op: {} messages; wait: {} messages (sequential variants {}), handler awaits {} us",
        payload(0).len(),
        args.batch,
        args.reps,
        args.messages,
        args.wait_messages,
        (args.wait_messages / 10).max(100),
        args.work_us
    );

    // rates[phase][variant]
    let mut rates: Vec<Vec<Vec<f64>>> = vec![vec![Vec::new(); VARIANTS.len()]; phases.len()];
    let mut run = 0;
    for rep in 0..args.reps {
        for (p, phase) in phases.iter().enumerate() {
            for (i, variant) in VARIANTS.iter().enumerate() {
                run += 1;
                let durable: &'static str = format!("bench_{run}").leak();
                let count = phase.count(*variant);
                let (elapsed, errors) = match *variant {
                    Variant::Raw(c) => {
                        raw(&js, durable, count, args.batch, c, phase.work, false).await?
                    }
                    Variant::RawDouble(c) => {
                        raw(&js, durable, count, args.batch, c, phase.work, true).await?
                    }
                    Variant::Ours(c)
                    | Variant::OursTuned(c)
                    | Variant::OursConfirmed(c)
                    | Variant::OursTimeout(c) => {
                        let ack = match variant {
                            Variant::OursConfirmed(_) => AckMode::Confirmed,
                            _ => AckMode::FireAndForget,
                        };
                        let batch = matches!(variant, Variant::OursTuned(_)).then_some(args.batch);
                        let tuning = Tuning {
                            batch,
                            ahead: args.pull_ahead,
                            timeout_layer: matches!(variant, Variant::OursTimeout(_)),
                        };
                        let elapsed =
                            ours(&client, durable, count, tuning, c, phase.work, ack).await?;
                        (elapsed, 0)
                    }
                };
                let rate = count as f64 / elapsed.as_secs_f64();
                let note = if errors > 0 {
                    format!("  ({errors} stream errors passed over)")
                } else {
                    String::new()
                };
                println!(
                    "  round {} {:<6} {:<24} {:>10.0} msg/s{note}",
                    rep + 1,
                    phase.name,
                    variant.label(),
                    rate
                );
                rates[p][i].push(rate);
                js.get_stream(BENCH.name)
                    .await?
                    .delete_consumer(durable)
                    .await?;
            }
        }
    }

    // Batch 50 against one message per handler call at concurrency 50, the same wait each call.
    let mut batch_rates: [Vec<f64>; 4] = Default::default();
    if args.work_us > 0 {
        let work_for = Duration::from_micros(args.work_us);
        let count = args.wait_messages;
        for rep in 0..args.reps {
            for (i, label) in BATCH_VARIANTS.iter().enumerate() {
                run += 1;
                let durable: &'static str = format!("bench_{run}").leak();
                let (elapsed, _) = match i {
                    0 => raw(&js, durable, count, args.batch, BATCH, work_for, false).await?,
                    1 => {
                        let tuning = Tuning {
                            batch: None,
                            ahead: args.pull_ahead,
                            timeout_layer: false,
                        };
                        let c = BATCH as u32;
                        let ack = AckMode::FireAndForget;
                        (
                            ours(&client, durable, count, tuning, c, work_for, ack).await?,
                            0,
                        )
                    }
                    // Concurrency 100: two batches at once, one filling while the other runs.
                    _ => {
                        let c = (i as u32 - 1) * BATCH as u32;
                        let ahead = args.pull_ahead;
                        (
                            ours_batch(&client, durable, count, c, work_for, ahead).await?,
                            0,
                        )
                    }
                };
                let rate = count as f64 / elapsed.as_secs_f64();
                println!("  round {} batch  {label:<24} {rate:>10.0} msg/s", rep + 1);
                batch_rates[i].push(rate);
                js.get_stream(BENCH.name)
                    .await?
                    .delete_consumer(durable)
                    .await?;
            }
        }
    }
    let batch_medians: Vec<f64> = batch_rates
        .iter()
        .map(|r| {
            if r.is_empty() {
                f64::NAN
            } else {
                median(r.clone())
            }
        })
        .collect();

    let medians: Vec<Vec<f64>> = rates
        .iter()
        .map(|phase| phase.iter().map(|r| median(r.clone())).collect())
        .collect();
    let rate = |phase: usize, variant: Variant| {
        medians
            .get(phase)
            .and_then(|m| VARIANTS.iter().position(|v| *v == variant).map(|i| m[i]))
            .unwrap_or(f64::NAN)
    };
    for (p, phase) in phases.iter().enumerate() {
        let waits = !phase.work.is_zero();
        println!(
            "\n{} ({} us):\n| variant | median msg/s | over raw sequential | over its reference |\n|---|---:|---:|---:|",
            phase.name,
            phase.work.as_micros()
        );
        for variant in VARIANTS {
            let r = rate(p, variant);
            let reference = variant.reference(waits);
            println!(
                "| {} | {:.0} | {:.3} | {:.3} ({}) |",
                variant.label(),
                r,
                r / rate(p, Variant::Raw(1)),
                r / rate(p, reference),
                reference.label()
            );
        }
    }
    if args.work_us > 0 {
        println!(
            "\nbatch ({} us per handler call, {} messages):\n| variant | median msg/s | over ours per message |\n|---|---:|---:|",
            args.work_us, args.wait_messages
        );
        for (label, r) in BATCH_VARIANTS.iter().zip(&batch_medians) {
            println!("| {label} | {r:.0} | {:.3} |", r / batch_medians[1]);
        }
    }
    let (noop, wait) = (0, 1);
    let ratio = |p: usize, c: u32, waits: bool| {
        let ours = Variant::Ours(c);
        rate(p, ours) / rate(p, ours.reference(waits))
    };
    let confirmed_ratio = |p: usize, c: u32, waits: bool| {
        let ours = Variant::OursConfirmed(c);
        rate(p, ours) / rate(p, ours.reference(waits))
    };
    // ours_tuned_c{C}[_wait]_msgs_per_sec and ratio_tuned_c{C}_{noop|wait}.
    let mut tuned = Vec::new();
    for (p, phase) in [(noop, ""), (wait, "_wait")] {
        for c in [8, 64] {
            let r = rate(p, Variant::OursTuned(c));
            tuned.push(format!("\"ours_tuned_c{c}{phase}_msgs_per_sec\":{r:.0}"));
        }
    }
    for (p, phase, waits) in [(noop, "noop", false), (wait, "wait", true)] {
        for c in [8, 64] {
            let ours = Variant::OursTuned(c);
            let r = rate(p, ours) / rate(p, ours.reference(waits));
            tuned.push(format!("\"ratio_tuned_c{c}_{phase}\":{r:.3}"));
        }
    }
    // ratio_timeout_c{C}_{noop|wait}: ours with a tower timeout layer, against the same raw
    // loop as ours at the defaults.
    for (p, phase, waits) in [(noop, "noop", false), (wait, "wait", true)] {
        for c in [1, 64] {
            let ours = Variant::OursTimeout(c);
            let r = rate(p, ours) / rate(p, ours.reference(waits));
            tuned.push(format!("\"ratio_timeout_c{c}_{phase}\":{r:.3}"));
        }
    }
    let cost = |p: usize, c: u32| rate(p, Variant::OursConfirmed(c)) / rate(p, Variant::Ours(c));
    let json = format!(
        "{{\"messages\":{},\"wait_messages\":{},\"work_us\":{},\"batch\":{},\"reps\":{},\"raw_msgs_per_sec\":{:.0},\"raw_c8_msgs_per_sec\":{:.0},\"raw_c64_msgs_per_sec\":{:.0},\"ours_c1_msgs_per_sec\":{:.0},\"ours_c8_msgs_per_sec\":{:.0},\"ours_c64_msgs_per_sec\":{:.0},\"raw_wait_msgs_per_sec\":{:.0},\"raw_c8_wait_msgs_per_sec\":{:.0},\"raw_c64_wait_msgs_per_sec\":{:.0},\"ours_c1_wait_msgs_per_sec\":{:.0},\"ours_c8_wait_msgs_per_sec\":{:.0},\"ours_c64_wait_msgs_per_sec\":{:.0},\"ratio\":{:.3},\"ratio_c8_noop\":{:.3},\"ratio_c64_noop\":{:.3},\"ratio_c8_wait\":{:.3},\"ratio_c64_wait\":{:.3},{}}}",
        args.messages,
        args.wait_messages,
        args.work_us,
        args.batch,
        args.reps,
        rate(noop, Variant::Raw(1)),
        rate(noop, Variant::Raw(8)),
        rate(noop, Variant::Raw(64)),
        rate(noop, Variant::Ours(1)),
        rate(noop, Variant::Ours(8)),
        rate(noop, Variant::Ours(64)),
        rate(wait, Variant::Raw(1)),
        rate(wait, Variant::Raw(8)),
        rate(wait, Variant::Raw(64)),
        rate(wait, Variant::Ours(1)),
        rate(wait, Variant::Ours(8)),
        rate(wait, Variant::Ours(64)),
        ratio(noop, 1, false),
        ratio(noop, 8, false),
        ratio(noop, 64, false),
        ratio(wait, 8, true),
        ratio(wait, 64, true),
        tuned.join(","),
    );
    let confirmed = format!(
        "{{\"raw_double_msgs_per_sec\":{:.0},\"raw_double_c8_msgs_per_sec\":{:.0},\"raw_double_c64_msgs_per_sec\":{:.0},\"ours_confirmed_c1_msgs_per_sec\":{:.0},\"ours_confirmed_c8_msgs_per_sec\":{:.0},\"ours_confirmed_c64_msgs_per_sec\":{:.0},\"raw_double_wait_msgs_per_sec\":{:.0},\"raw_double_c8_wait_msgs_per_sec\":{:.0},\"raw_double_c64_wait_msgs_per_sec\":{:.0},\"ours_confirmed_c1_wait_msgs_per_sec\":{:.0},\"ours_confirmed_c8_wait_msgs_per_sec\":{:.0},\"ours_confirmed_c64_wait_msgs_per_sec\":{:.0},\"ratio_confirmed\":{:.3},\"ratio_confirmed_c8_noop\":{:.3},\"ratio_confirmed_c64_noop\":{:.3},\"ratio_confirmed_c8_wait\":{:.3},\"ratio_confirmed_c64_wait\":{:.3},\"confirmed_cost_c1_noop\":{:.3},\"confirmed_cost_c8_noop\":{:.3},\"confirmed_cost_c64_noop\":{:.3},\"confirmed_cost_c1_wait\":{:.3},\"confirmed_cost_c8_wait\":{:.3},\"confirmed_cost_c64_wait\":{:.3}}}",
        rate(noop, Variant::RawDouble(1)),
        rate(noop, Variant::RawDouble(8)),
        rate(noop, Variant::RawDouble(64)),
        rate(noop, Variant::OursConfirmed(1)),
        rate(noop, Variant::OursConfirmed(8)),
        rate(noop, Variant::OursConfirmed(64)),
        rate(wait, Variant::RawDouble(1)),
        rate(wait, Variant::RawDouble(8)),
        rate(wait, Variant::RawDouble(64)),
        rate(wait, Variant::OursConfirmed(1)),
        rate(wait, Variant::OursConfirmed(8)),
        rate(wait, Variant::OursConfirmed(64)),
        confirmed_ratio(noop, 1, false),
        confirmed_ratio(noop, 8, false),
        confirmed_ratio(noop, 64, false),
        confirmed_ratio(wait, 8, true),
        confirmed_ratio(wait, 64, true),
        cost(noop, 1),
        cost(noop, 8),
        cost(noop, 64),
        cost(wait, 1),
        cost(wait, 8),
        cost(wait, 64),
    );
    // One JSON object: the fire-and-forget fields, then the confirmed ones.
    let json = format!(
        "{},{}",
        json.trim_end_matches('}'),
        confirmed.trim_start_matches('{')
    );
    let json = format!(
        "{},\"raw_c50_wait_msgs_per_sec\":{:.0},\"ours_c50_wait_msgs_per_sec\":{:.0},\"ours_batch50_msgs_per_sec\":{:.0},\"ours_batch50_c100_msgs_per_sec\":{:.0},\"ratio_batch50_over_c50\":{:.3},\"ratio_batch50_c100_over_c50\":{:.3}}}",
        json.trim_end_matches('}'),
        batch_medians[0],
        batch_medians[1],
        batch_medians[2],
        batch_medians[3],
        batch_medians[2] / batch_medians[1],
        batch_medians[3] / batch_medians[1],
    );
    println!("{}", json.replace("NaN", "null"));
    Ok(())
}

fn payload(id: u64) -> Vec<u8> {
    format!("{{\"id\":{id:08},\"kind\":\"bench\"}}").into_bytes()
}

async fn publish(js: &jetstream::Context, count: u64) -> Result<(), BoxError> {
    nats_topology_testkit::publish_all(js, SUBJECT, (0..count).map(payload)).await
}

/// The handler's work: an awaited sleep (I/O), or nothing.
async fn work(work: Duration) {
    if !work.is_zero() {
        tokio::time::sleep(work).await;
    }
}

/// The raw loop: pull, work, ack each, until `count` messages, sequentially (at a
/// concurrency of 1) or with `for_each_concurrent`; timed from the first message. Non-fatal stream errors
/// are passed over and counted.
async fn raw(
    js: &jetstream::Context,
    durable: &str,
    count: u64,
    batch: usize,
    concurrency: usize,
    work_for: Duration,
    double_ack: bool,
) -> Result<(Duration, u64), BoxError> {
    let stream = js.get_stream(BENCH.name).await?;
    let consumer: consumer::PullConsumer = stream
        .create_consumer(consumer::pull::Config {
            durable_name: Some(durable.to_owned()),
            ack_policy: consumer::AckPolicy::Explicit,
            ..Default::default()
        })
        .await?;
    let messages = consumer
        .stream()
        .max_messages_per_batch(batch)
        .expires(Duration::from_secs(30))
        .heartbeat(Duration::from_secs(5))
        .messages()
        .await?;
    let errors = AtomicU64::new(0);
    // Missed heartbeats and failed pull requests are reported and the stream goes on; the
    // consumer gone, or a request the server refuses, end it.
    let messages = messages
        .filter_map(|next| {
            let next = match next {
                Ok(message) => Some(Ok(message)),
                Err(e) => {
                    use consumer::pull::MessagesErrorKind as Kind;
                    match e.kind() {
                        Kind::ConsumerDeleted
                        | Kind::PushBasedConsumer
                        | Kind::RequestLimitExceeded => Some(Err(BoxError::from(e.to_string()))),
                        _ => {
                            errors.fetch_add(1, Ordering::Relaxed);
                            None
                        }
                    }
                }
            };
            futures::future::ready(next)
        })
        .take(usize::try_from(count)?);
    let started: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    let handle = |message: jetstream::Message| {
        started.get_or_init(Instant::now);
        async move {
            work(work_for).await;
            let acked = if double_ack {
                message.double_ack().await
            } else {
                message.ack().await
            };
            acked.map_err(|e| BoxError::from(e.to_string()))
        }
    };
    if concurrency <= 1 {
        let mut messages = std::pin::pin!(messages);
        while let Some(message) = messages.try_next().await? {
            handle(message).await?;
        }
    } else {
        messages
            .try_for_each_concurrent(concurrency, handle)
            .await?;
    }
    let elapsed = started.get().expect("messages arrived").elapsed();
    js.get_stream(BENCH.name).await?; // a round trip: acks are flushed before the next run
    Ok((elapsed, errors.load(Ordering::Relaxed)))
}

/// Our runtime, its handler doing `work_for`: timed from the first handled message to the
/// last ack.
async fn ours(
    client: &async_nats::Client,
    durable: &'static str,
    count: u64,
    tuning: Tuning,
    concurrency: u32,
    work_for: Duration,
    ack: AckMode,
) -> Result<Duration, BoxError> {
    let progress = Progress::new(count);
    let reports = progress.clone();
    let decl = ConsumerDecl::queue(
        "bench::handler",
        StreamRef::Declared(&BENCH),
        QueueDecl::new(durable),
    )
    .concurrency(concurrency);
    let topology = Topology::new()
        .stream(BENCH)
        .consumer(decl, move |_incoming| {
            reports.started();
            let reports = reports.clone();
            Box::pin(async move {
                work(work_for).await;
                reports.handled(1);
                Ok::<(), HandlerError>(())
            })
        });
    let mut runtime = Runtime::builder(client.clone()).topology(topology).ack(ack);
    if let Some(batch) = tuning.batch {
        runtime = runtime.pull_batch(batch);
    }
    if let Some(ahead) = tuning.ahead {
        runtime = runtime.pull_ahead(ahead);
    }
    if tuning.timeout_layer {
        runtime = runtime.layer(tower::timeout::TimeoutLayer::new(Duration::from_secs(10)));
    }
    progress.time(runtime).await
}

/// What the bench handlers report: when the first message arrived and how many were handled;
/// the call that reaches the count ends the run.
#[derive(Clone)]
struct Progress {
    first: Arc<std::sync::OnceLock<Instant>>,
    handled: Arc<AtomicU64>,
    done: Arc<tokio::sync::Notify>,
    count: u64,
}

impl Progress {
    fn new(count: u64) -> Self {
        Progress {
            first: Arc::default(),
            handled: Arc::default(),
            done: Arc::default(),
            count,
        }
    }

    fn started(&self) {
        self.first.get_or_init(Instant::now);
    }

    /// Counts `n` more handled (a batch need not end exactly at the count).
    fn handled(&self, n: u64) {
        let before = self.handled.fetch_add(n, Ordering::Relaxed);
        if before < self.count && before + n >= self.count {
            self.done.notify_one();
        }
    }

    /// Runs `runtime` until the count is handled and acknowledged: the time from the first
    /// message to the last ack.
    async fn time(self, runtime: nats_topology::RuntimeBuilder) -> Result<Duration, BoxError> {
        let runtime = runtime.build()?;
        let health = runtime.health();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let running = tokio::spawn(runtime.run_until(async move {
            let _ = stopped.await;
        }));
        self.done.notified().await;
        // The last handler has returned; its ack follows at once. Wait for the counter of
        // acked messages so that the time includes every ack.
        while health.consumers()[0].handled < self.count {
            tokio::task::yield_now().await;
        }
        let elapsed = self.first.get().expect("messages arrived").elapsed();
        let _ = stop.send(());
        running.await??;
        Ok(elapsed)
    }
}

/// The batch size of the batch comparison (the issue's: 50), also the per-message concurrency
/// and the raw loop's it is compared with.
const BATCH: usize = 50;

const BATCH_VARIANTS: [&str; 4] = [
    "raw concurrent 50",
    "ours per message, conc. 50",
    "ours batch 50",
    "ours batch 50, conc. 100",
];

/// Our runtime with a batch handler of [`BATCH`] messages that does `work_for` once per batch:
/// timed from the first batch to the last ack.
async fn ours_batch(
    client: &async_nats::Client,
    durable: &'static str,
    count: u64,
    concurrency: u32,
    work_for: Duration,
    ahead: Option<Duration>,
) -> Result<Duration, BoxError> {
    let progress = Progress::new(count);
    let reports = progress.clone();
    let decl = ConsumerDecl::queue(
        "bench::batch",
        StreamRef::Declared(&BENCH),
        QueueDecl::new(durable).batch(BatchDecl::new(BATCH as u32)),
    )
    .concurrency(concurrency);
    let topology = Topology::new()
        .stream(BENCH)
        .batch_consumer(decl, move |input| {
            reports.started();
            let reports = reports.clone();
            Box::pin(async move {
                let size = input.incoming().len() as u64;
                work(work_for).await;
                reports.handled(size);
                input.finish(Ok(()))
            })
        });
    let mut runtime = Runtime::builder(client.clone()).topology(topology);
    if let Some(ahead) = ahead {
        runtime = runtime.pull_ahead(ahead);
    }
    progress.time(runtime).await
}

/// What ours sets beyond the defaults.
#[derive(Clone, Copy)]
struct Tuning {
    batch: Option<usize>,
    ahead: Option<Duration>,
    /// A `tower::timeout::TimeoutLayer` (10 s, never reached) around the handler.
    timeout_layer: bool,
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(|a, b| a.total_cmp(b));
    values[values.len() / 2]
}
