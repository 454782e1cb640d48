//! The daemon simulator: asked (over core NATS, `daemon.cmd.sync`) to sync a member, it answers
//! at once, and after a short delay publishes `daemon.sync.complete` to JetStream, as the real
//! daemon does when a member's data has arrived.

use std::time::Duration;

use futures::StreamExt;
use nats_topology::async_nats::{self, jetstream};
use serde::{Deserialize, Serialize};
use tokio::task::JoinSet;

use crate::topology::{SYNC_COMPLETE, SyncComplete, now_ms, valid_member};

/// Where a replica asks the daemon to sync a member (a request; the reply says it was taken).
pub const SYNC_REQUEST: &str = "daemon.cmd.sync";

/// A request on [`SYNC_REQUEST`].
#[derive(Debug, Serialize, Deserialize)]
pub struct SyncRequest {
    pub member: String,
}

/// The running simulator; [`Daemon::stop`] ends it.
pub struct Daemon {
    task: tokio::task::JoinHandle<()>,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl Daemon {
    /// Subscribes (queue group `daemon`, so that two simulators never sync a member twice) and
    /// answers requests until stopped; each sync completes `delay` after its request.
    pub async fn start(client: async_nats::Client, delay: Duration) -> Result<Daemon, BoxError> {
        let mut requests = client
            .queue_subscribe(SYNC_REQUEST, "daemon".into())
            .await?;
        let js = jetstream::new(client.clone());
        // The subscription is known to the server before anyone is told the daemon runs: a
        // round trip on the same connection (the server handles its commands in order; a
        // `flush` only writes them out).
        js.query_account().await?;
        let task = tokio::spawn(async move {
            let mut syncs = JoinSet::new();
            loop {
                tokio::select! {
                    request = requests.next() => {
                        let Some(request) = request else { break };
                        let member = serde_json::from_slice::<SyncRequest>(&request.payload)
                            .ok()
                            .map(|r| r.member)
                            .filter(|m| valid_member(m));
                        let answer = if member.is_some() { "accepted" } else { "not a member" };
                        if let Some(reply) = request.reply {
                            let _ = client.publish(reply, answer.into()).await;
                        }
                        if let Some(member) = member {
                            syncs.spawn(complete(js.clone(), member, now_ms(), delay));
                        }
                    }
                    Some(_) = syncs.join_next() => {}
                }
            }
        });
        Ok(Daemon { task })
    }

    /// Stops answering; syncs not yet completed are dropped (as if the daemon stopped).
    pub async fn stop(self) {
        self.task.abort();
        let _ = self.task.await;
    }
}

/// Publishes the completion after `delay` (the simulated sync), retrying while the stream is
/// briefly unavailable (a leader election).
async fn complete(js: jetstream::Context, member: String, requested_at_ms: u64, delay: Duration) {
    tokio::time::sleep(delay).await;
    let event = SyncComplete {
        member,
        requested_at_ms,
    };
    let payload = serde_json::to_vec(&event).expect("the event serializes");
    for attempt in 1..=10u32 {
        let acked = match js.publish(SYNC_COMPLETE, payload.clone().into()).await {
            Ok(ack) => ack.await.map(|_| ()).map_err(BoxError::from),
            Err(e) => Err(e.into()),
        };
        match acked {
            Ok(()) => return,
            Err(e) if attempt < 10 => {
                eprintln!(
                    "daemon: publishing the sync of {} failed ({e}); again",
                    event.member
                );
                tokio::time::sleep(Duration::from_millis(200 * u64::from(attempt))).await;
            }
            Err(e) => eprintln!("daemon: gave up the sync of {}: {e}", event.member),
        }
    }
}
