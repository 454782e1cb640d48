//! Request/reply benchmark: a raw async-nats `service` endpoint against our `#[endpoint]`
//! runtime, side by side in one run, on one server, called the same way.
//!
//! ```text
//! cargo run --release --example bench_requests -- [--requests 20000] [--callers 1,64]
//!     [--reps 3] [--work-us 0] [--size 128]
//! ```
//!
//! docs/PERFORMANCE.md reports `--requests 30000 --reps 9`.
//!
//! Three endpoints serve at once, each on a connection of its own: **raw** is
//! `client.service_builder().start(..)` with one endpoint and the loop a user writes
//! (`while let Some(request) = endpoint.next().await { request.respond(Ok(body)).await }`);
//! **ours** is a `Runtime` serving the same endpoint at the defaults a user gets (concurrency
//! 1); **ours c64** the same endpoint declared with `concurrency = 64`. The handler echoes the
//! request (after `--work-us` of awaited sleep, when set; the raw loop then handles requests
//! one at a time, as its loop does). Each variant's callers are `C` tasks on a client
//! connection of their own, each sending `--requests / C` requests one after the other and
//! timing each one.
//!
//! A round measures the three twice: **one at a time** (each alone, in turn, the order
//! reversed every other round: the throughput a user gets), then **all three at once** (until
//! the first has sent its requests). Tables show the medians over rounds of throughput
//! (requests per second) and of the rounds' p50 and p99 latencies. The ratios (ours over raw:
//! throughput, and p99 latency) are paired: each round's ours over the same round's raw, the
//! median over rounds, the lowest and highest round beside it. On a shared machine whose speed
//! drifts from one second to the next, one at a time compares moments a few seconds apart; all
//! at once meets the same moments with each, so its ratios say what our runtime costs beside
//! raw's. The last line is one JSON object with the figures (`together_` for all at once).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use async_nats::service::ServiceExt;
use bytes::Bytes;
use futures::StreamExt;
use nats_topology::model::{EndpointDecl, ServiceDecl};
use nats_topology::{Runtime, ServiceError, Topology};
use nats_topology_testkit::NatsServer;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

static SERVICE: ServiceDecl = ServiceDecl::new("bench_requests", "1.0.0");

struct Args {
    requests: usize,
    callers: Vec<usize>,
    reps: usize,
    work: Duration,
    size: usize,
}

fn args() -> Args {
    let mut args = Args {
        requests: 20_000,
        callers: vec![1, 64],
        reps: 3,
        work: Duration::ZERO,
        size: 128,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| panic!("{flag} takes a value"));
        match flag.as_str() {
            "--requests" => args.requests = value().parse().expect("--requests N"),
            "--callers" => {
                args.callers = value()
                    .split(',')
                    .map(|c| c.parse().expect("--callers 1,64"))
                    .collect()
            }
            "--reps" => args.reps = value().parse().expect("--reps N"),
            "--work-us" => args.work = Duration::from_micros(value().parse().expect("--work-us N")),
            "--size" => args.size = value().parse().expect("--size BYTES"),
            other => panic!(
                "unknown flag {other}; expected --requests, --callers, --reps, --work-us, --size"
            ),
        }
    }
    args
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Variant {
    Raw,
    Ours,
    OursC64,
}

impl Variant {
    const ALL: [Variant; 3] = [Variant::Raw, Variant::Ours, Variant::OursC64];

    fn label(self) -> &'static str {
        match self {
            Variant::Raw => "raw async-nats service",
            Variant::Ours => "ours (defaults)",
            Variant::OursC64 => "ours c64",
        }
    }

    fn key(self) -> &'static str {
        match self {
            Variant::Raw => "raw",
            Variant::Ours => "ours",
            Variant::OursC64 => "ours_c64",
        }
    }

    fn subject(self) -> &'static str {
        match self {
            Variant::Raw => "bench.requests.raw",
            Variant::Ours => "bench.requests.ours",
            Variant::OursC64 => "bench.requests.ours64",
        }
    }
}

/// One measurement: requests per second, p50 and p99 latency, and how many requests got "no
/// responders" and were sent again (the raw variant only; ours fails the run instead).
#[derive(Clone, Copy, Debug)]
struct Sample {
    rate: f64,
    p50: Duration,
    p99: Duration,
    resent: u64,
}

