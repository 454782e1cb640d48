//! Provisioning: ensure streams and consumers exist as declared, safely when many replicas
//! start at once.
//!
//! Every write is a CREATE first: the server answers an identical CREATE with success, so
//! replicas racing on a fresh stream do not fall into the UPDATE-first cliff (DESIGN.md §4).
//! Only on "exists with a different configuration" is the server's configuration read and
//! compared, field by field, against what the declaration sets. Transient failures are
//! retried with full jitter under a deadline; configuration conflicts never are.

use std::fmt;
use std::time::Duration;

use async_nats::jetstream::{self, ErrorCode, consumer, response::Response, stream};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::time::Instant;

use crate::retry::RetryPolicy;
use topology_core::model::{
    ConsumerDecl, ConsumerKind, DeliverPolicy, Delivery, Discard, QueueDecl, Retention, Storage,
    StreamDecl,
};

/// What kind of provisioning failure happened; see [`ProvisionError::kind`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProvisionErrorKind {
    /// The server holds a configuration that cannot be changed in place to the declared one
    /// (an immutable field differs, or a plain durable holds the queue's name).
    Conflict,
    /// The server refused the declaration (for example subjects overlapping another stream).
    Rejected,
    /// An external stream does not exist yet, or does not cover the subjects consumed from it.
    ExternalNotReady,
    /// The stream of a consumer disappeared; ensuring the stream again fixes it.
    StreamMissing,
    /// Transient failures (timeouts, no responders, no leader) lasted until the deadline.
    Exhausted,
}

/// One field whose value on the server differs from the declaration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldDiff {
    /// The field's name as the server calls it.
    pub field: &'static str,
    /// The value on the server.
    pub server: String,
    /// The declared value.
    pub declared: String,
}

impl fmt::Display for FieldDiff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "`{}` is {} on the server, declared {}",
            self.field, self.server, self.declared
        )
    }
}

/// A provisioning failure: what, where (stream, consumer, fields) and what to do.
#[derive(Debug)]
pub struct ProvisionError {
    kind: ProvisionErrorKind,
    stream: String,
    consumer: Option<String>,
    message: String,
    fields: Vec<FieldDiff>,
    attempts: u32,
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl ProvisionError {
    fn new(kind: ProvisionErrorKind, stream: &str, message: impl Into<String>) -> Self {
        ProvisionError {
            kind,
            stream: stream.to_owned(),
            consumer: None,
            message: message.into(),
            fields: Vec::new(),
            attempts: 1,
            source: None,
        }
    }

    fn consumer(mut self, consumer: &str) -> Self {
        self.consumer = Some(consumer.to_owned());
        self
    }

    fn fields(mut self, fields: Vec<FieldDiff>) -> Self {
        self.fields = fields;
        self
    }

    fn source(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(Box::new(source));
        self
    }

    /// The kind of failure.
    pub fn kind(&self) -> ProvisionErrorKind {
        self.kind
    }

    /// The stream concerned.
    pub fn stream(&self) -> &str {
        &self.stream
    }

    /// The consumer concerned, if any.
    pub fn consumer_name(&self) -> Option<&str> {
        self.consumer.as_deref()
    }

    /// The differing fields, for a conflict.
    pub fn field_diffs(&self) -> &[FieldDiff] {
        &self.fields
    }

    /// The server's error code, when the server refused something.
    pub fn server_code(&self) -> Option<ErrorCode> {
        let source = self.source.as_deref()?;
        match source.downcast_ref::<ApiError>()? {
            ApiError::Server(e) => Some(e.error_code()),
            _ => None,
        }
    }

    /// How many attempts were made.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// Whether retrying later may succeed (the supervisor keeps retrying these).
    pub fn is_transient(&self) -> bool {
        matches!(
            self.kind,
            ProvisionErrorKind::Exhausted
                | ProvisionErrorKind::ExternalNotReady
                | ProvisionErrorKind::StreamMissing
        )
    }
}

impl fmt::Display for ProvisionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "stream `{}`", self.stream)?;
        if let Some(consumer) = &self.consumer {
            write!(f, ", consumer `{consumer}`")?;
        }
        write!(f, ": {}", self.message)?;
        for diff in &self.fields {
            write!(f, "; {diff}")?;
        }
        if self.kind == ProvisionErrorKind::Exhausted {
            write!(f, " (gave up after {} attempts)", self.attempts)?;
        }
        Ok(())
    }
}

