//! Feature flags every replica applies as they change: the flags live in a key-value bucket,
//! a `#[kv_watch]` on every replica applies each change (starting with the current flags),
//! and a change of rollout is a compare-and-swap, so two operators at once never lose one.
//!
//! ```text
//! cargo run --example feature_flags                        # starts an embedded nats-server
//! NATS_URL=nats://127.0.0.1:4222 cargo run --example feature_flags
//! ```
//!
//! It runs two replicas in this process (two runtimes, as two processes would), changes the
//! flags, and prints what each replica applied; it exits once both hold the same flags.

use std::collections::BTreeMap;
use std::time::Duration;

use nats_topology::bucket::{Kv, KvEntry, KvError, KvErrorKind};
use nats_topology::{HandlerError, Runtime, State, kv_bucket, kv_watch};
use nats_topology_testkit::NatsServer;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

/// One feature flag.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Flag {
    enabled: bool,
    /// The percentage of users it is enabled for.
    rollout: u8,
}

/// The flags, shared by every replica: `flag.<name>` keys, JSON values.
#[kv_bucket(name = "FEATURE_FLAGS", value = Flag, history = 5)]
struct FeatureFlags;

/// What one replica serves with: the flags as last applied (a `watch` channel, so that the
/// rest of the replica can read them, or wait for a change).
#[derive(Clone)]
struct Replica {
    name: &'static str,
    flags: watch::Sender<BTreeMap<String, Flag>>,
}

/// Runs on every replica: each one applies every change, in order, starting with the flags as
/// they are when it starts; a deleted flag is removed.
#[kv_watch(bucket = FeatureFlags, keys = "flag.>")]
async fn apply_flag(entry: KvEntry<Flag>, replica: State<Replica>) -> Result<(), HandlerError> {
    let name = entry.key.trim_start_matches("flag.").to_owned();
    println!(
        "replica {}: revision {}: {name} {}",
        replica.name,
        entry.revision,
        match &entry.value {
            Some(flag) => format!("= {flag:?}"),
            None => format!("{:?}d", entry.operation).to_lowercase(),
        }
    );
    replica.flags.send_modify(|flags| match entry.value {
        Some(flag) => {
            flags.insert(name, flag);
        }
        None => {
            flags.remove(&name);
        }
    });
    Ok(())
}

/// Raises the rollout of `flag` by `step` points (at most 100), guarded by compare-and-swap:
/// when another writer changed the flag since it was read, it is read again and the step
/// applied to what that writer wrote. Returns the revision written.
async fn raise_rollout(flags: &Kv<Flag>, flag: &str, step: u8) -> Result<u64, KvError> {
    let key = format!("flag.{flag}");
    loop {
        let entry = flags.entry(&key).await?;
        let (mut value, revision) = match entry {
            Some(KvEntry {
                value: Some(value),
                revision,
                ..
            }) => (value, revision),
            _ => {
                // No such flag yet: create it (a conflict if another writer just did).
                let value = Flag {
                    enabled: true,
                    rollout: step.min(100),
                };
                match flags.create(&key, &value).await {
                    Ok(revision) => return Ok(revision),
                    Err(e) if e.kind() == KvErrorKind::AlreadyExists => continue,
                    Err(e) => return Err(e),
                }
            }
        };
        value.rollout = value.rollout.saturating_add(step).min(100);
        match flags.update(&key, &value, revision).await {
            Ok(revision) => return Ok(revision),
            Err(e) if matches!(e.kind(), KvErrorKind::Conflict { .. }) => {
                println!("operator: {flag} changed under us ({e}); reading it again");
            }
            Err(e) => return Err(e),
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();

    // An embedded server unless NATS_URL names one; it stops when `_server` drops.
    let (url, _server) = match std::env::var("NATS_URL") {
        Ok(url) => (url, None),
        Err(_) => {
            let server = NatsServer::start().await?;
            println!("started an embedded nats-server at {}", server.url());
            (server.url(), Some(server))
        }
    };

    // Two replicas (two processes in production), each applying every change.
    let mut replicas = Vec::new();
    let mut runtimes = Vec::new();
    for name in ["a", "b"] {
        let replica = Replica {
            name,
            flags: watch::Sender::new(BTreeMap::new()),
        };
        runtimes.push(
            Runtime::builder(nats_topology::connect(&url).await?)
                .state(replica.clone())
                .build()?,
        );
        replicas.push(replica);
    }
    // A flag set before the replicas start: each one starts with it.
    runtimes[0].provision().await?;
    let flags = FeatureFlags::kv(&runtimes[0]);
    flags
        .put(
            "flag.dark_mode",
            &Flag {
                enabled: true,
                rollout: 100,
            },
        )
        .await?;
    let (stop, stopped) = watch::channel(false);
    let mut runs = Vec::new();
    for runtime in runtimes {
        let health = runtime.health();
        let mut stopped = stopped.clone();
        runs.push(tokio::spawn(runtime.run_until(async move {
            let _ = stopped.wait_for(|stop| *stop).await;
        })));
        health.wait_ready(Duration::from_secs(30)).await?;
    }

    // An operator adds a flag; two others raise its rollout at once, each by 25 points: with
    // compare-and-swap neither raise is lost, whichever order they land in.
    flags
        .put(
            "flag.new_checkout",
            &Flag {
                enabled: true,
                rollout: 0,
            },
        )
        .await?;
    let (one, two) = tokio::join!(
        raise_rollout(&flags, "new_checkout", 25),
        raise_rollout(&flags, "new_checkout", 25)
    );
    println!(
        "operator: new_checkout raised twice (revisions {} and {})",
        one?, two?
    );
    flags.delete("flag.dark_mode").await?;

    // Every replica ends with the same flags: new_checkout at 50%, dark_mode gone.
    let expected = BTreeMap::from([(
        "new_checkout".to_owned(),
        Flag {
            enabled: true,
            rollout: 50,
        },
    )]);
    for replica in &replicas {
        let mut applied = replica.flags.subscribe();
        tokio::time::timeout(
            Duration::from_secs(30),
            applied.wait_for(|flags| *flags == expected),
        )
        .await
        .map_err(|_| {
            format!(
                "replica {} did not apply every change in 30 s",
                replica.name
            )
        })??;
        println!("replica {} serves {:?}", replica.name, *applied.borrow());
    }

    stop.send_replace(true);
    for run in runs {
        run.await??;
    }
    Ok(())
}
