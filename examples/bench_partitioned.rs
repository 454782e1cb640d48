//! Partitioned consumers against the two ways to do without them, side by side in one run, on
//! one server, over the same messages: an unordered queue consumer (no order per key) at the
//! same concurrency, and a queue consumer with `max_ack_pending = 1` (order per key by
//! serialising the whole group). Then how long a new replica takes to get its share, and the
//! survivors a dead replica's.
//!
//! ```text
//! cargo run --release --example bench_partitioned -- [--keys 1000] [--messages 40000]
//!     [--naive-messages 2000] [--work-us 1000] [--partitions 16] [--replicas 1,2,4] [--reps 3]
//!     [--raw-ahead 1] [--no-early]
//! ```
//!
//! Each round publishes `--messages` messages over `--keys` keys (round-robin) into a stream
//! whose `subject_transform` routes by key into `--partitions` partitions, then for each
//! replica count R starts R runtimes at once (each on its own connection) and times them from
//! the first message handled until the last, each handler awaiting a `--work-us` sleep:
//!
//! - **partitioned**: `key = "{1}"`, `partitions = P` (order per key), at the defaults (a
//!   partition runs its next message before its delivery when their keys differ);
//!   `--no-early`: `partitions_early(false)`, each message waits for its delivery;
//! - **unordered**: a plain queue consumer at concurrency P / R per replica: the same number
//!   of messages in flight across the group, without the order;
//! - **max_ack_pending 1**: a plain queue consumer whose server delivers one message at a
//!   time to the whole group (the naive ordered baseline), over `--naive-messages`;
//! - **raw async-nats, per partition**: no runtime, no membership and no pins: one pull
//!   consumer per partition with `max_ack_pending = 1` (the server's primitive for order that
//!   the partitioned group stands on), the partitions dealt out among the replicas before
//!   the start, each message's sleep then its ack. What order per partition costs at its floor.
//!   `--raw-ahead N` sets those consumers' `max_ack_pending` to N (each partition's messages
//!   still handled one after another, the next ones waiting in the client): what holding a
//!   partition's next message would gain, at the price of order through a lost ack
//!   (docs/PARTITIONS.md, "Limits").
//!
//! Rates are medians over the rounds; `ratio_unordered_rR` is partitioned over unordered and
//! `ratio_naive_rR` partitioned over max_ack_pending 1 at R replicas. **Join** is from a second
//! replica's start (a process of its own, beside one replica under load) until it handles its
//! first message; **takeover** from that process's SIGKILL (no drain: its key lapses, its pins
//! and its in-flight messages time out) until the survivor has handled a message of every
//! partition it held. **Pause** is the longest one partition went between two of its messages
//! (the replicas' start moves partitions between them). Where a cycle goes: the **handler**'s
//! time (median, each variant: the `--work-us` sleep as tokio's timer ends it) and a
//! partition's **handover** (median, from its handler returning to the next handler of that
//! partition starting: the ack's trip to the server and the next delivery's back, with the
//! runtime's dispatch), for the partitioned group and for raw async-nats. **Handlers running at
//! once** across the group, the most at any moment and the mean over the run, for the
//! partitioned group and the unordered consumer: the same concurrency, measured. The last line
//! is one JSON object.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_nats::jetstream;
use nats_topology::model::{ConsumerDecl, QueueDecl, StreamDecl, StreamRef, SubjectTransform};
use nats_topology::{HandlerError, Runtime, Topology};
use nats_topology_testkit::NatsServer;

/// The replica number of a replica process (the join and the takeover), and its report lines.
const CHILD: usize = usize::MAX;
const CHILD_MARK: &str = "bench-partitioned handled ";

/// Set in a replica process: `<url> <stream> <partitions> <work µs>`.
const CHILD_ENV: &str = "BENCH_PARTITIONED_CHILD";

struct Args {
    keys: u64,
    messages: u64,
    naive_messages: u64,
    work: Duration,
    partitions: u16,
    replicas: Vec<usize>,
    reps: usize,
    /// The raw variant's `max_ack_pending` per partition.
    raw_ahead: i64,
}