impl std::error::Error for ProvisionError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// A failed JetStream API call, before classification.
#[derive(Debug)]
pub(crate) enum ApiError {
    /// The request itself failed: timed out, no responders, connection closed.
    Request(jetstream::context::RequestError),
    /// A server answer that is worth retrying in context.
    Retry(String),
    /// The server answered with an error.
    Server(jetstream::Error),
}

impl ApiError {
    fn code(&self) -> Option<ErrorCode> {
        match self {
            ApiError::Server(e) => Some(e.error_code()),
            ApiError::Request(_) | ApiError::Retry(_) => None,
        }
    }

    /// Timeouts, no responders, and the server's "try again" codes.
    fn is_transient(&self) -> bool {
        match self {
            ApiError::Request(_) | ApiError::Retry(_) => true,
            ApiError::Server(e) => {
                let code = e.error_code();
                code == ErrorCode::CLUSTER_NOT_AVAILABLE
                    || code == ErrorCode::CLUSTER_NOT_LEADER
                    || code == ErrorCode::CLUSTER_NO_PEERS
                    || e.code() == 503
            }
        }
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ApiError::Request(e) => write!(f, "request failed: {e}"),
            ApiError::Retry(e) => f.write_str(e),
            ApiError::Server(e) => write!(f, "server error: {e}"),
        }
    }
}

impl std::error::Error for ApiError {}

/// The outcome of one attempt: done, worth retrying, or final.
enum Failure {
    Transient(ApiError),
    Fatal(ProvisionError),
}

