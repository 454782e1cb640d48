//! One request, from received to answered, top to bottom: its span (continuing the caller's
//! trace), the handler run with a panic caught and the endpoint's timeout applied, then one
//! answer through the micro protocol (the reply body, or the `Nats-Service-Error` headers).
//! What it was answered with ([`Answered`]) is for the endpoint's tally (`ServeSlot::answered`,
//! which health, the metrics and `$SRV.STATS` read).

use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use async_nats::service::error::Error as ProtocolError;
use async_nats::{HeaderMap, Message};
use bytes::Bytes;
use futures::FutureExt;
use tracing::Instrument;

use crate::codec::CONTENT_TYPE;
use crate::handler::panic_message;
use crate::health::ServeSlot;
use crate::outage::{Breaker, Change};
use crate::registry::SharedEndpointHandler;
use crate::service::{Request, RequestContext, RequestScope, ServiceError};
use crate::telemetry;

/// What every request of one endpoint shares.
pub(super) struct EndpointShared {
    pub(super) handler: SharedEndpointHandler,
    pub(super) scope: Arc<RequestScope>,
    /// How long a handler may run before the request is answered with a 504.
    pub(super) timeout: Option<Duration>,
    /// The endpoint's outage breaker (see `crate::outage`), and its health slot.
    pub(super) breaker: Option<(Arc<Breaker>, Arc<ServeSlot>)>,
    /// The `Content-Type` its replies carry: its codec's, unless JSON (the default, sent
    /// without a header, as every client reads it) or raw bytes.
    pub(super) content_type: Option<&'static str>,
}

/// How a request was answered.
pub(super) struct Answered {
    /// The error sent, if an error was (its code, and its description on one line).
    pub(super) error: Option<ProtocolError>,
    /// From the request's start to its answer.
    pub(super) took: Duration,
}

/// The requests whose handler was stopped before it answered (a drain out of time): the drain
/// answers them.
pub(super) type Unanswered = Mutex<Vec<Received>>;

/// A request as it arrived, and when.
pub(super) struct Received {
    pub(super) message: Message,
    pub(super) at: Instant,
}

/// Holds a request until it is answered; dropped before, it leaves the request in
/// [`Unanswered`], so that no request this instance received goes without an answer.
struct Pending<'a> {
    request: Option<Received>,
    unanswered: &'a Unanswered,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if let Some(request) = self.request.take() {
            self.unanswered
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(request);
        }
    }
}

/// Runs the handler on `request` and answers it.
pub(super) async fn answer(
    request: Received,
    shared: &EndpointShared,
    unanswered: &Unanswered,
) -> Answered {
    let started = request.at;
    let message = &request.message;
    let span = tracing::info_span!(
        "request",
        service = %shared.scope.service,
        endpoint = %shared.scope.endpoint,
        subject = %message.subject,
    );
    telemetry::continue_trace(&span, message.headers.as_ref());
    let ours = Request::new(
        message.payload.clone(),
        RequestContext::new(message, shared.scope.clone()),
    );
    let mut pending = Pending {
        request: Some(request),
        unanswered,
    };
    let outcome = match &shared.breaker {
        // Backing off, and not this request's turn to probe: answered at once.
        Some((breaker, _)) if !breaker.may_run(Instant::now()) => Err(shed(breaker)),
        Some((breaker, slot)) => {
            let outcome = run(shared, ours).instrument(span.clone()).await;
            outage_outcome(breaker, slot, &outcome);
            outcome
        }
        None => run(shared, ours).instrument(span.clone()).await,
    };
    // Held until sent: a publish dropped midway sends nothing, and the drain answers it.
    let error = match pending.request.as_ref() {
        Some(request) => {
            respond(&shared.scope.client, request, outcome, shared.content_type)
                .instrument(span)
                .await
        }
        None => None,
    };
    pending.request = None;
    Answered {
        error,
        took: started.elapsed(),
    }
}

