//! Quickstart: declare a stream and a queue consumer, publish a few events, watch them handled.
//!
//! ```text
//! cargo run --example quickstart                     # starts an embedded nats-server
//! NATS_URL=nats://127.0.0.1:4222 cargo run --example quickstart
//! ```
//!
//! With the `cli` feature, its first line of `main` gives it the operator subcommands of
//! `nats_topology::cli`, which work against `NATS_URL` (or `--server`) and exit:
//!
//! ```text
//! cargo run --example quickstart --features cli -- plan       # what provisioning would do
//! cargo run --example quickstart --features cli -- provision  # provision, exit 0 or 1
//! cargo run --example quickstart --features cli -- inspect    # the consumers on the server
//! cargo run --example quickstart --features cli -- health     # streams and consumers, exit 0/1
//! cargo run --example quickstart --features cli -- export out/   # AsyncAPI + NATS JSON files
//! ```

use std::time::Duration;

use nats_topology::{Context, HandlerError, Runtime, kv_bucket, queue_consumer, stream};
use nats_topology_testkit::NatsServer;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

/// The stream this service owns: created (or updated) at start-up.
#[stream(name = "QUICKSTART_SIGNUPS", subjects = ["quickstart.signups.>"])]
struct Signups;

/// State every instance shares: the address each signup was welcomed at (a key-value bucket,
/// created at start-up like the stream).
#[kv_bucket(name = "QUICKSTART_WELCOMED", value = String)]
struct Welcomed;

#[derive(Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
struct SignedUp {
    id: u32,
    email: String,
}

/// Shared work: however many instances run, each event is handled by one of them.
#[queue_consumer(stream = Signups, group = "welcome-mailer", subject = "quickstart.signups.created")]
async fn send_welcome(event: SignedUp, cx: Context) -> Result<(), HandlerError> {
    println!(
        "handled signup #{} <{}> (stream sequence {}, delivery {})",
        event.id,
        event.email,
        cx.stream_sequence(),
        cx.delivered()
    );
    Welcomed::kv(&cx)
        .put(&format!("signup.{}", event.id), &event.email)
        .await?;
    if let Some(done) = cx.state::<mpsc::UnboundedSender<u32>>() {
        let _ = done.send(event.id);
    }
    Ok(())
}

const EVENTS: u32 = 5;

/// What to say about an argument the quickstart does not take.
#[cfg(feature = "cli")]
fn unknown_argument(flag: &str) -> String {
    format!(
        "unknown argument `{flag}`; expected one of the subcommands {:?}, or none",
        nats_topology::cli::SUBCOMMANDS
    )
}

/// What to say about an argument the quickstart does not take: without the `cli` feature it
/// takes none.
#[cfg(not(feature = "cli"))]
fn unknown_argument(flag: &str) -> String {
    format!(
        "unknown argument `{flag}`; the operator subcommands (plan, provision, inspect, health, \
         export) come with the `cli` feature: cargo run --example quickstart --features cli -- {flag}"
    )
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // `quickstart plan|inspect|export|provision|health`: runs the subcommand and exits.
    #[cfg(feature = "cli")]
    nats_topology::cli::run_or_continue().await;

    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();

    if let Some(flag) = std::env::args().nth(1) {
        return Err(unknown_argument(&flag).into());
    }

    // An embedded server unless NATS_URL names one; it stops when `_server` drops.
    let (url, _server) = match std::env::var("NATS_URL") {
        Ok(url) => (url, None),
        Err(_) => {
            let server = NatsServer::start().await?;
            println!("started an embedded nats-server at {}", server.url());
            (server.url(), Some(server))
        }
    };
    // Retries the initial connection and reconnects without limit, as a service should. With
    // NATS_URL set, the nats CLI's other variables apply too (NATS_USER, NATS_CREDS, NATS_CA,
    // NATS_INBOX_PREFIX, ...: see README "Connecting").
    let client = match &_server {
        Some(_) => nats_topology::connect(&url).await?,
        None => nats_topology::connect_from_env().await?,
    };

    let (done_tx, mut done) = mpsc::unbounded_channel::<u32>();
    let runtime = Runtime::builder(client.clone()).state(done_tx).build()?;
    let health = runtime.health();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(runtime.run_until(async move {
        let _ = stopped.await;
    }));

    // Every consumer runs (or the error says which does not, and why).
    health.wait_ready(Duration::from_secs(30)).await?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);

    let js = nats_topology::async_nats::jetstream::new(client.clone());
    for id in 1..=EVENTS {
        let event = SignedUp {
            id,
            email: format!("user{id}@example.com"),
        };
        js.publish(
            "quickstart.signups.created",
            serde_json::to_vec(&event)?.into(),
        )
        .await?
        .await?;
        println!("published signup #{id}");
    }

    for _ in 0..EVENTS {
        tokio::time::timeout_at(deadline, done.recv())
            .await
            .map_err(|_| format!("not every event was handled within 30 s:\n{health}"))?;
    }
    let _ = stop.send(());
    running.await??;
    println!("all {EVENTS} events handled; drained cleanly");
    Ok(())
}