impl From<ProvisionError> for Failure {
    fn from(e: ProvisionError) -> Self {
        Failure::Fatal(e)
    }
}

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

    /// Runs `attempt` until it succeeds, fails for good, or the deadline passes.
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
        let deadline = Instant::now() + self.policy.deadline;
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            self.attempts
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            match attempt().await {
                Ok(value) => return Ok(value),
                Err(Failure::Fatal(mut e)) => {
                    e.attempts = attempts;
                    return Err(e);
                }
                Err(Failure::Transient(cause)) => {
                    let delay = self.policy.delay(attempts - 1);
                    if Instant::now() + delay >= deadline {
                        let mut e = ProvisionError::new(
                            ProvisionErrorKind::Exhausted,
                            stream,
                            format!(
                                "the server did not answer successfully within {:?}; last cause: {cause}; \
                                 check that the JetStream cluster is reachable and has a leader",
                                self.policy.deadline
                            ),
                        )
                        .source(cause);
                        e.consumer = consumer.map(str::to_owned);
                        e.attempts = attempts;
                        return Err(e);
                    }
                    tracing::debug!(stream, consumer, attempts, ?delay, %cause, "transient provisioning failure; retrying");
                    tokio::time::sleep(delay).await;
                }
            }
        }
    }

    /// Ensures a stream: created if absent, editable differences updated, immutable ones
    /// reported. An external stream is only verified: it must exist and cover `subjects`.
    pub async fn ensure_stream(
        &self,
        decl: &StreamDecl,
        consumed: &[&str],
    ) -> Result<stream::Info, ProvisionError> {
        self.warn_if_server_too_old();
        if decl.external {
            return self
                .retry(decl.name, None, || self.verify_external(decl, consumed))
                .await;
        }
        self.retry(decl.name, None, || self.ensure_owned_stream(decl))
            .await
    }

    async fn ensure_owned_stream(&self, decl: &StreamDecl) -> Result<stream::Info, Failure> {
        let config = stream_config(decl);
        let created = self
            .api::<stream::Info>(format!("STREAM.CREATE.{}", decl.name), &config)
            .await;
        let error = match created {
            Ok(info) => return Ok(info),
            Err(e) if e.is_transient() => return Err(Failure::Transient(e)),
            Err(e) => e,
        };
        if error.code() == Some(ErrorCode::STREAM_SUBJECT_OVERLAP) {
            let others = self.streams_overlapping(decl).await;
            let others = if others.is_empty() {
                "another stream on the server".to_owned()
            } else {
                format!("stream(s) {} on the server", others.join(", "))
            };
            return Err(ProvisionError::new(
                ProvisionErrorKind::Rejected,
                decl.name,
                format!(
                    "its subjects {:?} overlap the subjects of {others}; give each subject to \
                     one stream: narrow the subjects, or consume the other stream with \
                     `stream = \"NAME\"` and declare it `external`",
                    decl.subjects
                ),
            )
            .source(error)
            .into());
        }
        if error.code() != Some(ErrorCode::STREAM_NAME_EXIST) {
            return Err(rejected("creating the stream", decl.name, None, error).into());
        }
        // Exists with a different configuration: compare what the declaration sets.
        let info = self.stream_info(decl.name).await?;
        let drift = stream_drift(decl, &info.config);
        if !drift.immutable.is_empty() {
            return Err(ProvisionError::new(
                ProvisionErrorKind::Conflict,
                decl.name,
                "the stream on the server differs from the declaration in fields that cannot be \
                 changed in place; create a stream under a new name and move consumers to it, or \
                 change the declaration to match the server",
            )
            .fields(drift.immutable)
            .into());
        }
        if !drift.extra_subjects.is_empty() {
            tracing::warn!(
                stream = decl.name,
                subjects = ?drift.extra_subjects,
                "the stream on the server has subjects the declaration lacks; keeping them"
            );
        }
        if drift.editable.is_empty() {
            return Ok(info);
        }
        tracing::info!(stream = decl.name, changes = ?drift.editable, "updating stream to match its declaration");
        let mut updated = info.config.clone();
        apply_stream_decl(decl, &mut updated);
        match self
            .api::<stream::Info>(format!("STREAM.UPDATE.{}", decl.name), &updated)
            .await
        {
            Ok(info) => Ok(info),
            Err(e) if e.is_transient() => Err(Failure::Transient(e)),
            Err(e) => Err(rejected("updating the stream", decl.name, None, e).into()),
        }
    }

    /// The names of other streams on the server whose subjects overlap the declaration's
    /// (best effort: empty if the server cannot be asked).
    async fn streams_overlapping(&self, decl: &StreamDecl) -> Vec<String> {
        #[derive(serde::Deserialize)]
        struct Names {
            #[serde(default)]
            streams: Option<Vec<String>>,
        }
        let mut names = Vec::new();
        for subject in decl.subjects {
            let body = serde_json::json!({ "subject": subject });
            if let Ok(found) = self.api::<Names>("STREAM.NAMES".to_owned(), &body).await {
                for name in found.streams.unwrap_or_default() {
                    if name != decl.name && !names.contains(&name) {
                        names.push(name);
                    }
                }
            }
        }
        names.iter().map(|n| format!("`{n}`")).collect()
    }

    async fn stream_info(&self, name: &str) -> Result<stream::Info, Failure> {
        match self
            .api::<stream::Info>(format!("STREAM.INFO.{name}"), &serde_json::json!({}))
            .await
        {
            Ok(info) => Ok(info),
            // Deleted between our CREATE and this read: the next attempt creates it.
            Err(e) if e.is_transient() || e.code() == Some(ErrorCode::STREAM_NOT_FOUND) => {
                Err(Failure::Transient(e))
            }
            Err(e) => Err(rejected("reading the stream", name, None, e).into()),
        }
    }

    async fn verify_external(
        &self,
        decl: &StreamDecl,
        consumed: &[&str],
    ) -> Result<stream::Info, Failure> {
        let info = match self
            .api::<stream::Info>(format!("STREAM.INFO.{}", decl.name), &serde_json::json!({}))
            .await
        {
            Ok(info) => info,
            Err(e) if e.code() == Some(ErrorCode::STREAM_NOT_FOUND) => {
                return Err(ProvisionError::new(
                    ProvisionErrorKind::ExternalNotReady,
                    decl.name,
                    "the external stream does not exist; it is owned elsewhere and is never \
                     created here: deploy its owner (this consumer waits, not ready, until it does)",
                )
                .into());
            }
            Err(e) if e.is_transient() => return Err(Failure::Transient(e)),
            Err(e) => {
                return Err(rejected("reading the external stream", decl.name, None, e).into());
            }
        };
        if let Err(why) = uncovered(&info.config, consumed) {
            return Err(ProvisionError::new(
                ProvisionErrorKind::ExternalNotReady,
                decl.name,
                format!("{why}; ask its owner to add them, or change the consumer's subjects"),
            )
            .into());
        }
        Ok(info)
    }

    /// Ensures a consumer on `stream` and returns its info. A queue consumer is the durable
    /// named by its group; a broadcast relay is an ephemeral named `relay_name`.
    ///
    /// A queue consumer declaring `migrate_from = "old"` first moves from `old` if it exists:
    /// on a work-queue stream `old` is deleted and the new consumer delivers what remains
    /// (acknowledged messages are gone, unacknowledged ones are still there); on any other
    /// stream the new consumer starts at `old`'s ack floor + 1, then `old` is deleted. Both
    /// orders are safe when every replica migrates at the same moment.
    pub async fn ensure_consumer(
        &self,
        stream: &stream::Info,
        decl: &ConsumerDecl,
        relay_name: Option<&str>,
        mode: UpdateMode,
    ) -> Result<consumer::Info, ProvisionError> {
        let stream_name = stream.config.name.as_str();
        let workqueue = stream.config.retention == stream::RetentionPolicy::WorkQueue;
        let mut config = consumer_config(stream_name, decl, relay_name);
        if let UpdateMode::CreateOnly {
            resume_after: Some(floor),
        } = mode
            && floor > 0
            && !workqueue
            && decl.as_queue().is_some()
        {
            // Re-created after a loss: not from the start of the stream again. (A work-queue
            // stream holds only what is unacknowledged: deliver-all is exact there.)
            config.deliver_policy = consumer::DeliverPolicy::ByStartSequence {
                start_sequence: floor + 1,
            };
        }
        let name = config
            .name
            .clone()
            .expect("consumer_config always names the consumer");
        self.retry(stream_name, Some(&name), || async {
            if let Some(old) = decl.as_queue().and_then(|q| q.migrate_from)
                && old != name
            {
                self.migrate(stream_name, old, &name, &config, workqueue)
                    .await?;
            }
            match self
                .ensure_consumer_once(stream_name, &name, decl, &config, mode)
                .await
            {
                // Just after a work-queue migration deleted the old consumer, the server may
                // still count it as overlapping the new one (10099/10100): try again.
                Err(Failure::Fatal(e))
                    if workqueue
                        && decl.as_queue().is_some_and(|q| q.migrate_from.is_some())
                        && e.server_code().is_some_and(|code| {
                            code == ErrorCode(10099) || code == ErrorCode(10100)
                        }) =>
                {
                    Err(Failure::Transient(ApiError::Retry(e.to_string())))
                }
                other => other,
            }
        })
        .await
    }

    /// Moves from `old` to `new` if `old` exists; see [`Provisioner::ensure_consumer`].
    async fn migrate(
        &self,
        stream: &str,
        old: &str,
        new: &str,
        config: &consumer::Config,
        workqueue: bool,
    ) -> Result<(), Failure> {
        let old_info = match self
            .api::<consumer::Info>(
                format!("CONSUMER.INFO.{stream}.{old}"),
                &serde_json::json!({}),
            )
            .await
        {
            Ok(info) => info,
            Err(e) if e.code() == Some(ErrorCode::CONSUMER_NOT_FOUND) => return Ok(()),
            Err(e) if e.is_transient() => return Err(Failure::Transient(e)),
            Err(e) => {
                return Err(
                    rejected("reading the consumer to migrate from", stream, Some(old), e).into(),
                );
            }
        };
        if !workqueue {
            let start = old_info.ack_floor.stream_sequence + 1;
            let mut from_floor = config.clone();
            from_floor.deliver_policy = consumer::DeliverPolicy::ByStartSequence {
                start_sequence: start,
            };
            match self
                .create_consumer(stream, new, &from_floor, "create")
                .await
            {
                Ok(_) => {
                    tracing::info!(
                        stream,
                        from = old,
                        to = new,
                        start,
                        "migrated consumer: created at the old ack floor + 1"
                    )
                }
                // Another replica migrated first (from a later floor): theirs stands.
                Err(e) if e.code() == Some(ErrorCode::CONSUMER_ALREADY_EXISTS) => {}
                Err(e) if e.is_transient() => return Err(Failure::Transient(e)),
                Err(e) => {
                    return Err(rejected(
                        "creating the consumer at the old ack floor",
                        stream,
                        Some(new),
                        e,
                    )
                    .into());
                }
            }
        }
        // A timed-out delete is retried with the rest of this attempt (creating the new
        // consumer again is idempotent).
        self.delete_consumer_once(stream, old).await?;
        tracing::info!(stream, consumer = old, "deleted the consumer migrated from");
        Ok(())
    }

    async fn ensure_consumer_once(
        &self,
        stream: &str,
        name: &str,
        decl: &ConsumerDecl,
        config: &consumer::Config,
        mode: UpdateMode,
    ) -> Result<consumer::Info, Failure> {
        let error = match self.create_consumer(stream, name, config, "create").await {
            Ok(info) => return Ok(info),
            Err(e) if e.is_transient() => return Err(Failure::Transient(e)),
            Err(e) => e,
        };
        if error.code() == Some(ErrorCode::STREAM_NOT_FOUND) {
            return Err(ProvisionError::new(
                ProvisionErrorKind::StreamMissing,
                stream,
                "the stream does not exist; it is ensured again before the consumer",
            )
            .consumer(name)
            .source(error)
            .into());
        }
        if error.code() != Some(ErrorCode::CONSUMER_ALREADY_EXISTS) {
            return Err(rejected("creating the consumer", stream, Some(name), error).into());
        }
        let info = match self
            .api::<consumer::Info>(
                format!("CONSUMER.INFO.{stream}.{name}"),
                &serde_json::json!({}),
            )
            .await
        {
            Ok(info) => info,
            // Deleted in between: the next attempt creates it.
            Err(e) if e.is_transient() || e.code() == Some(ErrorCode::CONSUMER_NOT_FOUND) => {
                return Err(Failure::Transient(e));
            }
            Err(e) => return Err(rejected("reading the consumer", stream, Some(name), e).into()),
        };
        let drift = consumer_drift(decl, config, &info.config);
        if !drift.immutable.is_empty() {
            let hint = match &decl.kind {
                ConsumerKind::Queue(_) => format!(
                    "the consumer on the server cannot be changed in place to the declared shape; \
                     move to a new group name with `migrate_from = \"{name}\"` (lossless: it \
                     starts at the old consumer's ack floor), or delete the old consumer"
                ),
                ConsumerKind::Broadcast(_) => {
                    "a consumer with the relay's name and another shape exists; delete it"
                        .to_owned()
                }
            };
            return Err(
                ProvisionError::new(ProvisionErrorKind::Conflict, stream, hint)
                    .consumer(name)
                    .fields(drift.immutable)
                    .into(),
            );
        }
        if drift.editable.is_empty() || matches!(mode, UpdateMode::CreateOnly { .. }) {
            return Ok(info);
        }
        tracing::info!(stream, consumer = name, changes = ?drift.editable, "updating consumer to match its declaration");
        let mut updated = info.config.clone();
        apply_editable_consumer_fields(config, &mut updated);
        match self.create_consumer(stream, name, &updated, "update").await {
            Ok(info) => Ok(info),
            Err(e) if e.is_transient() || e.code() == Some(ErrorCode::CONSUMER_DOES_NOT_EXIST) => {
                Err(Failure::Transient(e))
            }
            Err(e) => Err(rejected("updating the consumer", stream, Some(name), e).into()),
        }
    }

    async fn create_consumer(
        &self,
        stream: &str,
        name: &str,
        config: &consumer::Config,
        action: &str,
    ) -> Result<consumer::Info, ApiError> {
        let subject = if config.filter_subject.is_empty() {
            format!("CONSUMER.CREATE.{stream}.{name}")
        } else {
            format!("CONSUMER.CREATE.{stream}.{name}.{}", config.filter_subject)
        };
        #[derive(Serialize)]
        struct Request<'a> {
            stream_name: &'a str,
            config: &'a consumer::Config,
            action: &'a str,
        }
        self.api(
            subject,
            &Request {
                stream_name: stream,
                config,
                action,
            },
        )
        .await
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
            match self.api::<T>(subject.clone(), &serde_json::json!({})).await {
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

    /// Deletes a consumer, retrying transient failures; a consumer already gone is not an
    /// error.
    pub async fn delete_consumer(&self, stream: &str, name: &str) -> Result<(), ProvisionError> {
        self.retry(stream, Some(name), || {
            self.delete_consumer_once(stream, name)
        })
        .await
    }

    async fn delete_consumer_once(&self, stream: &str, name: &str) -> Result<(), Failure> {
        #[derive(serde::Deserialize)]
        struct Deleted {}
        match self
            .api::<Deleted>(
                format!("CONSUMER.DELETE.{stream}.{name}"),
                &serde_json::json!({}),
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(e)
                if matches!(
                    e.code(),
                    Some(ErrorCode::CONSUMER_NOT_FOUND | ErrorCode::STREAM_NOT_FOUND)
                ) =>
            {
                Ok(())
            }
            Err(e) if e.is_transient() => Err(Failure::Transient(e)),
            Err(e) => Err(rejected("deleting the consumer", stream, Some(name), e).into()),
        }
    }
}

