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
//! - `stream`, `consumer`: ensuring each (consumers with migration), deleting consumers.
//! - `config`: declaration -> server configuration; `drift`: server vs declaration.
//! - `ensure`: one runtime's provisioning: streams ensured once (single-flight), consumers
//!   after their stream, waiting out streams that are not there yet.

mod config;
mod consumer;
mod drift;
mod ensure;
mod error;
mod leader;
mod stream;

use async_nats::jetstream::{self, ErrorCode, consumer::Info as ConsumerInfo, response::Response};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::retry::{Failed, RetryPolicy};

pub(crate) use config::consumer_config;
pub(crate) use drift::{Drift, consumer_drift, stream_drift};
pub(crate) use ensure::Ensurer;
pub(crate) use error::{ApiError, Failure, rejected};
pub use error::{FieldDiff, ProvisionError, ProvisionErrorKind};
pub(crate) use stream::uncovered;

/// What ensuring a consumer may change on the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpdateMode {
    /// Apply editable differences (start-up: the declaration is the source of truth).
    Update,
    /// Create if absent, accept what exists (re-ensure after a loss: an old instance in a
    /// rolling deploy must not revert a newer one's configuration). A queue consumer that
    /// has to be created again starts after `resume_after` (the last ack floor this instance
    /// saw), not at the start of the stream.
    CreateOnly {
        /// The stream sequence below which everything was acknowledged, when last seen.
        resume_after: Option<u64>,
    },
}

/// Ensures streams and consumers through the JetStream API.
#[derive(Clone)]
pub struct Provisioner {
    js: jetstream::Context,
    policy: RetryPolicy,
    /// Requests attempted so far, retries included (for reports and benchmarks).
    attempts: std::sync::Arc<std::sync::atomic::AtomicU32>,
    warned_version: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Wakes retries waiting for a leader when one is elected (subscribed while one waits).
    leader: leader::LeaderWatch,
}

/// The oldest server on which repeating an identical CREATE is safe.
const MIN_SERVER_VERSION: (u64, u64, u64) = (2, 14, 5);

/// `"2.15.1"` (or `"2.15.1-beta"`) as a tuple.
fn parse_version(version: &str) -> Option<(u64, u64, u64)> {
    let mut parts = version
        .split(['.', '-', '+'])
        .map(|p| p.parse::<u64>().ok());
    Some((parts.next()??, parts.next()??, parts.next()??))
}

impl Provisioner {
    /// A provisioner on `client` with `policy` (its `request_timeout` bounds each request).
    pub fn new(client: async_nats::Client, policy: RetryPolicy) -> Self {
        let js = jetstream::ContextBuilder::new()
            .timeout(policy.request_timeout)
            .build(client);
        Provisioner {
            leader: leader::LeaderWatch::new(js.clone()),
            js,
            policy,
            attempts: Default::default(),
            warned_version: Default::default(),
        }
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
        match self.js.request::<_, _, Response<T>>(subject, body).await {
            Ok(Response::Ok(value)) => Ok(value),
            Ok(Response::Err { error }) => Err(ApiError::Server(error)),
            Err(e) => Err(ApiError::Request(e)),
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
        let counted = || {
            self.attempts
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            attempt()
        };
        let transient = |failure: &Failure| match failure {
            Failure::Transient(cause) => {
                tracing::debug!(stream, consumer, %cause, "transient provisioning failure; retrying");
                true
            }
            Failure::Fatal(_) => false,
        };
        // Transient failures are a missing leader (or its symptom, a timeout): an election
        // ends the wait early, and the attempts are idempotent CREATEs and reads.
        let wake = self.leader.wake_for(stream);
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
                error: Failure::Transient(cause),
                attempts,
                ..
            }) => Err(ProvisionError::new(
                ProvisionErrorKind::Exhausted,
                stream,
                format!(
                    "the server did not answer successfully within {:?}; last cause: {cause}; \
                     check that the JetStream cluster is reachable and has a leader",
                    self.policy.deadline
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
mod tests {
    use super::*;

    #[test]
    fn versions_compare_as_numbers() {
        assert_eq!(parse_version("2.15.1"), Some((2, 15, 1)));
        assert_eq!(parse_version("2.14.5-beta.1"), Some((2, 14, 5)));
        assert!(parse_version("2.9.25").unwrap() < MIN_SERVER_VERSION);
        assert!(parse_version("2.14.10").unwrap() > MIN_SERVER_VERSION);
        assert_eq!(parse_version(""), None);
    }
}