fn args() -> Args {
    let mut args = Args {
        keys: 1000,
        messages: 40_000,
        naive_messages: 2_000,
        work: Duration::from_micros(1000),
        partitions: 16,
        replicas: vec![1, 2, 4],
        reps: 3,
        raw_ahead: 1,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--early" || flag == "--no-early" {
            EARLY.store(flag == "--early", Ordering::Relaxed);
            continue;
        }
        let value = it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        let number = || {
            value
                .parse::<u64>()
                .unwrap_or_else(|_| panic!("{flag}: not a number"))
        };
        match flag.as_str() {
            "--keys" => args.keys = number(),
            "--messages" => args.messages = number(),
            "--naive-messages" => args.naive_messages = number(),
            "--work-us" => args.work = Duration::from_micros(number()),
            "--partitions" => args.partitions = number() as u16,
            "--reps" => args.reps = number() as usize,
            "--raw-ahead" => args.raw_ahead = number().max(1) as i64,
            "--replicas" => {
                args.replicas = value
                    .split(',')
                    .map(|r| r.parse().expect("a replica count"))
                    .collect()
            }
            other => panic!("unknown flag {other}"),
        }
    }
    args
}

fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

/// The stream of round `round`: routed by key into `partitions` partitions.
fn stream(round: usize, partitions: u16) -> StreamDecl {
    StreamDecl::new(leak(format!("BENCH_PART_{round}")), &["bench.*.paid"]).subject_transform(
        SubjectTransform::new(
            "bench.*.paid",
            leak(format!(
                "{{{{partition({partitions},1)}}}}.bench.{{{{wildcard(1)}}}}.paid"
            )),
        ),
    )
}