/// How a round measures the three endpoints.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    /// Each in turn, alone on the machine: the throughput a user gets.
    OneAtATime,
    /// All three at once, until the first has sent its requests: the same moments of a noisy
    /// machine for each, so that their ratios compare like with like.
    AllAtOnce,
}

/// Every sample, one per round, by mode, variant and number of callers.
type Samples = Vec<((Mode, Variant, usize), Vec<Sample>)>;

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args = args();
    let server = NatsServer::start().await?;
    // A connection of their own for each variant's callers.
    let mut callers_clients = Vec::new();
    for _ in Variant::ALL {
        callers_clients.push(async_nats::connect(server.url()).await?);
    }
    let client_of = |variant: Variant| &callers_clients[variant as usize];
    let body = Bytes::from(vec![b'x'; args.size]);

    let mut samples: Samples = Vec::new();
    let mut record = |key: (Mode, Variant, usize), sample: Sample, round: usize| {
        let (mode, variant, callers) = key;
        eprintln!(
            "round {} {:<11} {:<24} callers {:>3}: {:>9.0} req/s  p50 {:>8.1?}  p99 {:>8.1?}{}",
            round + 1,
            match mode {
                Mode::OneAtATime => "alone",
                Mode::AllAtOnce => "all at once",
            },
            variant.label(),
            callers,
            sample.rate,
            sample.p50,
            sample.p99,
            match sample.resent {
                0 => String::new(),
                n => format!("  ({n} sent again after \"no responders\")"),
            }
        );
        match samples.iter_mut().find(|(k, _)| *k == key) {
            Some((_, list)) => list.push(sample),
            None => samples.push((key, vec![sample])),
        }
    };
    for &callers in &args.callers {
        // All three endpoints serve, each on a connection of its own, for every round at this
        // caller count.
        let served = Served::start(&server, client_of(Variant::Raw), &args, body.clone()).await?;
        // Unmeasured: the first requests of each warm the connections and the server.
        for variant in Variant::ALL {
            let warm_up = args.requests.min(1_000);
            call(client_of(variant), variant, warm_up, callers, body.clone()).await?;
        }
        for round in 0..args.reps {
            // Alternate which goes first (A B C, then C B A), so that a machine speeding up or
            // slowing down during a round favours neither.
            let mut order = Variant::ALL.to_vec();
            if round % 2 == 1 {
                order.reverse();
            }
            for variant in order {
                let sample = call(
                    client_of(variant),
                    variant,
                    args.requests,
                    callers,
                    body.clone(),
                )
                .await?;
                record((Mode::OneAtATime, variant, callers), sample, round);
            }
            let done = Arc::new(AtomicBool::new(false));
            let all = futures::future::try_join_all(Variant::ALL.map(|variant| {
                let client = client_of(variant);
                call_until(client, variant, args.requests, callers, body.clone(), &done)
            }))
            .await?;
            for (variant, sample) in Variant::ALL.into_iter().zip(all) {
                record((Mode::AllAtOnce, variant, callers), sample, round);
            }
        }
        served.stop().await?;
    }

    println!(
        "\nrequests {} per round, body {} bytes, handler work {:?}, medians of {} rounds; \
         ratios: the median of each round's ours over the same round's raw, (lowest-highest)",
        args.requests, args.size, args.work, args.reps
    );
    let mut json = serde_json::Map::new();
    for (mode, title, prefix) in [
        (Mode::OneAtATime, "one at a time", ""),
        (Mode::AllAtOnce, "all three at once", "together_"),
    ] {
        println!("\n{title}");
        report(&samples, mode, &args.callers, prefix, &mut json);
    }
    println!("{}", serde_json::Value::Object(json));
    Ok(())
}

