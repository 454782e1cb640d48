//! One replica's web side: the page, and a WebSocket per browser tab. A tab watches members
//! (each watch ensures the relay: real traffic is what brings a lost relay back) and asks for
//! syncs; the statuses the relay receives for its members are pushed to it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::State as AxumState;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::response::{Html, IntoResponse};
use axum::routing::get;
use futures::{SinkExt, StreamExt};
use nats_topology::Relay;
use nats_topology::async_nats;
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, watch};

use crate::daemon::{SYNC_REQUEST, SyncRequest};
use crate::topology::{Hub, STATUS_GET, Status, StatusAnswer, StatusQuery, valid_member};

/// The page: plain HTML with inline CSS and JS (nothing fetched from elsewhere).
const PAGE: &str = include_str!("page.html");

/// How long a watch waits for the relay to run before telling the page it failed.
const ENSURE_TIMEOUT: Duration = Duration::from_secs(10);

/// What a replica's web side shares.
pub struct Web {
    pub hub: Hub,
    pub relay: Relay,
    pub client: async_nats::Client,
    /// The origins (`http://127.0.0.1:PORT`) of every replica, this one first; a page
    /// reconnects to another when its replica goes away.
    pub peers: watch::Receiver<Vec<String>>,
    /// Turns true on shutdown: every session closes its WebSocket.
    pub stop: watch::Receiver<bool>,
    pub next_session: AtomicU64,
}

/// From the page.
#[derive(Debug, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
enum Incoming {
    Watch { member: String },
    Sync { member: String },
    Refresh { member: String },
}

/// To the page.
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
enum Outgoing {
    Hello {
        replica: String,
        peers: Vec<String>,
    },
    Status(Status),
    /// The answer of the `members.status.get` endpoint (from whichever replica answered).
    Refreshed(StatusAnswer),
    Error {
        member: String,
        message: String,
    },
}

pub fn router(web: Arc<Web>) -> Router {
    Router::new()
        .route("/", get(|| async { Html(PAGE) }))
        .route("/ws", get(upgrade))
        .with_state(web)
}

async fn upgrade(ws: WebSocketUpgrade, AxumState(web): AxumState<Arc<Web>>) -> impl IntoResponse {
    ws.on_upgrade(move |socket| session(socket, web))
}

async fn session(socket: WebSocket, web: Arc<Web>) {
    let id = web.next_session.fetch_add(1, Ordering::Relaxed);
    let (mut sink, mut incoming) = socket.split();
    let (status_tx, mut statuses) = mpsc::unbounded_channel::<Status>();
    let (out_tx, mut outgoing) = mpsc::unbounded_channel::<Outgoing>();
    let mut stop = web.stop.clone();
    let _ = out_tx.send(Outgoing::Hello {
        replica: web.hub.replica.clone(),
        peers: web.peers.borrow().clone(),
    });
    loop {
        let out = tokio::select! {
            () = async { let _ = stop.wait_for(|stop| *stop).await; } => None,
            Some(status) = statuses.recv() => Some(Outgoing::Status(status)),
            Some(out) = outgoing.recv() => Some(out),
            message = incoming.next() => match message {
                Some(Ok(Message::Text(text))) => {
                    handle(&web, id, text.as_str(), &status_tx, &out_tx).await;
                    continue;
                }
                Some(Ok(Message::Close(_))) | Some(Err(_)) | None => break,
                Some(Ok(_)) => continue,
            },
        };
        let Some(out) = out else {
            // Shutdown: say goodbye (the page reconnects to another replica).
            let _ = sink.send(Message::Close(None)).await;
            break;
        };
        let text = serde_json::to_string(&out).expect("messages serialize");
        if sink.send(Message::Text(text.into())).await.is_err() {
            break;
        }
    }
    web.hub.leave(id);
}

async fn handle(
    web: &Arc<Web>,
    session: u64,
    text: &str,
    statuses: &mpsc::UnboundedSender<Status>,
    out: &mpsc::UnboundedSender<Outgoing>,
) {
    let error = |member: &str, message: String| {
        let _ = out.send(Outgoing::Error {
            member: member.to_owned(),
            message,
        });
    };
    let request = match serde_json::from_str::<Incoming>(text) {
        Ok(request) => request,
        Err(e) => return error("", format!("not a request this replica knows: {e}")),
    };
    match request {
        Incoming::Watch { member } | Incoming::Sync { member } | Incoming::Refresh { member }
            if !valid_member(&member) =>
        {
            error(
                &member,
                "a member name is 1 to 32 letters, digits, `-` or `_`".to_owned(),
            )
        }
        Incoming::Watch { member } => {
            // A session subscribing is the moment to make sure this replica's relay runs.
            match tokio::time::timeout(ENSURE_TIMEOUT, web.relay.ensure()).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return error(&member, format!("cannot watch: {e}")),
                Err(_) => {
                    return error(
                        &member,
                        format!(
                            "the relay of replica {} did not run within {ENSURE_TIMEOUT:?}; is the NATS cluster up?",
                            web.hub.replica
                        ),
                    );
                }
            }
            let last = web.hub.watch(session, &member, statuses.clone());
            let _ = statuses.send(last);
        }
        Incoming::Refresh { member } => {
            let client = web.client.clone();
            let out = out.clone();
            tokio::spawn(async move {
                let query = serde_json::to_vec(&StatusQuery {
                    member: member.clone(),
                })
                .expect("requests serialize");
                let message = match refresh(&client, query).await {
                    Ok(answer) => {
                        let _ = out.send(Outgoing::Refreshed(answer));
                        return;
                    }
                    Err(message) => message,
                };
                let _ = out.send(Outgoing::Error { member, message });
            });
        }
        Incoming::Sync { member } => {
            let client = web.client.clone();
            let out = out.clone();
            // Not awaited here: the session keeps pushing statuses meanwhile.
            tokio::spawn(async move {
                let payload = serde_json::to_vec(&SyncRequest {
                    member: member.clone(),
                })
                .expect("requests serialize");
                let asked = tokio::time::timeout(
                    Duration::from_secs(5),
                    client.request(SYNC_REQUEST, payload.into()),
                )
                .await;
                let message = match asked {
                    Ok(Ok(_)) => return,
                    Ok(Err(e)) => format!("the daemon simulator did not take the sync: {e}"),
                    Err(_) => "the daemon simulator did not answer within 5 s".to_owned(),
                };
                let _ = out.send(Outgoing::Error { member, message });
            });
        }
    }
}

/// Asks the `members.status.get` endpoint (any replica of the queue group may answer).
async fn refresh(client: &async_nats::Client, query: Vec<u8>) -> Result<StatusAnswer, String> {
    let asked = tokio::time::timeout(
        Duration::from_secs(5),
        client.request(STATUS_GET, query.into()),
    )
    .await;
    let reply = match asked {
        Ok(Ok(reply)) => reply,
        Ok(Err(e)) => return Err(format!("no replica answered {STATUS_GET}: {e}")),
        Err(_) => return Err(format!("no replica answered {STATUS_GET} within 5 s")),
    };
    if let Some(headers) = &reply.headers
        && let Some(code) = headers.get("Nats-Service-Error-Code")
    {
        let description = headers
            .get("Nats-Service-Error")
            .map(|d| d.as_str().to_owned())
            .unwrap_or_default();
        return Err(format!(
            "{STATUS_GET} failed: {} {description}",
            code.as_str()
        ));
    }
    serde_json::from_slice(&reply.payload)
        .map_err(|e| format!("{STATUS_GET} answered something else than a status: {e}"))
}
