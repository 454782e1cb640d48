//! Provisioning: ensure streams and consumers exist as declared, safely when many replicas
//! start at once.
//!
//! Every write is a CREATE first: the server answers an identical CREATE with success, so
//! replicas racing on a fresh stream do not fall into the UPDATE-first cliff (DESIGN.md §4).
//! Only on "exists with a different configuration" is the server's configuration read and
//! compared, field by field, against what the declaration sets. Transient failures are
//! retried with full jitter under a deadline; configuration conflicts never are.
//!
//! - [`Provisioner`] (here): JetStream API requests, the retry around them, reads.
//! - `error`: [`ProvisionError`] and the classification of API failures.
//! - `stream`, `consumer`: ensuring each, deleting consumers; `migrate`: `migrate_from`
//!   beside a running old fleet (pause, drain, create at the floor, retire); `version`: the
//!   version stamps that keep an older declaration from reverting a newer one.
//! - `config`: declaration -> server configuration; `drift`: server vs declaration.
//! - `ensure`: one runtime's provisioning: streams ensured once (single-flight), consumers
//!   after their stream, waiting out streams that are not there yet.

mod bound;
mod config;
mod consumer;
mod drift;
mod ensure;
mod error;
mod instance;
mod leader;
mod migrate;
pub(crate) mod reconcile;
mod stream;
mod version;

use async_nats::jetstream::{self, ErrorCode, consumer::Info as ConsumerInfo, response::Response};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::retry::{Failed, RetryPolicy};

pub(crate) use config::push_deliver_subject;
pub(crate) use ensure::{Ensured, Ensurer};
pub(crate) use error::{ApiError, Failure, rejected};
pub use error::{FieldDiff, ProvisionError, ProvisionErrorKind};
pub(crate) use instance::Start;
pub use instance::{ResumePoint, StreamInstance};
pub(crate) use leader::{ADVISORY_PREFIX, Advisories, FLEET_PREFIX};
pub use reconcile::Action;
pub(crate) use stream::uncovered;
pub use version::{MIGRATED_FROM_KEY, OlderDeclaration, Precedence, VERSION_KEY, precedence};
pub(crate) use version::{OlderDeclarations, stamped_consumer_config, stamped_stream_config};

/// What ensuring a consumer may change on the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpdateMode {
    /// Apply editable differences (start-up: the declaration is the source of truth).
    Update,
    /// Create if absent, accept what exists (re-ensure after a loss: an old instance in a
    /// rolling deploy must not revert a newer one's configuration). A consumer that has to be
    /// created again starts after `resume` (a queue consumer's last ack floor, a relay's last
    /// handled sequence) when the stream is still the instance that point was read in;
    /// otherwise as declared, as on a first start (never by a sequence of another stream).
    CreateOnly {
        /// Where this instance was, and in which stream instance.
        resume: Option<ResumePoint>,
    },
}

/// Ensures streams and consumers through the JetStream API.
#[derive(Clone)]
pub struct Provisioner {
    js: jetstream::Context,
    policy: RetryPolicy,
    /// Requests attempted so far, retries included (for reports and benchmarks).
    attempts: std::sync::Arc<std::sync::atomic::AtomicU32>,
    /// Requests that went unanswered for their whole `request_timeout` (an attempt given up
    /// earlier, by a leader's election, is not one).
    timed_out: std::sync::Arc<std::sync::atomic::AtomicU32>,
    warned_version: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Wakes retries waiting for a leader when one is elected (subscribed while one waits).
    leader: leader::LeaderWatch,
    /// The version stamped on what this provisioner creates or updates, overriding the
    /// declarations' own ([`RuntimeBuilder::version`](crate::RuntimeBuilder::version)).
    version: Option<std::sync::Arc<str>>,
    /// Declarations found older than what the server holds (shown in health).
    older: OlderDeclarations,
    /// Which JetStream requests go to (its prefix is the context's).
    api: crate::jsapi::JetStreamApi,
    /// Verifies owned streams and queue consumers instead of creating or changing them
    /// ([`RuntimeBuilder::bind_only`](crate::RuntimeBuilder::bind_only)).
    bind_only: bool,
}

/// How many answers of an unexpected shape one provisioning request accepts before it is
/// reported (the supervisor then retries with its backoff).
const UNEXPECTED_ANSWER_ATTEMPTS: u32 = 3;

/// Whether a failed request got an answer that could not be read.
fn is_parse_failure(error: &jetstream::context::RequestError) -> bool {
    use std::error::Error as _;
    error.kind() == jetstream::context::RequestErrorKind::Other
        && error
            .source()
            .is_some_and(|source| source.is::<serde_json::Error>())
}