/// Creates `stream` on the server (before the runtimes: the messages are published first).
async fn create(js: &jetstream::Context, stream: &StreamDecl) {
    let transform = stream.subject_transform.expect("a routed stream");
    js.create_stream(jetstream::stream::Config {
        name: stream.name.to_owned(),
        subjects: vec![transform.src.to_owned()],
        subject_transform: Some(jetstream::stream::SubjectTransform {
            source: transform.src.to_owned(),
            destination: transform.dest.to_owned(),
        }),
        ..Default::default()
    })
    .await
    .expect("the stream");
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Variant {
    Partitioned,
    Unordered,
    Naive,
    Raw,
}

/// What every replica's handler counts: messages handled, and (for the takeover) which
/// partitions each replica handled a message of, with when.
#[derive(Default)]
struct Tally {
    handled: AtomicU64,
    partitions: Mutex<Vec<(usize, u16, Instant)>>,
    /// Each handler's replica, partition, start and end.
    spans: Mutex<Vec<(usize, u16, Instant, Instant)>>,
    /// When the first message was handled.
    first: std::sync::OnceLock<Instant>,
}

fn topology(
    variant: Variant,
    stream: StreamDecl,
    (partitions, replicas): (u16, usize),
    (tally, replica, work): (Arc<Tally>, usize, Duration),
) -> Topology {
    let (group, subject, queue, concurrency) = match variant {
        Variant::Partitioned => (
            "part",
            "bench.*.paid",
            QueueDecl::new("part").partitioned(partitions, &[1]),
            None,
        ),
        Variant::Unordered => (
            "plain",
            "*.bench.*.paid",
            QueueDecl::new("plain"),
            Some((u32::from(partitions) / replicas as u32).max(1)),
        ),
        Variant::Naive | Variant::Raw => (
            "naive",
            "*.bench.*.paid",
            QueueDecl::new("naive").max_ack_pending(1),
            None,
        ),
    };
    let _ = group;
    let mut decl = ConsumerDecl::queue(
        "bench::on_paid",
        StreamRef::Declared(leak_stream(stream)),
        queue,
    )
    .subjects(Box::leak(Box::new([subject])));
    decl.concurrency = concurrency;
    Topology::new()
        .stream(stream)
        .consumer(decl, move |incoming| {
            let tally = tally.clone();
            Box::pin(async move {
                let started = Instant::now();
                tokio::time::sleep(work).await;
                record(&tally, replica, incoming.context().subject(), started);
                Ok::<(), HandlerError>(())
            })
        })
}

/// What a handler of `replica` that started at `started` records as it returns, for a message
/// on `subject` (its first token the partition).
fn record(tally: &Tally, replica: usize, subject: &str, started: Instant) {
    let partition = subject
        .split('.')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    let now = Instant::now();
    let _ = tally.first.set(now);
    if replica == CHILD {
        // A replica process reports to its parent.
        println!("{CHILD_MARK}{partition}");
    }
    tally
        .partitions
        .lock()
        .unwrap()
        .push((replica, partition, now));
    tally
        .spans
        .lock()
        .unwrap()
        .push((replica, partition, started, now));
    tally.handled.fetch_add(1, Ordering::Relaxed);
}

/// Replica `replica` of `replicas` in raw async-nats (see the top comment): partitions
/// `replica`, `replica + replicas`, ... each read by a task of its own through its own
/// consumer, on a connection of the replica's own.
async fn start_raw(
    url: &str,
    stream: &str,
    (partitions, replicas, ahead): (u16, usize, i64),
    (tally, replica, work): (Arc<Tally>, usize, Duration),
) -> Replica {
    use futures::StreamExt;
    let js = jetstream::new(async_nats::connect(url).await.expect("connect"));
    let stream = js.get_stream(stream).await.expect("the stream");
    let mut tasks = tokio::task::JoinSet::new();
    for p in (0..partitions).filter(|p| usize::from(*p) % replicas == replica) {
        let consumer = stream
            .get_or_create_consumer(
                &format!("raw-p{p}"),
                jetstream::consumer::pull::Config {
                    durable_name: Some(format!("raw-p{p}")),
                    filter_subject: format!("{p}.bench.*.paid"),
                    ack_policy: jetstream::consumer::AckPolicy::Explicit,
                    max_ack_pending: ahead,
                    ..Default::default()
                },
            )
            .await
            .expect("a partition's consumer");
        let tally = tally.clone();
        tasks.spawn(async move {
            let mut messages = consumer.messages().await.expect("a partition's messages");
            while let Some(Ok(message)) = messages.next().await {
                let started = Instant::now();
                tokio::time::sleep(work).await;
                record(&tally, replica, &message.subject, started);
                message.ack().await.expect("an ack sent");
            }
        });
    }
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let _ = stopped.await;
        tasks.shutdown().await;
    });
    Replica { stop, task }
}

fn leak_stream(stream: StreamDecl) -> &'static StreamDecl {
    Box::leak(Box::new(stream))
}

/// A runtime running in a task of its own; dropped with `abort` (no drain) or stopped.
struct Replica {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

/// Whether the partitioned replicas of the throughput rounds run a partition's next message
/// before its delivery (on by default, as in the runtime; `--no-early`:
/// `partitions_early(false)`; the join and the takeover keep the default).
static EARLY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

async fn start(url: &str, topology: Topology) -> Replica {
    let client = async_nats::connect(url).await.expect("connect");
    let runtime = Runtime::builder(client)
        .partitions_early(EARLY.load(Ordering::Relaxed))
        .topology(topology)
        .build()
        .expect("a valid topology");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        runtime
            .run_until(async move {
                let _ = stopped.await;
            })
            .await
            .expect("the runtime drains");
    });
    Replica { stop, task }
}

async fn stop_all(replicas: Vec<Replica>) {
    for replica in replicas {
        let _ = replica.stop.send(());
        let _ = replica.task.await;
    }
}

