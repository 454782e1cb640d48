//! One replica process: the runtime (queue consumer and relay), the web server, and the
//! shutdown: on SIGINT/SIGTERM, or when the launcher closes its stdin (or dies), the pages
//! are told goodbye, the web server stops and the runtime drains.
//!
//! Its stdin carries `peers <origin>,<origin>` lines from the launcher; its stdout carries
//! one [`LISTENING`] line once the replica is ready.

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use nats_topology::Runtime;
use tokio::sync::{mpsc, watch};

use crate::server::{self, Web};
use crate::topology::Hub;

/// Set in a replica process: its name (`a`, `b`).
pub const REPLICA_ENV: &str = "SYNC_STATUS_REPLICA";
/// Set in a replica process: the NATS servers, comma-separated.
pub const SERVERS_ENV: &str = "SYNC_STATUS_SERVERS";
/// Starts the line on which a ready replica reports its URL.
pub const LISTENING: &str = "sync-status replica listening on ";

/// How long the drain may take after the stop (the runtime's grace period is 5 s).
const DRAIN_TIMEOUT: Duration = Duration::from_secs(15);

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Runs the replica named by [`REPLICA_ENV`] on the servers of [`SERVERS_ENV`] until shutdown.
pub async fn run_from_env() -> Result<(), BoxError> {
    let name = std::env::var(REPLICA_ENV).map_err(|_| format!("{REPLICA_ENV} is not set"))?;
    let servers = std::env::var(SERVERS_ENV).map_err(|_| format!("{SERVERS_ENV} is not set"))?;
    run(&name, &servers).await
}

/// Runs replica `name` on `servers` until SIGINT, SIGTERM or the end of stdin, then drains.
pub async fn run(name: &str, servers: &str) -> Result<(), BoxError> {
    let client = nats_topology::connect(servers).await?;
    let hub = Arc::new(Hub::new(name));
    let runtime = Runtime::builder(client.clone())
        .state(hub.clone())
        .grace_period(Duration::from_secs(5))
        .build()?;
    let relay = runtime
        .relay("relay_status")
        .ok_or("the topology has one #[broadcast] fn relay_status")?;
    let health = runtime.health();

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let origin = format!("http://{}", listener.local_addr()?);
    let (peers_tx, peers) = watch::channel(vec![origin.clone()]);
    let (stop_tx, stop) = watch::channel(false);
    let mut launcher = launcher_lines();

    let web = Arc::new(Web {
        hub,
        relay,
        client,
        peers,
        stop: stop.clone(),
        next_session: AtomicU64::new(0),
    });
    let serve = {
        let mut stop = stop.clone();
        axum::serve(listener, server::router(web)).with_graceful_shutdown(async move {
            let _ = stop.wait_for(|stop| *stop).await;
        })
    };
    let run = {
        let mut stop = stop.clone();
        runtime.run_until(async move {
            let _ = stop.wait_for(|stop| *stop).await;
        })
    };
    let serving = tokio::spawn(async move { serve.await });
    let running = tokio::spawn(run);

    // The stop: a signal, or the launcher's stdin closing; meanwhile, its peer lists.
    let own = origin.clone();
    let control = tokio::spawn(async move {
        let origin = own;
        let mut signals = Signals::listen();
        loop {
            tokio::select! {
                () = signals.next() => break,
                line = launcher.recv() => match line {
                    Some(line) => {
                        if let Some(list) = line.strip_prefix("peers ") {
                            let mut origins = vec![origin.clone()];
                            origins.extend(
                                list.split(',')
                                    .map(|o| o.trim().trim_end_matches('/').to_owned())
                                    .filter(|o| !o.is_empty() && *o != origin),
                            );
                            let _ = peers_tx.send(origins);
                        }
                    }
                    None => break,
                },
            }
        }
        let _ = stop_tx.send(true);
    });

    // Ready once every consumer runs (the streams exist, the relay receives); a replica that
    // stops first (a signal, the launcher gone) never says so.
    let mut stopped = stop.clone();
    let ready = tokio::select! {
        ready = health.wait_ready(Duration::from_secs(60)) => ready.map_err(|e| e.to_string()),
        _ = stopped.wait_for(|stop| *stop) => Err("stopped before it was ready".to_owned()),
    };
    match ready {
        Ok(()) => {
            let mut out = std::io::stdout().lock();
            // Written to the process's stdout directly (not captured by a test harness).
            writeln!(out, "{LISTENING}{origin}/")?;
            out.flush()?;
        }
        Err(why) => eprintln!("replica {name}: not ready: {why}\n{health}"),
    }

    // The drain is bounded: with the cluster gone, the relay cannot be deleted (the server
    // reaps it after its inactivity threshold anyway).
    let mut stopped = stop.clone();
    let _ = stopped.wait_for(|stop| *stop).await;
    let drained = tokio::time::timeout(DRAIN_TIMEOUT, async { (serving.await, running.await) });
    control.abort();
    let (served, ran) = drained
        .await
        .map_err(|_| format!("replica {name}: did not drain within {DRAIN_TIMEOUT:?}"))?;
    served??;
    ran??;
    eprintln!("replica {name}: drained");
    Ok(())
}

/// The launcher's stdin, line by line; closed when stdin ends (the launcher closed it, or
/// died). Read on a thread of its own: std's stdin blocks, and a blocked `spawn_blocking`
/// task would keep the runtime from shutting down.
fn launcher_lines() -> mpsc::UnboundedReceiver<String> {
    let (tx, rx) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// SIGINT and SIGTERM.
struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
}

impl Signals {
    fn listen() -> Signals {
        use tokio::signal::unix::{SignalKind, signal};
        Signals {
            interrupt: signal(SignalKind::interrupt()).expect("listen for SIGINT"),
            terminate: signal(SignalKind::terminate()).expect("listen for SIGTERM"),
        }
    }

    async fn next(&mut self) {
        tokio::select! {
            _ = self.interrupt.recv() => {}
            _ = self.terminate.recv() => {}
        }
    }
}
