//! Request/reply benchmark: a raw async-nats `service` endpoint against our `#[endpoint]`
//! runtime, side by side in one run, on one server, with the same callers.
//!
//! ```text
//! cargo run --release --example bench_requests -- [--requests 20000] [--callers 1,64]
//!     [--reps 3] [--work-us 0] [--size 128]
//! ```
//!
//! Each round runs every variant at every caller count, in turn: **raw** is
//! `client.service_builder().start(..)` with one endpoint and the loop a user writes
//! (`while let Some(request) = endpoint.next().await { request.respond(Ok(body)).await }`);
//! **ours** is a `Runtime` serving the same endpoint at the defaults a user gets (concurrency
//! 1); **ours c64** the same endpoint declared with `concurrency = 64`. The handler echoes the
//! request (after `--work-us` of awaited sleep, when set; the raw loop then handles requests
//! one at a time, as its loop does). The callers are `C` tasks on one client connection of
//! their own, each sending `--requests / C` requests one after the other and timing each one.
//! The tables show the medians over rounds of throughput (requests per second) and of the
//! rounds' p50 and p99 latencies; the last line is one JSON object with the ratios (ours over
//! raw: throughput, and p99 latency).

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

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args = args();
    let server = NatsServer::start().await?;
    let callers_client = async_nats::connect(server.url()).await?;
    let body = Bytes::from(vec![b'x'; args.size]);

    // (variant, callers) -> samples
    let mut samples: Vec<((Variant, usize), Vec<Sample>)> = Vec::new();
    for round in 0..args.reps {
        for &callers in &args.callers {
            // Alternate which goes first, so that neither always meets a warmer server.
            let mut order = Variant::ALL.to_vec();
            if round % 2 == 1 {
                order.reverse();
            }
            for variant in order {
                let sample = match variant {
                    Variant::Raw => {
                        raw(&server, &callers_client, &args, callers, body.clone()).await?
                    }
                    Variant::Ours | Variant::OursC64 => {
                        ours(
                            &server,
                            &callers_client,
                            &args,
                            variant,
                            callers,
                            body.clone(),
                        )
                        .await?
                    }
                };
                eprintln!(
                    "round {} {:<24} callers {:>3}: {:>9.0} req/s  p50 {:>8.1?}  p99 {:>8.1?}{}",
                    round + 1,
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
                match samples
                    .iter_mut()
                    .find(|(key, _)| *key == (variant, callers))
                {
                    Some((_, list)) => list.push(sample),
                    None => samples.push(((variant, callers), vec![sample])),
                }
            }
        }
    }

    println!(
        "\nrequests {} per round, body {} bytes, handler work {:?}, medians of {} rounds",
        args.requests, args.size, args.work, args.reps
    );
    println!(
        "{:<24} {:>7} {:>12} {:>10} {:>10} {:>9} {:>9}",
        "variant", "callers", "req/s", "p50", "p99", "x raw", "p99 x raw"
    );
    let median_of = |variant: Variant, callers: usize| -> Sample {
        let list = &samples
            .iter()
            .find(|(key, _)| *key == (variant, callers))
            .expect("measured")
            .1;
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
    let mut json = serde_json::Map::new();
    for &callers in &args.callers {
        let raw = median_of(Variant::Raw, callers);
        json.insert(format!("raw_resent_c{callers}"), raw.resent.into());
        for variant in Variant::ALL {
            let m = median_of(variant, callers);
            let rate_ratio = m.rate / raw.rate;
            let p99_ratio = m.p99.as_secs_f64() / raw.p99.as_secs_f64();
            println!(
                "{:<24} {:>7} {:>12.0} {:>10.1?} {:>10.1?} {:>9.3} {:>9.3}",
                variant.label(),
                callers,
                m.rate,
                m.p50,
                m.p99,
                rate_ratio,
                p99_ratio
            );
            let key = match variant {
                Variant::Raw => "raw",
                Variant::Ours => "ours",
                Variant::OursC64 => "ours_c64",
            };
            json.insert(format!("{key}_rate_c{callers}"), m.rate.round().into());
            json.insert(
                format!("{key}_p99_us_c{callers}"),
                (m.p99.as_secs_f64() * 1e6).round().into(),
            );
            if variant != Variant::Raw {
                json.insert(
                    format!("ratio_{key}_c{callers}"),
                    ((rate_ratio * 1000.0).round() / 1000.0).into(),
                );
                json.insert(
                    format!("p99_ratio_{key}_c{callers}"),
                    ((p99_ratio * 1000.0).round() / 1000.0).into(),
                );
            }
        }
    }
    println!("{}", serde_json::Value::Object(json));
    Ok(())
}

/// The raw async-nats service endpoint, served on a connection of its own.
async fn raw(
    server: &NatsServer,
    callers: &async_nats::Client,
    args: &Args,
    concurrency: usize,
    body: Bytes,
) -> Result<Sample, BoxError> {
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
    let sample = call(
        callers,
        Variant::Raw.subject(),
        args.requests,
        concurrency,
        body,
        true,
    )
    .await;
    serving.abort();
    service.stop().await?;
    drop(client);
    sample
}

/// Our runtime serving the same endpoint.
async fn ours(
    server: &NatsServer,
    callers: &async_nats::Client,
    args: &Args,
    variant: Variant,
    concurrency: usize,
    body: Bytes,
) -> Result<Sample, BoxError> {
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
    let sample = call(
        callers,
        variant.subject(),
        args.requests,
        concurrency,
        body,
        false,
    )
    .await;
    let _ = stop.send(());
    running.await??;
    sample
}

/// `callers` tasks send `total / callers` requests each, one after the other; with `resend`, a
/// request answered "no responders" is sent again (and counted), else it fails the run.
async fn call(
    client: &async_nats::Client,
    subject: &'static str,
    total: usize,
    callers: usize,
    body: Bytes,
    resend: bool,
) -> Result<Sample, BoxError> {
    let per_caller = (total / callers).max(1);
    let started = Instant::now();
    let tasks: Vec<_> = (0..callers)
        .map(|_| {
            let client = client.clone();
            let body = body.clone();
            tokio::spawn(async move {
                let mut latencies = Vec::with_capacity(per_caller);
                let mut resent = 0;
                for _ in 0..per_caller {
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
    latencies.sort_unstable();
    let at = |q: f64| latencies[((latencies.len() as f64 * q) as usize).min(latencies.len() - 1)];
    Ok(Sample {
        rate: latencies.len() as f64 / elapsed.as_secs_f64(),
        p50: at(0.50),
        p99: at(0.99),
        resent,
    })
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
