//! A subscription the server refused (`Permissions Violation for Subscription`): the server
//! never registered it, and nothing a reload or a grant changes makes it register it later,
//! so the client's subscription receives nothing for as long as the connection lasts. While
//! its slot is `denied` (the denial watch, `run/watchers/violations.rs`), the serving task
//! subscribes again every heartbeat, proves the new subscription by a round trip through its
//! probe subject (the server handles one connection's operations in order and writes its
//! refusal before it reads the next, so a refusal arrives before the answer), and hands the
//! new subscription to the dispatch once no refusal came: the refused one is dropped (the
//! `UNSUB` of a subscription the server does not have changes nothing there), and the slot
//! runs again.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use async_nats::{Client, Subject, Subscriber};
use bytes::Bytes;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc;

use crate::health::{ServeSlot, ServingState};
use crate::server_errors::Heard;

/// How long after the round trip a refusal may still be on its way to the runtime (the client
/// hands its events to a callback over a channel).
const REFUSAL_HANDOVER: Duration = Duration::from_millis(50);

/// One served subscription that may be refused: its slot, what it subscribes to, and where a
/// subscription the server accepted goes (its dispatch).
pub(super) struct Refusable {
    pub(super) slot: Arc<ServeSlot>,
    /// The subject, and the queue group when it subscribes in one.
    pub(super) subject: String,
    pub(super) queue: Option<String>,
    pub(super) to_dispatch: mpsc::UnboundedSender<Subscriber>,
}

/// Every heartbeat, subscribes each of `served` that is denied again, and hands the new
/// subscription to its dispatch once the server accepted it (proven through `probe`, a
/// subject this connection answers); never returns. Cancel-safe: a subscription made and not
/// handed over is dropped.
pub(super) async fn subscribe_again_when_granted(
    client: &Client,
    served: &[Refusable],
    probe: Subject,
    heartbeat: Duration,
) -> Infallible {
    loop {
        tokio::time::sleep(heartbeat).await;
        for refusable in served {
            let Some(permission) = refusable.slot.denied() else {
                continue;
            };
            let Some(subscriber) = accepted(client, refusable, &probe, heartbeat).await else {
                continue;
            };
            if refusable.to_dispatch.send(subscriber).is_err() {
                // The dispatch has ended: its session is over, and the next one subscribes
                // anew.
                continue;
            }
            tracing::info!(
                subject = %refusable.subject,
                queue = refusable.queue.as_deref(),
                permission,
                "the refused subscription is accepted again; receiving"
            );
            refusable.slot.granted();
            refusable.slot.transition_live(ServingState::Running);
        }
    }
}

/// A new subscription of `refusable`, if the server accepts it now: no refusal of it arrived
/// by the answer to a request to `probe` sent after it (and the handover after that).
async fn accepted(
    client: &Client,
    refusable: &Refusable,
    probe: &Subject,
    wait: Duration,
) -> Option<Subscriber> {
    let errors = crate::server_errors::of(client)?;
    let (_, mut coming) = errors.subscribe();
    let subject = refusable.subject.clone();
    let subscribed = match &refusable.queue {
        Some(queue) => client.queue_subscribe(subject, queue.clone()).await,
        None => client.subscribe(subject).await,
    };
    let subscriber = subscribed.ok()?;
    let request = async_nats::Request::new()
        .payload(Bytes::new())
        .timeout(Some(wait));
    client.send_request(probe.clone(), request).await.ok()?;
    let refused = async {
        loop {
            match coming.recv().await {
                Ok(Heard::Violation(v))
                    if v.action == crate::grant::Verb::Subscribe
                        && v.subject == refusable.subject
                        && (v.queue.is_none() || v.queue == refusable.queue) =>
                {
                    return;
                }
                // Some went unread: it may have been among them (asked again next time).
                Err(RecvError::Lagged(_)) => return,
                Ok(_) => {}
                Err(RecvError::Closed) => std::future::pending::<()>().await,
            }
        }
    };
    // Dropped when refused: unsubscribed.
    tokio::time::timeout(REFUSAL_HANDOVER, refused)
        .await
        .is_err()
        .then_some(subscriber)
}