/// Prints one mode's table, and adds its figures to `json` (keys after `prefix`).
fn report(
    samples: &Samples,
    mode: Mode,
    callers_counts: &[usize],
    prefix: &str,
    json: &mut serde_json::Map<String, serde_json::Value>,
) {
    println!(
        "{:<24} {:>7} {:>12} {:>10} {:>10} {:>19} {:>19}",
        "variant", "callers", "req/s", "p50", "p99", "x raw (low-high)", "p99 x raw (low-high)"
    );
    let rounds_of = |variant: Variant, callers: usize| -> &Vec<Sample> {
        &samples
            .iter()
            .find(|(key, _)| *key == (mode, variant, callers))
            .expect("measured")
            .1
    };
    let median_of = |variant: Variant, callers: usize| -> Sample {
        let list = rounds_of(variant, callers);
        Sample {
            resent: list.iter().map(|s| s.resent).sum(),
            rate: median(list.iter().map(|s| s.rate).collect()),
            p50: Duration::from_secs_f64(median(
                list.iter().map(|s| s.p50.as_secs_f64()).collect(),
            )),
            p99: Duration::from_secs_f64(median(
                list.iter().map(|s| s.p99.as_secs_f64()).collect(),
            )),
        }
    };
    // Each round's ratio to the raw endpoint measured in the same round.
    let paired = |variant: Variant, callers: usize, of: fn(&Sample) -> f64| -> Paired {
        let ratios = rounds_of(variant, callers)
            .iter()
            .zip(rounds_of(Variant::Raw, callers))
            .map(|(ours, raw)| of(ours) / of(raw))
            .collect::<Vec<_>>();
        Paired::of(ratios)
    };
    for &callers in callers_counts {
        let raw = median_of(Variant::Raw, callers);
        json.insert(format!("{prefix}raw_resent_c{callers}"), raw.resent.into());
        for variant in Variant::ALL {
            let m = median_of(variant, callers);
            let rate_ratio = paired(variant, callers, |s| s.rate);
            let p99_ratio = paired(variant, callers, |s| s.p99.as_secs_f64());
            println!(
                "{:<24} {:>7} {:>12.0} {:>10.1?} {:>10.1?} {:>19} {:>19}",
                variant.label(),
                callers,
                m.rate,
                m.p50,
                m.p99,
                rate_ratio.to_string(),
                p99_ratio.to_string()
            );
            let key = format!("{prefix}{}", variant.key());
            json.insert(format!("{key}_rate_c{callers}"), m.rate.round().into());
            json.insert(
                format!("{key}_p99_us_c{callers}"),
                (m.p99.as_secs_f64() * 1e6).round().into(),
            );
            if variant != Variant::Raw {
                let key = variant.key();
                let ratios = [
                    ("ratio", rate_ratio.median, ""),
                    ("ratio", rate_ratio.low, "_low"),
                    ("p99_ratio", p99_ratio.median, ""),
                    ("p99_ratio", p99_ratio.high, "_high"),
                ];
                for (name, value, suffix) in ratios {
                    json.insert(
                        format!("{prefix}{name}_{key}_c{callers}{suffix}"),
                        rounded(value).into(),
                    );
                }
            }
        }
    }
}

/// A runtime serving, and what stops it.
type Running = (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<Result<(), nats_topology::RunError>>,
);

/// The three endpoints, serving.
struct Served {
    raw: (async_nats::service::Service, tokio::task::JoinHandle<()>),
    ours: Vec<Running>,
}

impl Served {
    async fn start(
        server: &NatsServer,
        callers: &async_nats::Client,
        args: &Args,
        body: Bytes,
    ) -> Result<Served, BoxError> {
        let raw = raw(server, callers, args, body).await?;
        let mut ours = Vec::new();
        for variant in [Variant::Ours, Variant::OursC64] {
            ours.push(self::ours(server, args, variant).await?);
        }
        Ok(Served { raw, ours })
    }

    async fn stop(self) -> Result<(), BoxError> {
        let (service, serving) = self.raw;
        serving.abort();
        service.stop().await?;
        for (stop, running) in self.ours {
            let _ = stop.send(());
            running.await??;
        }
        Ok(())
    }
}