/// `Err` naming the consumed subjects an external stream's subjects do not cover.
pub(crate) fn uncovered(config: &stream::Config, consumed: &[&str]) -> Result<(), String> {
    let patterns: Vec<&str> = config.subjects.iter().map(String::as_str).collect();
    let missing: Vec<&str> = consumed
        .iter()
        .copied()
        .filter(|subject| !topology_core::subject::covered_by(subject, &patterns))
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "the external stream's subjects {:?} do not cover {:?} consumed from it",
            config.subjects, missing
        ))
    }
}

/// The server refused `operation`. Creates and updates are refused for what the declaration
/// says; anything else (reads, deletes) for permissions or the server's state.
fn rejected(
    operation: &str,
    stream: &str,
    consumer: Option<&str>,
    error: ApiError,
) -> ProvisionError {
    let fix = if operation.starts_with("creating") || operation.starts_with("updating") {
        "change the declaration to what the server accepts"
    } else {
        "check this account's JetStream permissions and the server's state"
    };
    let mut e = ProvisionError::new(
        ProvisionErrorKind::Rejected,
        stream,
        format!("the server refused {operation}: {error}; {fix}"),
    )
    .source(error);
    e.consumer = consumer.map(str::to_owned);
    e
}

/// The stream configuration a declaration creates.
pub(crate) fn stream_config(decl: &StreamDecl) -> stream::Config {
    let mut config = stream::Config {
        name: decl.name.to_owned(),
        ..Default::default()
    };
    apply_stream_decl(decl, &mut config);
    config
}

