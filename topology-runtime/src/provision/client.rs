//! The JetStream request client under provisioning: one API request (a denial, a timeout
//! and an answer of an unexpected shape told apart), retried with full jitter under the
//! policy and woken early by the leader watch (`leader`). It knows nothing of declarations:
//! the reconciler above it (`stream`, `consumer`, `migrate`) decides what to send.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use async_nats::jetstream::{self, ErrorCode, consumer::Info as ConsumerInfo, response::Response};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::leader;
use super::{ApiError, Failure, ProvisionError, ProvisionErrorKind, rejected};
use crate::jsapi::JetStreamApi;
use crate::retry::{Failed, RetryPolicy};

/// JetStream API requests with their retry; clones share the counters and the watch.
#[derive(Clone)]
pub(crate) struct ApiClient {
    js: jetstream::Context,
    policy: RetryPolicy,
    /// Requests attempted so far, retries included (for reports and benchmarks).
    attempts: Arc<AtomicU32>,
    /// Requests that went unanswered for their whole `request_timeout` (an attempt given up
    /// earlier, by a leader's election, is not one).
    timed_out: Arc<AtomicU32>,
    /// Wakes retries waiting for a leader when one is elected (subscribed while one waits).
    leader: leader::LeaderWatch,
    /// Which JetStream requests go to (its prefix is the context's).
    api: JetStreamApi,
}

/// How many answers of an unexpected shape one provisioning request accepts before it is
/// reported (the supervisor then retries with its backoff).
pub(super) const UNEXPECTED_ANSWER_ATTEMPTS: u32 = 3;

/// Whether a failed request got an answer that could not be read.
fn is_parse_failure(error: &jetstream::context::RequestError) -> bool {
    use std::error::Error as _;
    error.kind() == jetstream::context::RequestErrorKind::Other
        && error
            .source()
            .is_some_and(|source| source.is::<serde_json::Error>())
}

impl ApiClient {
    /// A client on `client` whose requests go to `api`, each bounded by the policy's
    /// `request_timeout`; the leader watch runs with `timings`.
    pub(crate) fn new(
        client: async_nats::Client,
        policy: RetryPolicy,
        api: JetStreamApi,
        timings: leader::LeaderTimings,
    ) -> Self {
        // The fleet channel is the service's own: its connection's inbox prefix names it.
        let inbox_prefix = crate::server_errors::inbox_prefix(&client);
        let js = api.context(client, policy.request_timeout);
        ApiClient {
            leader: leader::LeaderWatch::new(
                js.clone(),
                leader::Advisories::of(&api),
                leader::Fleet::new(&inbox_prefix, &api.prefix()),
                timings,
            ),
            js,
            policy,
            attempts: Default::default(),
            timed_out: Default::default(),
            api,
        }
    }

    /// The JetStream context requests go through.
    pub(crate) fn jetstream(&self) -> &jetstream::Context {
        &self.js
    }

    /// The retry policy requests go through.
    pub(crate) fn policy(&self) -> &RetryPolicy {
        &self.policy
    }

    /// Which JetStream requests go to.
    pub(crate) fn jetstream_api(&self) -> &JetStreamApi {
        &self.api
    }

    /// Requests attempted so far, retries included.
    pub(crate) fn attempts(&self) -> u32 {
        self.attempts.load(Ordering::Relaxed)
    }

    /// Requests that went unanswered for their whole `request_timeout`.
    pub(crate) fn timed_out(&self) -> u32 {
        self.timed_out.load(Ordering::Relaxed)
    }

    pub(crate) async fn request<T: DeserializeOwned>(
        &self,
        subject: String,
        body: &(impl Serialize + ?Sized),
    ) -> Result<T, ApiError> {
        // Read as any JSON first, so that an answer of another shape is reported with the
        // request and the answer, not as a failed request.
        let sent = tokio::time::Instant::now();
        let full = format!("{}.{subject}", self.api.prefix());
        let request = self
            .js
            .request::<_, _, serde_json::Value>(subject.clone(), body);
        let answered = crate::server_errors::unless_denied(&self.js.client(), &full, request).await;
        let answered = answered.map_err(|denied| ApiError::Denied {
            action: denied.action,
            subject: denied.subject,
        })?;
        let answer = match answered {
            Ok(answer) => {
                self.leader.answered_after(sent.elapsed());
                answer
            }
            Err(e) if is_parse_failure(&e) => {
                return Err(ApiError::unexpected(&full, "an answer that is not JSON", e));
            }
            Err(e) => {
                if e.kind() == jetstream::context::RequestErrorKind::TimedOut {
                    self.timed_out.fetch_add(1, Ordering::Relaxed);
                }
                return Err(ApiError::Request(e));
            }
        };
        let shown = answer.to_string();
        match serde_json::from_value::<Response<T>>(answer) {
            Ok(Response::Ok(value)) => Ok(value),
            Ok(Response::Err { error }) => Err(ApiError::Server(error)),
            Err(e) => Err(ApiError::unexpected(&full, &shown, e)),
        }
    }