async fn publish(js: &jetstream::Context, keys: u64, messages: u64) {
    let mut acks = Vec::with_capacity(1024);
    for i in 0..messages {
        let key = i % keys;
        acks.push(
            js.publish(format!("bench.k{key}.paid"), i.to_string().into())
                .await
                .expect("publish"),
        );
        if acks.len() == 1024 {
            for ack in acks.drain(..) {
                ack.await.expect("stored");
            }
        }
    }
    for ack in acks {
        ack.await.expect("stored");
    }
}

async fn wait_for(tally: &Tally, n: u64, timeout: Duration, what: &str) {
    let deadline = Instant::now() + timeout;
    while tally.handled.load(Ordering::Relaxed) < n {
        assert!(
            Instant::now() < deadline,
            "{what}: {} of {n} handled within {timeout:?}",
            tally.handled.load(Ordering::Relaxed)
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// What one variant measured: messages per second from the first handled to the last; for
/// the partitioned one, also while every partition still had messages waiting (until the first
/// partition ran dry), the busiest partition's messages over the mean (key skew), and the
/// longest any partition went without handling a message while it had some left (the moves of
/// the replicas' start, in seconds).
struct Measured {
    rate: f64,
    saturated: Option<f64>,
    skew: Option<f64>,
    pause: Option<f64>,
    /// The median handler's time, in ms.
    handler_ms: f64,
    /// A partition's median handover, in ms (see the top comment).
    handover_ms: Option<f64>,
    /// Handlers running at once across the group: the most, and the mean over the run.
    in_flight: (usize, f64),
}

/// What `variant` at `replicas` replicas measures over `messages` of the stream.
async fn throughput(
    url: &str,
    variant: Variant,
    stream: StreamDecl,
    (partitions, replicas, work): (u16, usize, Duration),
    (messages, raw_ahead): (u64, i64),
) -> Measured {
    let tally = Arc::new(Tally::default());
    let mut running = Vec::new();
    for replica in 0..replicas {
        let them = (tally.clone(), replica, work);
        running.push(match variant {
            Variant::Raw => {
                let layout = (partitions, replicas, raw_ahead);
                start_raw(url, stream.name, layout, them).await
            }
            _ => start(url, topology(variant, stream, (partitions, replicas), them)).await,
        });
    }
    wait_for(
        &tally,
        messages,
        Duration::from_secs(600),
        &format!("{variant:?} at {replicas}"),
    )
    .await;
    // From the first message handled to the last: what the group sustains, once started (the
    // start-up of each variant is the same provisioning, not what is compared).
    let began = *tally.first.get().expect("a message was handled");
    let rate = (messages - 1) as f64 / began.elapsed().as_secs_f64();
    stop_all(running).await;
    let spans = tally.spans.lock().unwrap().clone();
    let handler_ms = median(
        spans
            .iter()
            .map(|(_, _, start, end)| (*end - *start).as_secs_f64() * 1e3)
            .collect(),
    );
    let in_flight = in_flight(&spans, replicas);
    let spans: Vec<(u16, Instant, Instant)> =
        spans.into_iter().map(|(_, p, s, e)| (p, s, e)).collect();
    let (mut saturated, mut skew, mut pause, mut handover_ms) = (None, None, None, None);
    if variant == Variant::Raw {
        handover_ms = Some(handover(spans));
    } else if variant == Variant::Partitioned {
        let handled = tally.partitions.lock().unwrap().clone();
        let mut last = vec![began; usize::from(partitions)];
        let mut count = vec![0u64; usize::from(partitions)];
        for (_, p, at) in &handled {
            let p = usize::from(*p).min(last.len() - 1);
            last[p] = last[p].max(*at);
            count[p] += 1;
        }
        let dry = *last.iter().min().expect("partitions");
        let before = handled.iter().filter(|(_, _, at)| *at <= dry).count();
        saturated = Some(before as f64 / (dry - began).as_secs_f64().max(1e-3));
        let mean = messages as f64 / f64::from(partitions);
        skew = count.iter().max().map(|max| *max as f64 / mean);
        pause = Some(longest_pause(&handled, partitions));
        handover_ms = Some(handover(spans));
    }
    Measured {
        rate,
        saturated,
        skew,
        pause,
        handler_ms,
        handover_ms,
        in_flight,
    }
}

/// Handlers running at once across the group, from each handler's replica, start and end
/// (the replica processes of the join and the takeover left out): the most at any moment, and
/// the mean over the run (their time over the run's, from the first start to the last end).
fn in_flight(spans: &[(usize, u16, Instant, Instant)], replicas: usize) -> (usize, f64) {
    let ours = || spans.iter().filter(|span| span.0 < replicas);
    let mut edges: Vec<(Instant, i64)> = ours()
        .flat_map(|&(_, _, start, end)| [(start, 1), (end, -1)])
        .collect();
    // An end before a start at the same instant: a handover is not an overlap.
    edges.sort_by_key(|&(at, step)| (at, step));
    let (mut now, mut most) = (0i64, 0i64);
    for (_, step) in &edges {
        now += step;
        most = most.max(now);
    }
    let busy: f64 = ours()
        .map(|&(_, _, start, end)| (end - start).as_secs_f64())
        .sum();
    let mean = match (edges.first(), edges.last()) {
        (Some(first), Some(last)) => busy / (last.0 - first.0).as_secs_f64().max(1e-9),
        _ => 0.0,
    };
    (most as usize, mean)
}

/// The longest time, in seconds, between two messages of one partition handled one after the
/// other (by any replica).
fn longest_pause(handled: &[(usize, u16, Instant)], partitions: u16) -> f64 {
    let mut by_partition: Vec<Vec<Instant>> = vec![Vec::new(); usize::from(partitions)];
    for (_, p, at) in handled {
        if let Some(times) = by_partition.get_mut(usize::from(*p)) {
            times.push(*at);
        }
    }
    let gaps = by_partition.iter_mut().flat_map(|times| {
        times.sort_unstable();
        let gaps: Vec<f64> = times
            .windows(2)
            .map(|w| (w[1] - w[0]).as_secs_f64())
            .collect();
        gaps
    });
    gaps.fold(0.0, f64::max)
}

/// The median time, in ms, from one partition's handler returning to the next handler of that
/// partition starting (one partition's handlers never overlap).
fn handover(mut spans: Vec<(u16, Instant, Instant)>) -> f64 {
    spans.sort_by_key(|(partition, start, _)| (*partition, *start));
    median(
        spans
            .windows(2)
            .filter(|w| w[0].0 == w[1].0)
            .map(|w| w[1].1.saturating_duration_since(w[0].2).as_secs_f64() * 1e3)
            .collect(),
    )
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    if let Ok(child) = std::env::var(CHILD_ENV) {
        return replica_process(&child).await;
    }
    let args = args();
    let server = NatsServer::start().await.expect("nats-server starts");
    let url = server.url();
    let js = jetstream::new(async_nats::connect(&url).await.expect("connect"));
    let variants = [
        Variant::Partitioned,
        Variant::Unordered,
        Variant::Naive,
        Variant::Raw,
    ];
    let mut rates: Vec<Vec<Vec<f64>>> = vec![vec![Vec::new(); variants.len()]; args.replicas.len()];
    // The partitioned variant's rate while every partition was busy, and the key skew.
    let mut saturated: Vec<Vec<f64>> = vec![Vec::new(); args.replicas.len()];
    let mut skews = Vec::new();
    let mut pauses: Vec<Vec<f64>> = vec![Vec::new(); args.replicas.len()];
    // Per replica count and variant: the handler's time and a partition's handover.
    let mut handlers: Vec<Vec<Vec<f64>>> =
        vec![vec![Vec::new(); variants.len()]; args.replicas.len()];
    let mut handovers_ms = handlers.clone();
    let mut in_flights: Vec<Vec<Vec<(usize, f64)>>> =
        vec![vec![Vec::new(); variants.len()]; args.replicas.len()];
    for round in 0..args.reps {
        let stream = stream(round, args.partitions);
        create(&js, &stream).await;
        publish(&js, args.keys, args.messages).await;
        for (r, &replicas) in args.replicas.iter().enumerate() {
            for (v, &variant) in variants.iter().enumerate() {
                let messages = if variant == Variant::Naive {
                    args.naive_messages
                } else {
                    args.messages
                };
                let measured = throughput(
                    &url,
                    variant,
                    stream,
                    (args.partitions, replicas, args.work),
                    (messages, args.raw_ahead),
                )
                .await;
                let rate = measured.rate;
                let pause = (measured.pause)
                    .map(|p| format!(", longest pause {p:.2} s"))
                    .unwrap_or_default();
                eprintln!(
                    "round {round}: {variant:?} at {replicas} replicas: {rate:.0} msgs/s{pause}"
                );
                rates[r][v].push(rate);
                saturated[r].extend(measured.saturated);
                skews.extend(measured.skew);
                pauses[r].extend(measured.pause);
                handlers[r][v].push(measured.handler_ms);
                handovers_ms[r][v].extend(measured.handover_ms);
                in_flights[r][v].push(measured.in_flight);
                // The next variant at this count reads the stream afresh: its own durables.
                let names: Vec<String> = match variant {
                    Variant::Partitioned => {
                        (0..args.partitions).map(|p| format!("part-p{p}")).collect()
                    }
                    Variant::Raw => (0..args.partitions).map(|p| format!("raw-p{p}")).collect(),
                    Variant::Unordered => vec!["plain".to_owned()],
                    Variant::Naive => vec!["naive".to_owned()],
                };
                let s = js.get_stream(stream.name).await.expect("the stream");
                for name in names {
                    let _ = s.delete_consumer(&name).await;
                }
            }
        }
        js.delete_stream(stream.name)
            .await
            .expect("the round's stream deleted");
    }
    let (join, takeover) = handovers(&url, &js, &args).await;

    println!(
        "\npartitioned consumers: {} keys, {} partitions, {:?} handler, medians of {} rounds (msgs/s)\n",
        args.keys, args.partitions, args.work, args.reps
    );
    if !EARLY.load(Ordering::Relaxed) {
        println!("partitioned with partitions_early(false): each message waits for its delivery\n");
    }
    if args.raw_ahead != 1 {
        println!(
            "raw per partition at max_ack_pending {}: order not kept through a lost ack\n",
            args.raw_ahead
        );
    }
    println!(
        "| replicas | partitioned | unordered (same concurrency) | max_ack_pending 1 | raw async-nats, per partition | partitioned / unordered | partitioned / max_ack_pending 1 | partitioned / raw per partition | raw per partition / unordered | partitioned while every partition had work | that / unordered |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    let mut json = serde_json::Map::new();
    json.insert("raw_max_ack_pending".into(), args.raw_ahead.into());
    let round3 = |x: f64| (x * 1000.0).round() / 1000.0;
    for (r, &replicas) in args.replicas.iter().enumerate() {
        let [part, plain, naive, raw] = [0, 1, 2, 3].map(|v| median(rates[r][v].clone()));
        let busy = median(saturated[r].clone());
        println!(
            "| {replicas} | {part:.0} | {plain:.0} | {naive:.0} | {raw:.0} | {:.3} | {:.1} | {:.3} | {:.3} | {busy:.0} | {:.3} |",
            part / plain,
            part / naive,
            part / raw,
            raw / plain,
            busy / plain
        );
        json.insert(format!("raw_per_partition_r{replicas}"), raw.round().into());
        json.insert(format!("ratio_raw_r{replicas}"), round3(part / raw).into());
        json.insert(
            format!("ratio_raw_unordered_r{replicas}"),
            round3(raw / plain).into(),
        );
        json.insert(format!("partitioned_r{replicas}"), part.round().into());
        json.insert(format!("unordered_r{replicas}"), plain.round().into());
        json.insert(format!("naive_r{replicas}"), naive.round().into());
        json.insert(format!("partitioned_busy_r{replicas}"), busy.round().into());
        json.insert(
            format!("ratio_unordered_r{replicas}"),
            round3(part / plain).into(),
        );
        json.insert(
            format!("ratio_busy_unordered_r{replicas}"),
            round3(busy / plain).into(),
        );
        json.insert(
            format!("ratio_naive_r{replicas}"),
            ((part / naive * 10.0).round() / 10.0).into(),
        );
    }
    let skew = median(skews);
    println!(
        "\nkey skew: the busiest partition held {skew:.2}x the mean partition's messages ({} keys over {} partitions)",
        args.keys, args.partitions
    );
    json.insert("partition_skew".into(), round3(skew).into());
    let pauses: Vec<String> = (args.replicas.iter().zip(&pauses))
        .map(|(replicas, p)| {
            let pause = median(p.clone());
            json.insert(format!("pause_max_s_r{replicas}"), round3(pause).into());
            format!("{pause:.2} s at {replicas}")
        })
        .collect();
    println!(
        "longest pause of one partition while it had messages (median over rounds): {}",
        pauses.join(", ")
    );
    println!("where a cycle goes (medians, ms):");
    for (r, &replicas) in args.replicas.iter().enumerate() {
        let [part, plain, _, raw] = [0, 1, 2, 3].map(|v| median(handlers[r][v].clone()));
        let [handover, raw_handover] = [0, 3].map(|v| median(handovers_ms[r][v].clone()));
        println!(
            "  at {replicas}: handler {part:.2} partitioned, {plain:.2} unordered, {raw:.2} raw per partition; a partition's handover {handover:.2} partitioned, {raw_handover:.2} raw"
        );
        json.insert(format!("handler_ms_raw_r{replicas}"), round3(raw).into());
        json.insert(
            format!("handover_ms_raw_r{replicas}"),
            round3(raw_handover).into(),
        );
        json.insert(
            format!("handler_ms_partitioned_r{replicas}"),
            round3(part).into(),
        );
        json.insert(
            format!("handler_ms_unordered_r{replicas}"),
            round3(plain).into(),
        );
        json.insert(format!("handover_ms_r{replicas}"), round3(handover).into());
    }
    println!(
        "handlers running at once across the group (the most over the rounds; the mean, median over the rounds):"
    );
    for (r, &replicas) in args.replicas.iter().enumerate() {
        let [part, plain] = [0, 1].map(|v| {
            let runs = &in_flights[r][v];
            let most = runs.iter().map(|(most, _)| *most).max().unwrap_or(0);
            (most, median(runs.iter().map(|(_, mean)| *mean).collect()))
        });
        println!(
            "  at {replicas}: partitioned {} most, {:.2} mean; unordered {} most, {:.2} mean",
            part.0, part.1, plain.0, plain.1
        );
        json.insert(
            format!("in_flight_most_partitioned_r{replicas}"),
            part.0.into(),
        );
        json.insert(
            format!("in_flight_most_unordered_r{replicas}"),
            plain.0.into(),
        );
        json.insert(
            format!("in_flight_mean_partitioned_r{replicas}"),
            round3(part.1).into(),
        );
        json.insert(
            format!("in_flight_mean_unordered_r{replicas}"),
            round3(plain.1).into(),
        );
    }
    println!(
        "\njoin (a second replica's first message): {:.2} s; takeover (a dead replica's partitions all handled again): {:.2} s",
        join.as_secs_f64(),
        takeover.as_secs_f64()
    );
    json.insert(
        "join_s".into(),
        ((join.as_secs_f64() * 100.0).round() / 100.0).into(),
    );
    json.insert(
        "takeover_s".into(),
        ((takeover.as_secs_f64() * 100.0).round() / 100.0).into(),
    );
    println!("{}", serde_json::Value::Object(json));
}

/// The join and takeover times, under a steady load.
async fn handovers(url: &str, js: &jetstream::Context, args: &Args) -> (Duration, Duration) {
    let stream = stream(args.reps + 1, args.partitions);
    create(js, &stream).await;
    let load = {
        let js = js.clone();
        let keys = args.keys;
        tokio::spawn(async move {
            let mut i = 0u64;
            loop {
                for _ in 0..100 {
                    let key = i % keys;
                    if js
                        .publish(format!("bench.k{key}.paid"), i.to_string().into())
                        .await
                        .is_err()
                    {
                        return;
                    }
                    i += 1;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    let tally = Arc::new(Tally::default());
    let setup = (args.partitions, 2);
    let first = start(
        url,
        topology(
            Variant::Partitioned,
            stream,
            setup,
            (tally.clone(), 0, args.work),
        ),
    )
    .await;
    wait_for(
        &tally,
        200,
        Duration::from_secs(60),
        "the first replica under load",
    )
    .await;
    // A second replica, a process of its own, joins under load.
    let joined_at = Instant::now();
    let mut second = tokio::process::Command::new(std::env::current_exe().expect("this program"))
        .env(
            CHILD_ENV,
            format!(
                "{url} {} {} {}",
                stream.name,
                args.partitions,
                args.work.as_micros()
            ),
        )
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("a replica process");
    {
        use tokio::io::AsyncBufReadExt;
        let mut lines = tokio::io::BufReader::new(second.stdout.take().expect("piped")).lines();
        let tally = tally.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(p) = line.strip_prefix(CHILD_MARK).and_then(|p| p.parse().ok()) {
                    tally
                        .partitions
                        .lock()
                        .unwrap()
                        .push((CHILD, p, Instant::now()));
                }
            }
        });
    }
    let join = loop {
        let first_of_second = (tally.partitions.lock().unwrap().iter())
            .find(|(replica, _, _)| *replica == CHILD)
            .map(|(_, _, at)| *at);
        if let Some(at) = first_of_second {
            break at - joined_at;
        }
        assert!(
            joined_at.elapsed() < Duration::from_secs(60),
            "the second replica never handled a message"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    // Once it handles its share, it is SIGKILLed (by its pid: no drain, no unpin, its key
    // left to lapse, its in-flight messages to their ack_wait).
    let share = usize::from(args.partitions / 2);
    let held = loop {
        let now = Instant::now();
        let recent: BTreeSet<u16> = (tally.partitions.lock().unwrap().iter())
            .filter(|(replica, _, at)| *replica == CHILD && *at + Duration::from_secs(1) > now)
            .map(|(_, p, _)| *p)
            .collect();
        if recent.len() >= share {
            break recent;
        }
        assert!(
            joined_at.elapsed() < Duration::from_secs(60),
            "the second replica never held its share"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    second.kill().await.expect("SIGKILL the replica process");
    let died_at = Instant::now();
    let takeover = loop {
        let taken: BTreeSet<u16> = (tally.partitions.lock().unwrap().iter())
            .filter(|(replica, p, at)| *replica == 0 && *at > died_at && held.contains(p))
            .map(|(_, p, _)| *p)
            .collect();
        if taken == held {
            break died_at.elapsed();
        }
        assert!(
            died_at.elapsed() < Duration::from_secs(60),
            "the survivor never took {held:?}; took {taken:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    load.abort();
    stop_all(vec![first]).await;
    (join, takeover)
}

/// A replica process: the partitioned consumer on the stream its parent names, reporting each
/// message's partition on stdout, until it is killed.
async fn replica_process(spec: &str) {
    let words: Vec<&str> = spec.split_whitespace().collect();
    let [url, name, partitions, work] = words[..] else {
        panic!("{CHILD_ENV}: `<url> <stream> <partitions> <work µs>`, got {spec:?}");
    };
    let partitions: u16 = partitions.parse().expect("a partition count");
    let work = Duration::from_micros(work.parse().expect("microseconds"));
    let mut stream = stream(0, partitions);
    stream.name = leak(name.to_owned());
    let topology = topology(
        Variant::Partitioned,
        stream,
        (partitions, 2),
        (Arc::new(Tally::default()), CHILD, work),
    );
    let replica = start(url, topology).await;
    let _ = replica.task.await;
}
