//! One endpoint's dispatch: at most its concurrency of handlers at once, run in this task (a
//! `FuturesUnordered`, no task per request; a handler that answers without waiting never
//! enters it), each request answered once. On stop it
//! drains its subscription (the other instances of the queue group take the new requests; what
//! the server routed here just before it processed the `UNSUB` is delivered if it arrives
//! before async-nats forgets the subscription, see docs/FAULTS.md), answers every request it
//! received (running and buffered) within the grace period, and answers what is left then with
//! a 503.

use std::pin::pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use async_nats::Subscriber;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::answer::{Answered, EndpointShared, Received, Unanswered, answer, respond};
use crate::health::ServeSlot;
use crate::service::ServiceError;
use crate::telemetry::EndpointMetrics;

/// One endpoint of a started service, ready to dispatch.
pub(super) struct EndpointTask {
    /// The endpoint's queue subscription.
    pub(super) subscriber: Subscriber,
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
            shared,
            slot,
            mut metrics,
            concurrency,
            grace,
            unsubscribed,
        } = self;
        let unanswered = Unanswered::default();
        let mut in_flight = FuturesUnordered::new();
        let mut open = true;
        let mut stopping = false;
        // One future each, polled across iterations (no registration per request).
        let mut stopped = pin!(stop.cancelled());
        let mut grace_over = pin!(tokio::time::sleep(Duration::from_secs(86_400 * 365)));
        let mut out_of_time = false;
        while open || !in_flight.is_empty() {
            tokio::select! {
                biased;
                Some(done) = in_flight.next() => account(&slot, &mut metrics, done),
                next = subscriber.next(), if open && in_flight.len() < concurrency => match next {
                    Some(message) => {
                        let request = Received { message, at: std::time::Instant::now() };
                        // Polled once at once: a handler that answers without waiting is done
                        // here, without a trip through the set (as a plain loop would be).
                        let mut answering = Box::pin(answer(request, &shared, &unanswered));
                        match futures::poll!(answering.as_mut()) {
                            Poll::Ready(done) => account(&slot, &mut metrics, done),
                            Poll::Pending => in_flight.push(answering),
                        }
                    }
                    // Drained, or the client closed.
                    None => open = false,
                },
                _ = &mut stopped, if !stopping => {
                    stopping = true;
                    grace_over.as_mut().reset(Instant::now() + grace);
                    // Unsubscribes; what was received stays buffered, and the stream ends
                    // after it.
                    if let Err(e) = subscriber.drain().await {
                        tracing::warn!(subject = %slot.subject, error = %e, "could not unsubscribe the endpoint");
                    }
                    unsubscribed.add_permits(1);
                }
                _ = &mut grace_over, if stopping => {
                    out_of_time = true;
                    break;
                }
            }
        }
        // Handlers still running are stopped here: their requests land in `unanswered`.
        let running = in_flight.len();
        drop(in_flight);
        if out_of_time {
            let mut late =
                std::mem::take(&mut *unanswered.lock().unwrap_or_else(|e| e.into_inner()));
            // Received and not started: the stream ends after them (drained).
            let buffered = tokio::time::timeout(crate::run::CLEANUP_WAIT, async {
                while let Some(message) = subscriber.next().await {
                    late.push(Received {
                        message,
                        at: std::time::Instant::now(),
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
                respond(
                    &shared.scope.client,
                    &request,
                    Err(error.clone()),
                    &shared.stats,
                )
                .await;
                slot.count(true);
                metrics.answered(Some(503), request.at.elapsed());
            }
        }
        if stopping {
            EndpointExit::Drained
        } else {
            EndpointExit::Closed
        }
    }
}

/// Counts an answered request in health and the metrics.
fn account(slot: &ServeSlot, metrics: &mut EndpointMetrics, done: Answered) {
    slot.count(done.error.is_some());
    metrics.answered(done.error, done.took);
}
