//! The reach watch: asks JetStream (`<api prefix>.INFO`, which the meta leader answers)
//! through the runtime's connection every heartbeat, records the answer for health, and moves
//! the connection to another listed server when JetStream has not answered through this one
//! for `move_server_after` while some consumer is not running, or at once when a consumer's
//! info says that this server leads its group and hears nothing from its peers. A server cut
//! off from its
//! cluster by a partition keeps its clients (nothing closes their connections) and cannot
//! reach the leaders on the other side; another server of the list may. Waiting that long
//! first lets a leader election, which leaves JetStream unanswered for a few seconds on every
//! server (4 to 9 s of Raft election timeout), pass without moving anyone.

use std::sync::Arc;
use std::time::Duration;

use async_nats::connection::State;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::connect::{self, ConnectionProblem};
use crate::health::ConsumerState;
use crate::run::Inner;

/// Watches until `cancel` (see the module documentation).
pub(in crate::run) async fn watch_reach(inner: Arc<Inner>, cancel: CancellationToken) {
    let client = &inner.common.client;
    let shared = &inner.health.shared;
    let every = inner.settings.heartbeat;
    let subject = format!(
        "{}.INFO",
        inner.ensurer.provisioner().jetstream_api().prefix()
    );
    // A slow link may take longer than a heartbeat to answer: the request timeout bounds it.
    let timeout = inner.ensurer.policy().request_timeout;
    let local_api = matches!(
        inner.ensurer.provisioner().jetstream_api(),
        crate::jsapi::JetStreamApi::Local
    );
    let mut ticker = tokio::time::interval(every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // What was last said at WARN about the connection, so that each problem is said once.
    let mut said: Option<ConnectionProblem> = None;
    loop {
        let disconnected = client.connection_state() != State::Connected;
        tokio::select! {
            _ = ticker.tick() => {}
            // A consumer's info said that this server is cut off.
            _ = shared.reach.wake.notified() => {}
            // Not connected, and why not yet said: look again sooner than a heartbeat.
            _ = tokio::time::sleep(DISCONNECTED_POLL), if disconnected && said.is_none() => {}
            _ = cancel.cancelled() => return,
        }
        // A lost connection is the client's own to re-establish; this says why it is not.
        if client.connection_state() != State::Connected {
            let problem = tokio::select! {
                problem = connect::diagnose(client) => problem,
                _ = cancel.cancelled() => return,
            };
            if let Some(problem) = problem {
                let before = shared.reach.status();
                shared
                    .reach
                    .unanswered(problem.server.clone(), problem.to_string());
                shared
                    .reach
                    .act("waiting for the connection (the client retries without end)");
                tell(&mut said, problem);
                if shared.reach.status().changed_from(&before) {
                    shared.changed();
                }
            }
            continue;
        }
        let server = server_of(client);
        let before = shared.reach.status();
        let answer = tokio::select! {
            answer = ask(client, &subject, timeout) => answer,
            _ = cancel.cancelled() => return,
        };
        let silent = match answer {
            Ok(()) => {
                if said.take().is_some() {
                    tracing::info!(%server, "connected, and JetStream answers");
                }
                shared.reach.answered(server.clone());
                None
            }
            Err(why) => {
                let why = match connect::no_jetstream(client, local_api) {
                    Some(problem) => {
                        let named = problem.to_string();
                        tell(&mut said, problem);
                        named
                    }
                    None => why,
                };
                Some((shared.reach.unanswered(server.clone(), why.clone()), why))
            }
        };
        let move_after = inner.settings.move_after;
        let waiting = inner.health.slots.iter().any(|slot| waits(&slot.state()));
        let reason = match (
            shared.reach.cut_off(&client.server_info().server_name),
            silent,
        ) {
            // Decisive: its leader here hears nothing from its peers.
            (Some(why), _) => Some(why),
            (None, Some((silent, _))) if silent >= move_after && waiting => Some(format!(
                "unanswered for over {move_after:?} while a consumer waits"
            )),
            (None, Some(_)) if waiting => {
                shared.reach.act(format!(
                    "moving to another listed server if it lasts {move_after:?} while a consumer waits"
                ));
                None
            }
            (None, Some(_)) => {
                shared.reach.act("not moving: every consumer runs");
                None
            }
            (None, None) => None,
        };
        if let Some(reason) = reason {
            let pool = client
                .server_pool()
                .await
                .map(|pool| pool.into_iter().map(|s| s.addr).collect::<Vec<_>>())
                .unwrap_or_default();
            if pool.len() < 2 {
                shared.reach.act(format!(
                    "{reason}; this is the only server listed: waiting for it"
                ));
            } else {
                shared
                    .reach
                    .act(format!("{reason}: moving to another listed server"));
                shared.changed();
                tracing::warn!(%server, %reason, "moving the connection to another listed server");
                if let Some(to) = move_away(client, pool, timeout).await {
                    tracing::info!(from = %server, %to, "moved the connection to another server");
                    shared.reach.moved();
                }
            }
        }
        if shared.reach.status().changed_from(&before) {
            shared.changed();
        }
    }
}

/// While the connection is down, how often the reach watch looks for why.
const DISCONNECTED_POLL: Duration = Duration::from_secs(1);

/// Says `problem` at WARN unless it is what was said last.
fn tell(said: &mut Option<ConnectionProblem>, problem: ConnectionProblem) {
    if said.as_ref() != Some(&problem) {
        tracing::warn!(server = %problem.server, kind = ?problem.kind, "{problem}");
        *said = Some(problem);
    }
}

/// How often a move to another server checks whether the client has reconnected.
const RECONNECT_POLL: Duration = Duration::from_millis(10);

/// How long the leader of a JetStream group may go without hearing from a peer before that
/// peer counts as cut off from it: three of Raft's 1 s heartbeats (a follower answers each).
const PEERS_SILENT: Duration = Duration::from_secs(3);

/// Why `server` is cut off from its cluster, and for how long its group's leader has heard
/// from none of its peers, if the group `cluster` describes (a consumer's, read through
/// `server`) is led by `server` and its leader has heard from no majority of it for
/// [`PEERS_SILENT`]. Such a leader keeps serving its local clients (idle heartbeats included)
/// until it steps down for want of a quorum (10 to 20 s after the cut), and nothing new
/// reaches it meanwhile.
pub(in crate::run) fn cut_off(
    cluster: Option<&async_nats::jetstream::stream::ClusterInfo>,
    server: &str,
) -> Option<(Duration, String)> {
    let cluster = cluster?;
    if cluster.leader.as_deref() != Some(server) || cluster.replicas.is_empty() {
        return None;
    }
    let size = cluster.replicas.len() + 1;
    let heard = 1 + cluster
        .replicas
        .iter()
        .filter(|peer| !peer.offline && peer.active < PEERS_SILENT)
        .count();
    if heard * 2 > size {
        return None;
    }
    let silent = cluster
        .replicas
        .iter()
        .map(|peer| peer.active)
        .min()
        .unwrap_or_default();
    Some((
        silent,
        format!(
            "this server ({server}) leads a JetStream group (a consumer's or a stream's) but \
             has heard from no majority of its peers for {silent:.1?}: it is cut off from them"
        ),
    ))
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
            tokio::time::sleep(RECONNECT_POLL).await;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use async_nats::jetstream::stream::{ClusterInfo, PeerInfo};

    fn group(leader: &str, silent_for: &[u64]) -> ClusterInfo {
        let replicas = silent_for
            .iter()
            .enumerate()
            .map(|(i, ms)| PeerInfo {
                name: format!("peer{i}"),
                current: *ms < 1000,
                active: Duration::from_millis(*ms),
                offline: false,
                lag: None,
            })
            .collect();
        ClusterInfo {
            leader: Some(leader.to_owned()),
            replicas,
            ..Default::default()
        }
    }

    #[test]
    fn a_leader_here_that_hears_no_majority_is_cut_off() {
        assert!(cut_off(Some(&group("n0", &[4000, 5000])), "n0").is_some());
        assert!(
            cut_off(Some(&group("n0", &[20, 5000])), "n0").is_none(),
            "one peer of two heard: a majority of three"
        );
        assert!(
            cut_off(Some(&group("n1", &[4000, 5000])), "n0").is_none(),
            "led elsewhere: the majority side elects a new leader"
        );
        assert!(
            cut_off(Some(&group("n0", &[])), "n0").is_none(),
            "R1: no peers"
        );
        assert!(cut_off(None, "n0").is_none());
        assert!(
            cut_off(Some(&group("n0", &[20, 4000, 4000, 4000])), "n0").is_some(),
            "two of five"
        );
    }
}