    /// An INFO request (or a DELETE: any request whose body is empty).
    pub(crate) async fn request_empty<T: DeserializeOwned>(
        &self,
        subject: String,
    ) -> Result<T, ApiError> {
        self.request(subject, &serde_json::json!({})).await
    }

    /// Runs `attempt` under the retry policy until it succeeds, fails for good, or the
    /// deadline passes; a leader's election wakes a waiting retry early (`leader`).
    pub(crate) async fn retry<T, F, Fut>(
        &self,
        stream: &str,
        consumer: Option<&str>,
        mut attempt: F,
    ) -> Result<T, ProvisionError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, Failure>>,
    {
        let mut sent = 0u32;
        let counted = || {
            self.attempts.fetch_add(1, Ordering::Relaxed);
            sent += 1;
            tracing::debug!(stream, consumer, attempt = sent, "provisioning attempt");
            attempt()
        };
        // An answer of an unexpected shape may be a server mid-upgrade: worth a few tries,
        // not a loop until the deadline.
        let mut unexpected = 0u32;
        // Transient failures are a missing leader (or its symptom, a timeout): an election
        // ends the wait early, and the attempts are idempotent CREATEs and reads. A missing
        // peer is announced to nobody: the wake keeps those waits short for a while.
        let wake = self.leader.wake_for(stream, consumer);
        let transient = |failure: &Failure| {
            if let Failure::Transient(cause) = failure {
                wake.failed(cause);
            }
            match failure {
                Failure::Transient(ApiError::Unexpected { .. }) => {
                    unexpected += 1;
                    unexpected < UNEXPECTED_ANSWER_ATTEMPTS
                }
                Failure::Transient(cause) => {
                    tracing::debug!(stream, consumer, %cause, "transient provisioning failure; retrying");
                    true
                }
                Failure::Fatal(_) => false,
            }
        };
        match leader::run_waking(self.policy.backoff(), counted, transient, &wake).await {
            Ok((value, _)) => Ok(value),
            Err(Failed {
                error: Failure::Fatal(e),
                attempts,
                ..
            }) => Err(e.after(attempts)),
            Err(Failed {
                error: Failure::Transient(cause @ ApiError::Unexpected { .. }),
                attempts,
                ..
            }) => Err(ProvisionError::new(
                ProvisionErrorKind::UnexpectedAnswer,
                stream,
                format!(
                    "{cause}; check that the server is a nats-server with JetStream (2.10 or \
                     newer) and that nothing else answers on the JetStream API subjects"
                ),
            )
            .source(cause)
            .in_consumer(consumer)
            .after(attempts)),
            Err(Failed {
                error: Failure::Transient(cause),
                attempts,
                ..
            }) => Err(ProvisionError::new(
                ProvisionErrorKind::Exhausted,
                stream,
                format!(
                    "the server did not answer successfully{} within {:?}; last cause: {cause}; \
                     check that the JetStream cluster is reachable and has a leader{}",
                    self.api.through(),
                    self.policy.deadline,
                    if cause.is_no_responders() {
                        self.api.unanswered_hint()
                    } else {
                        String::new()
                    },
                ),
            )
            .source(cause)
            .in_consumer(consumer)
            .after(attempts)),
        }
    }

    /// Reads `subject` (an INFO request), retrying transient failures; `None` when the server
    /// answers `absent`.
    pub(crate) async fn read<T: DeserializeOwned>(
        &self,
        stream: &str,
        consumer: Option<&str>,
        subject: String,
        absent: ErrorCode,
    ) -> Result<Option<T>, ProvisionError> {
        self.retry(stream, consumer, || async {
            match self.request_empty::<T>(subject.clone()).await {
                Ok(value) => Ok(Some(value)),
                Err(e) if e.code() == Some(absent) => Ok(None),
                Err(e) if e.code() == Some(ErrorCode::STREAM_NOT_FOUND) => {
                    Err(ProvisionError::new(
                        ProvisionErrorKind::StreamMissing,
                        stream,
                        "the stream does not exist; it is created again when its consumers are \
                 ensured (an external stream must be deployed by its owner)",
                    )
                    .into())
                }
                Err(e) if e.is_transient() => Err(Failure::Transient(e)),
                Err(e) => Err(rejected("reading", stream, consumer, e).into()),
            }
        })
        .await
    }

    /// Reads a stream; `None` if it does not exist.
    pub(crate) async fn read_stream(
        &self,
        name: &str,
    ) -> Result<Option<jetstream::stream::Info>, ProvisionError> {
        self.read(
            name,
            None,
            format!("STREAM.INFO.{name}"),
            ErrorCode::STREAM_NOT_FOUND,
        )
        .await
    }

    /// Reads a consumer; `None` if it (or its stream) does not exist.
    pub(crate) async fn read_consumer(
        &self,
        stream: &str,
        name: &str,
    ) -> Result<Option<ConsumerInfo>, ProvisionError> {
        match self
            .read(
                stream,
                Some(name),
                format!("CONSUMER.INFO.{stream}.{name}"),
                ErrorCode::CONSUMER_NOT_FOUND,
            )
            .await
        {
            Err(e) if e.kind() == ProvisionErrorKind::StreamMissing => Ok(None),
            other => other,
        }
    }
}
