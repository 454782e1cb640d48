//! Sync status, end to end: a daemon reports a member's sync; exactly one of two replicas
//! computes the status (a queue consumer); every replica relays it (a broadcast) to the
//! browser tabs it holds for that member, so a tab on either replica shows "done".
//!
//! ```text
//! cargo run --example sync_status                  # starts an embedded 3-node nats cluster
//! NATS_URL=nats://127.0.0.1:4222,nats://127.0.0.1:4223,nats://127.0.0.1:4224 \
//!     cargo run --example sync_status              # a cluster of yours (R3 streams)
//! ```
//!
//! It prints the two replicas' URLs (and their pids). Open both, watch a few members (the same
//! ones, or not), press Sync. Kill a replica (`kill -9 PID`): its tabs reconnect to the other
//! one, and a sync it was doing is finished by the survivor. Ctrl-C stops everything: both
//! replicas drain (their relays are deleted), then the cluster stops.
//!
//! - `topology`: the streams, the queue consumer `compute_status` (group `sync`), the relay
//!   `relay_status` and the per-replica hub of sessions.
//! - `server`: the page and its WebSocket (watching a member ensures the relay).
//! - `daemon`: the daemon simulator.
//! - `replica`: one replica process; `launch`: starting and stopping one from here.

mod daemon;
mod launch;
mod replica;
mod server;
// Shared with the root's tests/permissions_cluster.rs, which runs it under its generated
// permissions: it stays in the root's examples/sync_status/.
#[path = "../../../examples/sync_status/topology.rs"]
mod topology;

use std::time::Duration;

use daemon::Daemon;
use launch::Process;
use nats_topology_testkit::NatsCluster;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Set in the helper process that runs the embedded cluster.
const CLUSTER_ENV: &str = "SYNC_STATUS_CLUSTER";
/// Starts the line on which the embedded cluster reports its servers.
const CLUSTER_READY: &str = "sync-status cluster ready: ";

/// How long the simulated daemon takes to sync a member.
const DAEMON_DELAY: Duration = Duration::from_millis(500);

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    // Re-invoked as a replica, or as the embedded cluster.
    if std::env::var_os(replica::REPLICA_ENV).is_some() {
        return replica::run_from_env().await;
    }
    if std::env::var_os(CLUSTER_ENV).is_some() {
        return run_cluster().await;
    }
    let exe = std::env::current_exe()?;

    // An embedded cluster unless NATS_URL names one. It runs in a helper process of its own
    // (its own process group), so that Ctrl-C does not stop the servers under the replicas'
    // drain: it is stopped last.
    let (servers, cluster) = match std::env::var("NATS_URL") {
        Ok(servers) => (servers, None),
        Err(_) => {
            let env = [(CLUSTER_ENV, "1")];
            let command = tokio::process::Command::new(&exe);
            let cluster = Process::start(command, "the embedded cluster", &env, CLUSTER_READY);
            let cluster = cluster.await?;
            println!(
                "started an embedded 3-node nats cluster: {}",
                cluster.report()
            );
            (cluster.report().to_owned(), Some(cluster))
        }
    };
    let client = nats_topology::connect(&servers).await?;
    let daemon = Daemon::start(client, DAEMON_DELAY).await?;

    let mut replicas = Vec::new();
    for name in ["a", "b"] {
        let replica = Process::replica(tokio::process::Command::new(&exe), name, &servers);
        replicas.push(replica.await?);
    }
    let origins: Vec<String> = replicas.iter().map(|r| r.origin().to_owned()).collect();
    for replica in &mut replicas {
        replica.set_peers(&origins).await?;
    }
    for replica in &replicas {
        println!(
            "{}: {}  (pid {})",
            replica.name,
            replica.url(),
            replica.pid().unwrap_or(0)
        );
    }
    println!("open both URLs, watch a member, press Sync; Ctrl-C stops everything");

    // Until Ctrl-C; a replica killed meanwhile is reported, the other one carries on.
    let mut running: Vec<Process> = replicas;
    loop {
        if running.is_empty() {
            let _ = tokio::signal::ctrl_c().await;
            break;
        }
        let exited = {
            let exits = futures::future::select_all(
                running
                    .iter_mut()
                    .map(|r| Box::pin(async move { (r.name.clone(), r.exited().await) })),
            );
            tokio::select! {
                _ = tokio::signal::ctrl_c() => None,
                ((name, status), _, _) = exits => Some((name, status)),
            }
        };
        let Some((name, status)) = exited else { break };
        println!(
            "{name} exited ({}); the other one carries on",
            describe(status)
        );
        running.retain(|r| r.name != name);
    }

    println!("stopping: the replicas drain");
    let stops = running
        .into_iter()
        .map(|r| async move { (r.name.clone(), r.stop(Duration::from_secs(20)).await) });
    let mut clean = true;
    for (name, stopped) in futures::future::join_all(stops).await {
        match stopped {
            Ok(status) if status.success() => println!("{name} drained and exited"),
            Ok(status) => {
                clean = false;
                println!("{name} exited with {status}");
            }
            Err(e) => {
                clean = false;
                println!("{e}");
            }
        }
    }
    daemon.stop().await;
    if let Some(cluster) = cluster {
        match cluster.stop(Duration::from_secs(20)).await {
            Ok(status) if status.success() => println!("the embedded cluster stopped"),
            Ok(status) => {
                clean = false;
                println!("the embedded cluster exited with {status}");
            }
            Err(e) => {
                clean = false;
                println!("{e}");
            }
        }
    }
    if clean {
        Ok(())
    } else {
        Err("a replica did not stop cleanly".into())
    }
}

/// The embedded cluster's process: starts the nodes, reports their URLs, and stops them (by
/// pid, when the cluster drops) once the launcher closes its stdin or dies.
async fn run_cluster() -> Result<(), BoxError> {
    let cluster = NatsCluster::start().await?;
    println!("{CLUSTER_READY}{}", cluster.urls().join(","));
    tokio::task::spawn_blocking(|| {
        use std::io::BufRead;
        for _ in std::io::stdin().lock().lines().map_while(Result::ok) {}
    })
    .await?;
    drop(cluster);
    Ok(())
}

fn describe(status: std::io::Result<std::process::ExitStatus>) -> String {
    match status {
        Ok(status) => status.to_string(),
        Err(e) => format!("cannot tell: {e}"),
    }
}