/// Writes every field the declaration sets into `config`; subjects are added, never removed.
fn apply_stream_decl(decl: &StreamDecl, config: &mut stream::Config) {
    for subject in decl.subjects {
        if !config.subjects.iter().any(|s| s == subject) {
            config.subjects.push((*subject).to_owned());
        }
    }
    if let Some(replicas) = decl.replicas {
        config.num_replicas = replicas.into();
    }
    if let Some(storage) = decl.storage {
        config.storage = storage_type(storage);
    }
    if let Some(retention) = decl.retention {
        config.retention = retention_policy(retention);
    }
    if let Some(max_age) = decl.max_age {
        config.max_age = max_age;
    }
    if let Some(max_msgs) = decl.max_msgs {
        config.max_messages = max_msgs;
    }
    if let Some(max_bytes) = decl.max_bytes {
        config.max_bytes = max_bytes;
    }
    if let Some(size) = decl.max_msg_size {
        config.max_message_size = size;
    }
    if let Some(discard) = decl.discard {
        config.discard = match discard {
            Discard::Old => stream::DiscardPolicy::Old,
            Discard::New => stream::DiscardPolicy::New,
        };
    }
    if let Some(window) = decl.duplicate_window {
        config.duplicate_window = window;
    }
    if let Some(description) = decl.description {
        config.description = Some(description.to_owned());
    }
}