/// The oldest server on which repeating an identical CREATE is safe.
const MIN_SERVER_VERSION: (u64, u64, u64) = (2, 14, 5);

/// `"2.15.1"` (or `"2.15.1-beta"`) as a tuple.
pub(crate) fn parse_version(version: &str) -> Option<(u64, u64, u64)> {
    let mut parts = version
        .split(['.', '-', '+'])
        .map(|p| p.parse::<u64>().ok());
    Some((parts.next()??, parts.next()??, parts.next()??))
}

impl Provisioner {
    /// A provisioner on `client` with `policy` (its `request_timeout` bounds each request).
    pub fn new(client: async_nats::Client, policy: RetryPolicy) -> Self {
        Self::with_api(client, policy, crate::jsapi::JetStreamApi::Local)
    }

    /// A provisioner whose requests go to `api` (a JetStream domain or API prefix).
    pub(crate) fn with_api(
        client: async_nats::Client,
        policy: RetryPolicy,
        api: crate::jsapi::JetStreamApi,
    ) -> Self {
        let js = api.context(client, policy.request_timeout);
        Provisioner {
            leader: leader::LeaderWatch::new(
                js.clone(),
                leader::Advisories::of(&api),
                leader::Fleet::new(&api.prefix()),
            ),
            js,
            policy,
            attempts: Default::default(),
            timed_out: Default::default(),
            warned_version: Default::default(),
            version: None,
            older: OlderDeclarations::default(),
            api,
            bind_only: false,
        }
    }

    /// Verifies owned streams and queue consumers instead of creating or updating them (an
    /// operator provisions them); broadcast relays, which only a running instance can
    /// create, are still created.
    pub fn bind_only(mut self, bind_only: bool) -> Self {
        self.bind_only = bind_only;
        self
    }

    /// Whether it only verifies ([`Provisioner::bind_only`]).
    pub fn is_bind_only(&self) -> bool {
        self.bind_only
    }

    /// Stamps `version` on what this provisioner creates or updates, instead of each
    /// declaration's own version.
    pub fn with_version(mut self, version: Option<std::sync::Arc<str>>) -> Self {
        self.version = version;
        self
    }

    /// The declarations found older than the version stamped on the server.
    pub(crate) fn older_declarations(&self) -> &OlderDeclarations {
        &self.older
    }

    /// Which JetStream requests go to.
    pub(crate) fn jetstream_api(&self) -> &crate::jsapi::JetStreamApi {
        &self.api
    }

    /// Repeating an identical CREATE is safe from nats-server 2.14.5 on: before it, a replica
    /// that was down could recreate the stream from a meta snapshot and lose its data
    /// (nats-server #8413). Says so once per provisioner when the server is older.
    fn warn_if_server_too_old(&self) {
        if self
            .warned_version
            .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            return;
        }
        let version = self.js.client().server_info().version;
        if let Some(found) = parse_version(&version)
            && found < MIN_SERVER_VERSION
        {
            tracing::warn!(
                server_version = %version,
                "nats-server {version} is older than 2.14.5: concurrent identical stream creates can \
                 make a recovering replica lose the stream's data (nats-server #8413); upgrade the server"
            );
        }
    }

    /// How many provisioning attempts this provisioner has made, retries included.
    pub fn attempts(&self) -> u32 {
        self.attempts.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// How many of its requests went unanswered for their whole
    /// [`request_timeout`](RetryPolicy::request_timeout).
    pub fn timed_out(&self) -> u32 {
        self.timed_out.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The retry policy requests go through.
    pub fn policy(&self) -> &RetryPolicy {
        &self.policy
    }

    /// The JetStream context requests go through.
    pub fn jetstream(&self) -> &jetstream::Context {
        &self.js
    }

    async fn api<T: DeserializeOwned>(
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
        let answered = crate::events::unless_denied(&self.js.client(), &full, request).await;
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
                    self.timed_out
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
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
    async fn api_empty<T: DeserializeOwned>(&self, subject: String) -> Result<T, ApiError> {
        self.api(subject, &serde_json::json!({})).await
    }

    /// Runs `attempt` under the retry policy until it succeeds, fails for good, or the
    /// deadline passes; a leader's election wakes a waiting retry early (`leader`).
    async fn retry<T, F, Fut>(
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
            self.attempts
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
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
        match self
            .policy
            .backoff()
            .run_waking(counted, transient, Some(&wake))
            .await
        {
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
            match self.api_empty::<T>(subject.clone()).await {
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

#[cfg(test)]
mod tests;
