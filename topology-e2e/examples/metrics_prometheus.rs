//! Metrics in Prometheus' text format: install `metrics-exporter-prometheus` as the recorder
//! (with its HTTP listener), run a queue consumer, handle a few orders (one fails once and is
//! redelivered), print the scrape URL and what a scrape of it returns, then drain and exit.
//!
//! ```text
//! cargo run --example metrics_prometheus                  # starts an embedded nats-server
//! NATS_URL=nats://127.0.0.1:4222 cargo run --example metrics_prometheus
//! ```
//!
//! The names, types and labels are listed in `docs/METRICS.md`.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
use nats_topology::telemetry::names;
use nats_topology::{Context, HandlerError, Runtime, queue_consumer, stream};
use nats_topology_testkit::NatsServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[stream(name = "METRICS_EXAMPLE", subjects = ["metrics.example.>"])]
struct Orders;

/// Order 3 fails on its first delivery: the scrape shows it failed, retried and redelivered.
#[queue_consumer(stream = Orders, group = "order-taker", subject = "metrics.example.orders",
                 backoff = ["100ms"], concurrency = 4)]
async fn take_order(order: u32, cx: Context) -> Result<(), HandlerError> {
    if order == 3 && cx.delivered() == 1 {
        return Err(HandlerError::new("the warehouse did not answer; try again"));
    }
    if let Some(taken) = cx.state::<mpsc::UnboundedSender<u32>>() {
        let _ = taken.send(order);
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    // A free port for the scrape endpoint.
    let listen = {
        let probe = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        probe.local_addr()?
    };
    // The recorder must be installed before the runtime starts: consumers register their
    // metrics with the recorder installed when they start.
    PrometheusBuilder::new()
        .with_http_listener(listen)
        // A histogram with buckets (the exporter's default is a summary).
        .set_buckets_for_metric(
            Matcher::Full(names::HANDLER_DURATION.to_owned()),
            &[0.001, 0.005, 0.025, 0.1, 0.5, 2.5],
        )?
        .install()?;
    println!("scrape URL: http://{listen}/metrics");

    // NATS_URL, or an embedded server of our own.
    let embedded = match std::env::var("NATS_URL") {
        Ok(_) => None,
        Err(_) => Some(NatsServer::start().await?),
    };
    let url = match &embedded {
        Some(server) => server.url(),
        None => std::env::var("NATS_URL")?,
    };
    let client = nats_topology::async_nats::connect(url).await?;
    let (taken_tx, mut taken) = mpsc::unbounded_channel::<u32>();
    let runtime = Runtime::builder(client.clone()).state(taken_tx).build()?;
    let health = runtime.health();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(runtime.run_until(async move {
        let _ = stopped.await;
    }));
    health.wait_ready(Duration::from_secs(30)).await?;

    let js = nats_topology::async_nats::jetstream::new(client);
    for order in 1..=5u32 {
        js.publish("metrics.example.orders", order.to_string().into())
            .await?
            .await?;
    }
    let all_taken = async {
        for _ in 1..=5 {
            taken.recv().await;
        }
    };
    if tokio::time::timeout(Duration::from_secs(30), all_taken)
        .await
        .is_err()
    {
        return Err(format!("orders not handled in 30 s: {}", health.consumers()[0]).into());
    }

    println!("--- GET http://{listen}/metrics (nats_topology_ lines) ---");
    for line in scrape(listen).await?.lines() {
        if line.contains("nats_topology_") {
            println!("{line}");
        }
    }

    let _ = stop.send(());
    run.await??;
    println!("drained");
    Ok(())
}

/// One HTTP/1.0 GET of the scrape endpoint; the body.
async fn scrape(addr: SocketAddr) -> Result<String, BoxError> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream
        .write_all(format!("GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or("the scrape endpoint answered without a body")?;
    if !head.starts_with("HTTP/1.1 200") && !head.starts_with("HTTP/1.0 200") {
        return Err(format!("the scrape endpoint answered: {head}").into());
    }
    Ok(body.to_owned())
}
