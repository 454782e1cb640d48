//! One endpoint's dispatch, through the loop in `bounded.rs` (at most its concurrency of
//! handlers at once, run in this task), each request answered once and recorded once in the
//! endpoint's tally. On stop it
//! drains its subscription (the other instances of the queue group take the new requests; what
//! the server routed here just before it processed the `UNSUB` is delivered if it arrives
//! before async-nats forgets the subscription, see docs/FAULTS.md), answers every request it
//! received (running and buffered) within the grace period, and answers what is left then with
//! a 503.

use std::sync::Arc;
use std::time::Duration;

use async_nats::Subscriber;
use futures::StreamExt;
use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;

use super::answer::{Answered, EndpointShared, Received, Unanswered, answer, respond};
use super::bounded::{self, Bounds, Ended, Stopping};
use crate::health::ServeSlot;
use crate::service::ServiceError;
use crate::telemetry::EndpointMetrics;

/// One endpoint of a started service, ready to dispatch.
pub(super) struct EndpointTask {
    /// The endpoint's queue subscription.
    pub(super) subscriber: Subscriber,
    /// One the server accepted, replacing it when it refused it (`refused.rs`).
    pub(super) accepted: mpsc::UnboundedReceiver<Subscriber>,
    pub(super) shared: EndpointShared,
    pub(super) slot: Arc<ServeSlot>,
    pub(super) metrics: EndpointMetrics,
    pub(super) concurrency: usize,
    pub(super) grace: Duration,
    /// Given a permit once this endpoint has unsubscribed on stop.
    pub(super) unsubscribed: Arc<Semaphore>,
}

/// How an endpoint's dispatch ended.
pub(super) enum EndpointExit {
    /// Stopped, and everything it received was answered.
    Drained,
    /// Its subscription ended unasked (the client closed).
    Closed,
}

impl EndpointTask {
    /// Dispatches until `stop`, then drains; or until the subscription ends.
    pub(super) async fn run(self, stop: CancellationToken) -> EndpointExit {
        let EndpointTask {
            mut subscriber,
            mut accepted,
            shared,
            slot,
            mut metrics,
            concurrency,
            grace,
            unsubscribed,
        } = self;
        let (shared, unanswered) = (&shared, &Unanswered::default());
        let ended = bounded::dispatch(
            &mut subscriber,
            &mut accepted,
            Bounds { concurrency, grace },
            &stop,
            |message| {
                let request = Received {
                    message,
                    at: tokio::time::Instant::now(),
                };
                answer(request, shared, unanswered)
            },
            |done: Answered| slot.answered(&mut metrics, done.took, done.error),
            |stopping| {
                // Unsubscribed; what was received stays buffered, and the stream ends after
                // it.
                if let Stopping::Unsubscribed(result) = stopping {
                    if let Err(e) = result {
                        tracing::warn!(subject = %slot.subject, error = %e, "could not unsubscribe the endpoint");
                    }
                    unsubscribed.add_permits(1);
                }
            },
        )
        .await;
        if let Ended::OutOfTime { running } = ended {
            // The handlers still running were stopped: their requests landed in `unanswered`.
            let mut late =
                std::mem::take(&mut *unanswered.lock().unwrap_or_else(|e| e.into_inner()));
            // Received and not started: the stream ends after them (drained).
            let buffered = tokio::time::timeout(crate::run::CLEANUP_WAIT, async {
                while let Some(message) = subscriber.next().await {
                    late.push(Received {
                        message,
                        at: tokio::time::Instant::now(),
                    });
                }
            });
            if buffered.await.is_err() {
                tracing::warn!(subject = %slot.subject, "the endpoint's subscription did not end after unsubscribing");
            }
            tracing::warn!(
                subject = %slot.subject,
                running,
                unanswered = late.len(),
                ?grace,
                "the grace period ran out: answering what is left with 503"
            );
            let error = ServiceError::new(
                503,
                format!(
                    "this instance shut down before answering (its grace period of {grace:?} ran \
                     out); send the request again: another instance answers it"
                ),
            );
            for request in late {
                let sent = respond(&shared.scope.client, &request, Err(error.clone()), None).await;
                slot.answered(&mut metrics, request.at.elapsed(), sent);
            }
        }
        match ended {
            Ended::Closed => EndpointExit::Closed,
            Ended::Drained | Ended::OutOfTime { .. } => EndpointExit::Drained,
        }
    }
}