/// The handler's outcome: its reply, its error, a 500 for a panic, a 504 past the timeout.
async fn run(shared: &EndpointShared, request: Request) -> Result<Bytes, ServiceError> {
    let called = std::panic::catch_unwind(AssertUnwindSafe(|| (shared.handler)(request)));
    let handling = match called {
        Ok(future) => AssertUnwindSafe(future).catch_unwind(),
        Err(panic) => return Err(panicked(&panic)),
    };
    let handled = match shared.timeout {
        None => handling.await,
        Some(timeout) => match tokio::time::timeout(timeout, handling).await {
            Ok(handled) => handled,
            Err(_) => {
                tracing::warn!(
                    ?timeout,
                    "the handler ran past the endpoint's timeout: answered 504"
                );
                return Err(ServiceError::new(
                    504,
                    format!(
                        "the handler did not answer within the endpoint's timeout ({timeout:?})"
                    ),
                ));
            }
        },
    };
    match handled {
        Ok(Ok(body)) => Ok(body),
        Ok(Err(error)) => {
            if error.code() >= 500 {
                tracing::warn!(
                    code = error.code(),
                    error = error.description(),
                    "the handler failed"
                );
            } else {
                tracing::debug!(
                    code = error.code(),
                    error = error.description(),
                    "the request was refused"
                );
            }
            Err(error)
        }
        Err(panic) => Err(panicked(&panic)),
    }
}

/// The 503 a request gets while the endpoint backs off.
fn shed(breaker: &Breaker) -> ServiceError {
    ServiceError::new(
        503,
        format!(
            "this endpoint's handlers keep failing: what they depend on seems down ({}); send \
             the request again later",
            breaker.describe().unwrap_or_default()
        ),
    )
}

/// The breaker, health and the log follow each handler's outcome: a server error (5xx) is a
/// failure (a 503 says the dependency is down: it opens at once), a success closes it, a
/// refusal (4xx) says nothing of the dependency.
fn outage_outcome(breaker: &Breaker, slot: &ServeSlot, outcome: &Result<Bytes, ServiceError>) {
    let change = match outcome {
        Ok(_) => breaker.succeeded(),
        Err(e) if e.code() >= 500 => breaker.failed(e.description(), e.code() == 503, true),
        Err(_) => return,
    };
    match change {
        Change::Opened { cause } => {
            tracing::warn!(subject = %slot.subject, cause, "the endpoint's handlers keep failing: what they depend on seems down; answering 503 at once and probing with one request");
            slot.backing_off(breaker.describe());
        }
        Change::Closed { open_for, failed } => {
            tracing::info!(subject = %slot.subject, ?open_for, failed, "a handler succeeded again: answering normally");
            slot.backing_off(None);
        }
        Change::None if breaker.is_open() => slot.backing_off(breaker.describe()),
        Change::None => {}
    }
}

fn panicked(panic: &Box<dyn std::any::Any + Send>) -> ServiceError {
    let message = panic_message(panic);
    tracing::error!(panic = %message, "the handler panicked: answered 500");
    ServiceError::internal(format!("the handler panicked: {message}"))
}

/// Sends the answer (the body, or the micro protocol's error headers with an empty body);
/// returns the error answered, if one was, for the endpoint's tally (a request without a
/// reply subject is counted too, as health and the metrics always did).
pub(super) async fn respond(
    client: &async_nats::Client,
    request: &Received,
    outcome: Result<Bytes, ServiceError>,
    content_type: Option<&'static str>,
) -> Option<ProtocolError> {
    let (body, error) = match outcome {
        Ok(body) => (body, None),
        Err(e) => {
            let error = ProtocolError {
                // A header value is one line.
                status: e
                    .description()
                    .chars()
                    .map(|c| if c.is_control() { ' ' } else { c })
                    .collect(),
                code: usize::from(e.code()),
            };
            (Bytes::new(), Some(error))
        }
    };
    let Some(reply) = request.message.reply.clone() else {
        tracing::debug!("a request without a reply subject: nothing to answer");
        return error;
    };
    let sent = match (&error, content_type) {
        (None, None) => client.publish(reply, body).await,
        (None, Some(content_type)) => {
            let mut headers = HeaderMap::new();
            headers.insert(CONTENT_TYPE, content_type);
            client.publish_with_headers(reply, headers, body).await
        }
        (Some(error), _) => {
            let mut headers = HeaderMap::new();
            headers.insert(
                async_nats::service::NATS_SERVICE_ERROR,
                error.status.as_str(),
            );
            headers.insert(
                async_nats::service::NATS_SERVICE_ERROR_CODE,
                error.code.to_string().as_str(),
            );
            client.publish_with_headers(reply, headers, body).await
        }
    };
    if let Err(e) = sent {
        tracing::warn!(error = %e, "could not send the answer");
    }
    error
}