fn storage_type(storage: Storage) -> stream::StorageType {
    match storage {
        Storage::File => stream::StorageType::File,
        Storage::Memory => stream::StorageType::Memory,
    }
}

fn retention_policy(retention: Retention) -> stream::RetentionPolicy {
    match retention {
        Retention::Limits => stream::RetentionPolicy::Limits,
        Retention::Interest => stream::RetentionPolicy::Interest,
        Retention::WorkQueue => stream::RetentionPolicy::WorkQueue,
    }
}

#[derive(Debug, Default)]
pub(crate) struct Drift {
    pub(crate) editable: Vec<FieldDiff>,
    pub(crate) immutable: Vec<FieldDiff>,
    pub(crate) extra_subjects: Vec<String>,
}

fn diff(field: &'static str, server: impl fmt::Debug, declared: impl fmt::Debug) -> FieldDiff {
    FieldDiff {
        field,
        server: format!("{server:?}"),
        declared: format!("{declared:?}"),
    }
}

/// Compares the fields a stream declaration sets with the server's configuration.
pub(crate) fn stream_drift(decl: &StreamDecl, server: &stream::Config) -> Drift {
    let mut drift = Drift::default();
    let missing: Vec<&str> = decl
        .subjects
        .iter()
        .copied()
        .filter(|s| !server.subjects.iter().any(|have| have == s))
        .collect();
    if !missing.is_empty() {
        drift
            .editable
            .push(diff("subjects", &server.subjects, decl.subjects));
    }
    drift.extra_subjects = server
        .subjects
        .iter()
        .filter(|s| !decl.subjects.contains(&s.as_str()))
        .cloned()
        .collect();
    if let Some(replicas) = decl.replicas
        && server.num_replicas.max(1) != usize::from(replicas)
    {
        drift
            .editable
            .push(diff("num_replicas", server.num_replicas, replicas));
    }
    if let Some(storage) = decl.storage
        && server.storage != storage_type(storage)
    {
        drift
            .immutable
            .push(diff("storage", server.storage, storage));
    }
    if let Some(retention) = decl.retention {
        let declared = retention_policy(retention);
        if server.retention != declared {
            let workqueue = stream::RetentionPolicy::WorkQueue;
            let entry = diff("retention", server.retention, retention);
            if server.retention == workqueue || declared == workqueue {
                drift.immutable.push(entry);
            } else {
                drift.editable.push(entry);
            }
        }
    }
    let mut editable =
        |field, differs: bool, server: &dyn fmt::Debug, declared: &dyn fmt::Debug| {
            if differs {
                drift.editable.push(diff(field, server, declared));
            }
        };
    if let Some(v) = decl.max_age {
        editable("max_age", server.max_age != v, &server.max_age, &v);
    }
    if let Some(v) = decl.max_msgs {
        editable(
            "max_msgs",
            server.max_messages != v,
            &server.max_messages,
            &v,
        );
    }
    if let Some(v) = decl.max_bytes {
        editable("max_bytes", server.max_bytes != v, &server.max_bytes, &v);
    }
    if let Some(v) = decl.max_msg_size {
        editable(
            "max_msg_size",
            server.max_message_size != v,
            &server.max_message_size,
            &v,
        );
    }
    if let Some(v) = decl.discard {
        let declared = match v {
            Discard::Old => stream::DiscardPolicy::Old,
            Discard::New => stream::DiscardPolicy::New,
        };
        editable("discard", server.discard != declared, &server.discard, &v);
    }
    if let Some(v) = decl.duplicate_window {
        editable(
            "duplicate_window",
            server.duplicate_window != v,
            &server.duplicate_window,
            &v,
        );
    }
    if let Some(v) = decl.description {
        editable(
            "description",
            server.description.as_deref() != Some(v),
            &server.description,
            &v,
        );
    }
    drift
}