/// The raw async-nats service endpoint, served on a connection of its own, with the loop a
/// user writes.
async fn raw(
    server: &NatsServer,
    callers: &async_nats::Client,
    args: &Args,
    body: Bytes,
) -> Result<(async_nats::service::Service, tokio::task::JoinHandle<()>), BoxError> {
    let client = async_nats::connect(server.url()).await?;
    let service = client
        .service_builder()
        .start("bench_requests_raw", "1.0.0")
        .await?;
    let mut endpoint = service.endpoint(Variant::Raw.subject()).await?;
    let work = args.work;
    let serving = tokio::spawn(async move {
        while let Some(request) = endpoint.next().await {
            if !work.is_zero() {
                tokio::time::sleep(work).await;
            }
            let reply = request.message.payload.clone();
            if let Err(e) = request.respond(Ok(reply)).await {
                eprintln!("raw: cannot respond: {e}");
            }
        }
    });
    // A flush only writes the SUB to the socket: the first answered request proves the server
    // has it (ours proves it the same way before it says ready). Any later "no responders" is
    // sent again and counted.
    let deadline = Instant::now() + Duration::from_secs(10);
    while let Err(e) = callers.request(Variant::Raw.subject(), body.clone()).await {
        if Instant::now() > deadline {
            return Err(format!("the raw endpoint never answered: {e}").into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok((service, serving))
}

/// Our runtime serving the same endpoint, on a connection of its own, once ready.
async fn ours(server: &NatsServer, args: &Args, variant: Variant) -> Result<Running, BoxError> {
    let client = async_nats::connect(server.url()).await?;
    let mut decl = EndpointDecl::new("bench::echo", &SERVICE, "echo", variant.subject());
    if variant == Variant::OursC64 {
        decl = decl.concurrency(64);
    }
    let work = args.work;
    let topology = Topology::new().endpoint(decl, move |request| {
        Box::pin(async move {
            if !work.is_zero() {
                tokio::time::sleep(work).await;
            }
            Ok::<_, ServiceError>(request.payload().clone())
        })
    });
    let runtime = Runtime::builder(client).topology(topology).build()?;
    let health = runtime.health();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(runtime.run_until(async move {
        let _ = stopped.await;
    }));
    health.wait_ready(Duration::from_secs(30)).await?;
    Ok((stop, running))
}

/// `callers` tasks send `total / callers` requests each to `variant`, one after the other; to
/// raw, a request answered "no responders" is sent again (and counted), to ours it fails the
/// run.
async fn call(
    client: &async_nats::Client,
    variant: Variant,
    total: usize,
    callers: usize,
    body: Bytes,
) -> Result<Sample, BoxError> {
    call_until(client, variant, total, callers, body, &Arc::default()).await
}

/// As [`call`], and every caller also stops once `done` is set; sets `done` when it has sent
/// all of its requests.
async fn call_until(
    client: &async_nats::Client,
    variant: Variant,
    total: usize,
    callers: usize,
    body: Bytes,
    done: &Arc<AtomicBool>,
) -> Result<Sample, BoxError> {
    let (subject, resend) = (variant.subject(), variant == Variant::Raw);
    let per_caller = (total / callers).max(1);
    let started = Instant::now();
    let tasks: Vec<_> = (0..callers)
        .map(|_| {
            let client = client.clone();
            let body = body.clone();
            let done = done.clone();
            tokio::spawn(async move {
                let mut latencies = Vec::with_capacity(per_caller);
                let mut resent = 0;
                for _ in 0..per_caller {
                    if done.load(Ordering::Relaxed) {
                        break;
                    }
                    let sent = Instant::now();
                    let reply = loop {
                        match client.request(subject, body.clone()).await {
                            Ok(reply) => break reply,
                            Err(e)
                                if resend
                                    && e.kind() == async_nats::RequestErrorKind::NoResponders =>
                            {
                                resent += 1
                            }
                            Err(e) => return Err(format!("a request to {subject}: {e}").into()),
                        }
                    };
                    latencies.push(sent.elapsed());
                    if reply.payload.len() != body.len() {
                        return Err::<_, BoxError>(
                            format!(
                                "{subject}: a reply of {} bytes to a request of {}",
                                reply.payload.len(),
                                body.len()
                            )
                            .into(),
                        );
                    }
                }
                Ok((latencies, resent))
            })
        })
        .collect();
    let mut latencies = Vec::with_capacity(per_caller * callers);
    let mut resent = 0;
    for task in tasks {
        let (some, again) = task.await??;
        latencies.extend(some);
        resent += again;
    }
    let elapsed = started.elapsed();
    done.store(true, Ordering::Relaxed);
    latencies.sort_unstable();
    let at = |q: f64| latencies[((latencies.len() as f64 * q) as usize).min(latencies.len() - 1)];
    Ok(Sample {
        rate: latencies.len() as f64 / elapsed.as_secs_f64(),
        p50: at(0.50),
        p99: at(0.99),
        resent,
    })
}

/// Per-round ratios: their median, lowest and highest.
struct Paired {
    median: f64,
    low: f64,
    high: f64,
}

impl Paired {
    fn of(ratios: Vec<f64>) -> Paired {
        Paired {
            low: ratios.iter().copied().fold(f64::INFINITY, f64::min),
            high: ratios.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            median: median(ratios),
        }
    }
}

impl std::fmt::Display for Paired {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:.3} ({:.2}-{:.2})", self.median, self.low, self.high)
    }
}

fn rounded(ratio: f64) -> f64 {
    (ratio * 1000.0).round() / 1000.0
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}
