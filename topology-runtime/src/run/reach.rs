//! The reach watch: asks JetStream (`<api prefix>.INFO`, which the meta leader answers)
//! through the runtime's connection every heartbeat, records the answer for health, and moves
//! the connection to another listed server when JetStream has not answered through this one
//! for `move_server_after` while some consumer is not running. A server cut off from its
//! cluster by a partition keeps its clients (nothing closes their connections) and cannot
//! reach the leaders on the other side; another server of the list may. Waiting that long
//! first lets a leader election, which leaves JetStream unanswered for a few seconds on every
//! server (4 to 9 s of Raft election timeout), pass without moving anyone.

use std::sync::Arc;
use std::time::Duration;

use async_nats::connection::State;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::Inner;
use crate::health::ConsumerState;

/// Watches until `cancel` (see the module documentation).
pub(super) async fn watch_reach(inner: Arc<Inner>, cancel: CancellationToken) {
    let client = &inner.client;
    let shared = &inner.health.shared;
    let every = inner.settings.heartbeat;
    let subject = format!(
        "{}.INFO",
        inner.ensurer.provisioner().jetstream_api().prefix()
    );
    let mut ticker = tokio::time::interval(every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = cancel.cancelled() => return,
        }
        // A lost connection is the client's own to re-establish.
        if client.connection_state() != State::Connected {
            continue;
        }
        let server = server_of(client);
        let answer = tokio::select! {
            answer = ask(client, &subject, every) => answer,
            _ = cancel.cancelled() => return,
        };
        let why = match answer {
            Ok(()) => {
                shared.reach.answered(server);
                shared.changed();
                continue;
            }
            Err(why) => why,
        };
        let silent = shared.reach.unanswered(server.clone(), why.clone());
        let move_after = inner.settings.move_after;
        if silent < move_after {
            shared.reach.act(format!(
                "moving to another listed server if it lasts {move_after:?} while a consumer does not run"
            ));
        } else if !inner.health.slots.iter().any(|slot| waits(&slot.state())) {
            shared.reach.act("not moving: every consumer runs");
        } else {
            let pool = client
                .server_pool()
                .await
                .map(|pool| pool.into_iter().map(|s| s.addr).collect::<Vec<_>>())
                .unwrap_or_default();
            if pool.len() < 2 {
                shared
                    .reach
                    .act("this is the only server listed: waiting for it to reach JetStream");
            } else {
                shared.reach.act("moving to another listed server");
                shared.changed();
                tracing::warn!(%server, ?silent, error = %why, "JetStream does not answer through this server while consumers wait: moving to another listed server");
                let timeout = inner.ensurer.policy().request_timeout;
                if let Some(to) = move_away(client, pool, timeout).await {
                    tracing::info!(from = %server, %to, "moved the connection to another server");
                    shared.reach.moved();
                }
            }
        }
        shared.changed();
    }
}

/// Whether a consumer in this state waits for JetStream (it should run and does not).
fn waits(state: &ConsumerState) -> bool {
    matches!(
        state,
        ConsumerState::Stalled { .. }
            | ConsumerState::Retrying { .. }
            | ConsumerState::Provisioning
    )
}

/// The server the client is on, as it names itself.
fn server_of(client: &async_nats::Client) -> String {
    let info = client.server_info();
    format!("{} ({}:{})", info.server_name, info.host, info.port)
}

/// Whether JetStream answers `<prefix>.INFO` within `timeout`, else why not.
async fn ask(client: &async_nats::Client, subject: &str, timeout: Duration) -> Result<(), String> {
    let request = async_nats::Request::new().timeout(Some(timeout));
    let reply = match client.send_request(subject.to_owned(), request).await {
        Ok(reply) => reply,
        Err(e) if e.kind() == async_nats::RequestErrorKind::TimedOut => {
            return Err(format!("no answer within {timeout:?}"));
        }
        Err(e) if e.kind() == async_nats::RequestErrorKind::NoResponders => {
            return Err("no responders: JetStream is not enabled, or not reachable".to_owned());
        }
        Err(e) => return Err(e.to_string()),
    };
    let answer: serde_json::Value = serde_json::from_slice(&reply.payload)
        .map_err(|e| format!("an answer that is not JSON: {e}"))?;
    match answer.get("error") {
        None => Ok(()),
        Some(error) => Err(format!(
            "{} (error {})",
            error["description"].as_str().unwrap_or("an error"),
            error["err_code"]
        )),
    }
}

/// Reconnects the client to another server of `pool`: each attempt lists the servers in
/// another order (a client that keeps its list's order connects to the first that answers;
/// one that shuffles may pick the same again) and forces a reconnection, until the client is
/// on another server. Returns the new server, if it moved.
async fn move_away(
    client: &async_nats::Client,
    mut pool: Vec<async_nats::ServerAddr>,
    timeout: Duration,
) -> Option<String> {
    let from = client.server_info();
    for _ in 0..pool.len() {
        pool.rotate_left(1);
        if client.set_server_pool(pool.clone()).await.is_err()
            || client.force_reconnect().await.is_err()
        {
            return None;
        }
        // A new connection has a new client id (and, when it moved, a new server id).
        let until = Instant::now() + timeout;
        while Instant::now() < until {
            let now = client.server_info();
            let another = now.client_id != from.client_id || now.server_id != from.server_id;
            if client.connection_state() == State::Connected && another {
                if now.server_id != from.server_id {
                    return Some(server_of(client));
                }
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    None
}