/// The deliver subject of a push queue consumer: the same for every instance of the group.
pub(crate) fn push_deliver_subject(stream: &str, group: &str) -> String {
    format!("_NT_DELIVER.{stream}.{group}")
}

/// How long the server keeps a relay whose instance stopped pulling.
pub(crate) const RELAY_INACTIVE_THRESHOLD: Duration = Duration::from_secs(30);

/// The consumer configuration a declaration creates.
pub(crate) fn consumer_config(
    stream: &str,
    decl: &ConsumerDecl,
    relay_name: Option<&str>,
) -> consumer::Config {
    let mut config = consumer::Config {
        ack_policy: consumer::AckPolicy::Explicit,
        ..Default::default()
    };
    match decl.subjects {
        [] => {}
        [one] => config.filter_subject = (*one).to_owned(),
        many => config.filter_subjects = many.iter().map(|s| (*s).to_owned()).collect(),
    }
    match &decl.kind {
        ConsumerKind::Queue(queue) => {
            config.durable_name = Some(queue.group.to_owned());
            config.name = Some(queue.group.to_owned());
            config.deliver_policy = consumer::DeliverPolicy::All;
            apply_queue_decl(queue, &mut config);
            if queue.delivery == Delivery::Push {
                config.deliver_subject = Some(push_deliver_subject(stream, queue.group));
                config.deliver_group = Some(queue.group.to_owned());
            }
        }
        ConsumerKind::Broadcast(relay) => {
            config.name = relay_name.map(str::to_owned);
            config.deliver_policy = match relay.deliver {
                DeliverPolicy::All => consumer::DeliverPolicy::All,
                DeliverPolicy::New => consumer::DeliverPolicy::New,
                DeliverPolicy::Last => consumer::DeliverPolicy::Last,
                DeliverPolicy::LastPerSubject => consumer::DeliverPolicy::LastPerSubject,
            };
            config.inactive_threshold = RELAY_INACTIVE_THRESHOLD;
            config.memory_storage = true;
            config.num_replicas = 1;
        }
    }
    config
}

fn apply_queue_decl(queue: &QueueDecl, config: &mut consumer::Config) {
    if let Some(v) = queue.max_deliver {
        config.max_deliver = v;
    }
    if let Some(v) = queue.ack_wait {
        config.ack_wait = v;
    }
    // `backoff` is applied by the runtime when it naks a failed message. Sent to the server
    // it would also replace `ack_wait` with its first step, so a handler declared with
    // `ack_wait = "30s", backoff = ["1s", ..]` would be redelivered after one second.
    if let Some(v) = queue.max_ack_pending {
        config.max_ack_pending = v;
    }
    if let Some(v) = queue.description {
        config.description = Some(v.to_owned());
    }
}

