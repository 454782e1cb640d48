//! Provisioning errors: what went wrong, where (stream, consumer, fields) and what to do; and
//! the classification of a JetStream API failure as worth retrying or final.

use std::fmt;

use async_nats::jetstream::{self, ErrorCode};

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
    /// The server answered in a shape this library cannot read, several times in a row.
    /// Retried by a supervisor with its backoff, and shown in health.
    UnexpectedAnswer,
    /// The server lacks what the declaration needs (`migrate_from` needs consumer pause,
    /// nats-server 2.11 or newer); the message names the server's version.
    Unsupported,
    /// A newer declaration migrated away from this consumer and it was deleted: this
    /// instance (of the old fleet) does not create it again. Retried, so the instance stays
    /// unready until it is stopped.
    Superseded,
    /// The consumer a partitioned group migrates from is gone: drained and deleted (or never
    /// there). Nothing is left to consume from it; its supervisor stops, ready.
    Retired,
    /// The server denied this connection's user a JetStream API request the declaration
    /// needs (a `Permissions Violation`); the message names the subject. Retried by a
    /// supervisor, so a permission granted later is picked up; `plan` and `provision` fail
    /// at once.
    PermissionDenied,
    /// A request went unanswered for longer than it may take: a relay's create placed on a
    /// node that was just lost answers nobody until that node returns. Retried by a
    /// supervisor, which deletes the relay's consumer and creates it again first.
    Unanswered,
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

/// How a configuration on the server differs from its declaration: the fields an update can
/// change, and those it cannot.
#[derive(Debug, Default)]
pub(crate) struct Drift {
    pub(crate) editable: Vec<FieldDiff>,
    pub(crate) immutable: Vec<FieldDiff>,
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
    pub(crate) fn new(kind: ProvisionErrorKind, stream: &str, message: impl Into<String>) -> Self {
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

    pub(crate) fn consumer(self, consumer: &str) -> Self {
        self.in_consumer(Some(consumer))
    }

    pub(crate) fn in_consumer(mut self, consumer: Option<&str>) -> Self {
        self.consumer = consumer.map(str::to_owned);
        self
    }

    pub(crate) fn fields(mut self, fields: Vec<FieldDiff>) -> Self {
        self.fields = fields;
        self
    }

    pub(crate) fn source(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(Box::new(source));
        self
    }

    /// Records how many attempts were made before this error.
    pub(crate) fn after(mut self, attempts: u32) -> Self {
        self.attempts = attempts;
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
                | ProvisionErrorKind::UnexpectedAnswer
                | ProvisionErrorKind::Superseded
                | ProvisionErrorKind::PermissionDenied
                | ProvisionErrorKind::Unanswered
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
    /// An answer this library cannot read: the request's full subject (with the API prefix),
    /// the answer (shortened) and why it could not be read.
    Unexpected {
        subject: String,
        answer: String,
        error: String,
    },
    /// The server answered with an error.
    Server(jetstream::Error),
    /// The server denied the request's subject to this connection's user (it said so on the
    /// connection: the request itself just went unanswered).
    Denied {
        /// Publish (to the request's subject) or subscribe (to the inboxes answers come to).
        action: crate::grant::Verb,
        /// The subject denied.
        subject: String,
    },
}

impl ApiError {
    pub(crate) fn code(&self) -> Option<ErrorCode> {
        match self {
            ApiError::Server(e) => Some(e.error_code()),
            ApiError::Request(_)
            | ApiError::Retry(_)
            | ApiError::Unexpected { .. }
            | ApiError::Denied { .. } => None,
        }
    }

    /// Nothing listens on the request's subject (no JetStream there, or not under that
    /// prefix).
    pub(crate) fn is_no_responders(&self) -> bool {
        matches!(self, ApiError::Request(e)
            if e.kind() == jetstream::context::RequestErrorKind::NoResponders)
    }

    /// Timeouts, no responders, the server's "try again" codes, and a stream or consumer
    /// offline.
    pub(crate) fn is_transient(&self) -> bool {
        match self {
            ApiError::Request(_) | ApiError::Retry(_) | ApiError::Unexpected { .. } => true,
            ApiError::Denied { .. } => false,
            ApiError::Server(e) => {
                let code = e.error_code();
                // Offline: every node holding the stream or consumer is down (stopped
                // gracefully, its peers know at once); it answers again when one returns, and
                // a relay's consumer is created again elsewhere meanwhile.
                code == ErrorCode::CLUSTER_NOT_AVAILABLE
                    || code == ErrorCode::CLUSTER_NOT_LEADER
                    || code == ErrorCode::CLUSTER_NO_PEERS
                    || code == ErrorCode::STREAM_OFFLINE
                    || code == ErrorCode::CONSUMER_OFFLINE
                    || e.code() == 503
            }
        }
    }
}

impl ApiError {
    /// An answer to `subject` that could not be read as expected.
    pub(crate) fn unexpected(subject: &str, answer: &str, error: impl fmt::Display) -> Self {
        const SHOWN: usize = 200;
        let answer = match answer.char_indices().nth(SHOWN) {
            Some((cut, _)) => format!("{}...", &answer[..cut]),
            None => answer.to_owned(),
        };
        ApiError::Unexpected {
            subject: subject.to_owned(),
            answer,
            error: error.to_string(),
        }
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ApiError::Request(e) => write!(f, "request failed: {e}"),
            ApiError::Retry(e) => f.write_str(e),
            ApiError::Unexpected {
                subject,
                answer,
                error,
            } => write!(f, "unexpected answer to `{subject}`: {answer} ({error})"),
            ApiError::Server(e) => write!(f, "server error: {e}"),
            ApiError::Denied { action, subject } => write!(
                f,
                "the server denied this connection's user {} `{subject}` (Permissions \
                 Violation)",
                match action {
                    crate::grant::Verb::Publish => "publishing to",
                    crate::grant::Verb::Subscribe => "subscribing to",
                }
            ),
        }
    }
}

impl std::error::Error for ApiError {}

/// The outcome of one attempt: done, worth retrying, or final.
pub(crate) enum Failure {
    Transient(ApiError),
    Fatal(ProvisionError),
}

impl From<ProvisionError> for Failure {
    fn from(e: ProvisionError) -> Self {
        Failure::Fatal(e)
    }
}

/// The server refused `operation`. Creates and updates are refused for what the declaration
/// says; anything else (reads, deletes) for permissions or the server's state.
pub(crate) fn rejected(
    operation: &str,
    stream: &str,
    consumer: Option<&str>,
    error: ApiError,
) -> ProvisionError {
    if let ApiError::Denied { .. } = &error {
        return ProvisionError::new(
            ProvisionErrorKind::PermissionDenied,
            stream,
            format!(
                "{operation}: {error}; grant it to this service's user (`export --permissions` \
                 lists every permission the service needs, each with the declaration that \
                 needs it)"
            ),
        )
        .source(error)
        .in_consumer(consumer);
    }
    let fix = if operation.starts_with("creating") || operation.starts_with("updating") {
        "change the declaration to what the server accepts"
    } else {
        "check this account's JetStream permissions and the server's state"
    };
    ProvisionError::new(
        ProvisionErrorKind::Rejected,
        stream,
        format!("the server refused {operation}: {error}; {fix}"),
    )
    .source(error)
    .in_consumer(consumer)
}

debug_as_display!(ProvisionError);