/// Copies the editable fields a declaration sets from `declared` into `server`.
fn apply_editable_consumer_fields(declared: &consumer::Config, server: &mut consumer::Config) {
    server.filter_subject = declared.filter_subject.clone();
    server.backoff.clear();
    server.filter_subjects = declared.filter_subjects.clone();
    if declared.max_deliver != 0 {
        server.max_deliver = declared.max_deliver;
    }
    if !declared.ack_wait.is_zero() {
        server.ack_wait = declared.ack_wait;
    }
    if declared.max_ack_pending != 0 {
        server.max_ack_pending = declared.max_ack_pending;
    }
    if declared.description.is_some() {
        server.description = declared.description.clone();
    }
}

/// Compares a consumer declaration with the server's configuration.
pub(crate) fn consumer_drift(
    decl: &ConsumerDecl,
    declared: &consumer::Config,
    server: &consumer::Config,
) -> Drift {
    let mut drift = Drift::default();
    let push_server = server.deliver_subject.is_some();
    let push_declared = declared.deliver_subject.is_some();
    if push_server && server.deliver_group.is_none() {
        drift.immutable.push(FieldDiff {
            field: "deliver_group",
            server: "none (a plain durable push consumer: it admits one subscriber, so a second \
                     replica is refused or receives duplicates)"
                .to_owned(),
            declared: format!("{:?}", declared.name.as_deref().unwrap_or_default()),
        });
    } else if push_server != push_declared {
        let kind = |push: bool| if push { "push" } else { "pull" };
        drift
            .immutable
            .push(diff("delivery", kind(push_server), kind(push_declared)));
    } else if push_server && server.deliver_group != declared.deliver_group {
        drift.editable.push(diff(
            "deliver_group",
            &server.deliver_group,
            &declared.deliver_group,
        ));
    }
    if server.ack_policy != declared.ack_policy {
        drift
            .immutable
            .push(diff("ack_policy", server.ack_policy, declared.ack_policy));
    }
    // A queue consumer delivers the whole stream; one migrated from another, or re-created
    // after a loss, starts where its predecessor was acknowledged: the same shape.
    let from_start_or_floor = |p: &consumer::DeliverPolicy| {
        matches!(
            p,
            consumer::DeliverPolicy::All | consumer::DeliverPolicy::ByStartSequence { .. }
        )
    };
    let same_start = decl.as_queue().is_some()
        && from_start_or_floor(&server.deliver_policy)
        && from_start_or_floor(&declared.deliver_policy);
    if server.deliver_policy != declared.deliver_policy && !same_start {
        drift.immutable.push(diff(
            "deliver_policy",
            server.deliver_policy,
            declared.deliver_policy,
        ));
    }
    if server.durable_name != declared.durable_name {
        drift.immutable.push(diff(
            "durable_name",
            &server.durable_name,
            &declared.durable_name,
        ));
    }
    let filters = |c: &consumer::Config| -> Vec<String> {
        let mut all = c.filter_subjects.clone();
        if !c.filter_subject.is_empty() {
            all.push(c.filter_subject.clone());
        }
        all.sort();
        all
    };
    if filters(server) != filters(declared) {
        drift
            .editable
            .push(diff("filter_subjects", filters(server), decl.subjects));
    }
    if declared.max_deliver != 0 && server.max_deliver != declared.max_deliver {
        drift.editable.push(diff(
            "max_deliver",
            server.max_deliver,
            declared.max_deliver,
        ));
    }
    if !declared.ack_wait.is_zero() && server.ack_wait != declared.ack_wait {
        drift
            .editable
            .push(diff("ack_wait", server.ack_wait, declared.ack_wait));
    }
    if !server.backoff.is_empty() {
        // Set outside this library: it overrides `ack_wait`; the runtime's naks apply the
        // declared backoff instead.
        drift
            .editable
            .push(diff("backoff", &server.backoff, Vec::<Duration>::new()));
    }
    if declared.max_ack_pending != 0 && server.max_ack_pending != declared.max_ack_pending {
        drift.editable.push(diff(
            "max_ack_pending",
            server.max_ack_pending,
            declared.max_ack_pending,
        ));
    }
    if declared.description.is_some() && server.description != declared.description {
        drift.editable.push(diff(
            "description",
            &server.description,
            &declared.description,
        ));
    }
    drift
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
