//! What can be wrong with the environment, named by its variable; never with a secret in it.

use std::fmt;

/// What kind of problem [`options_from`](crate::connect::options_from) or
/// [`connect_from_env`](crate::connect_from_env) found; see [`EnvError::kind`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum EnvErrorKind {
    /// A value that cannot be used: a malformed server list, a file that does not hold what
    /// the variable needs, an inbox prefix that is not a subject, or what looks like a secret
    /// where a path belongs.
    Invalid,
    /// A variable names a file that cannot be read.
    Unreadable,
    /// One variable of a pair is set without the other (`NATS_USER` and `NATS_PASSWORD`,
    /// `NATS_CERT` and `NATS_KEY`).
    Incomplete,
    /// More than one way of authenticating is set.
    Conflict,
    /// The options were built, but the client could not be created (see the source).
    Connect,
}

/// A problem with the connection settings in the environment: which variable, what is wrong
/// and what to do. It never contains a password, a token, a seed or a file's content.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use topology_runtime::connect::{EnvErrorKind, options_from};
///
/// let error = options_from(|name| (name == "NATS_USER").then(|| "billing".to_owned()))
///     .await
///     .unwrap_err();
/// assert_eq!(error.kind(), EnvErrorKind::Incomplete);
/// assert_eq!(error.variable(), Some("NATS_USER"));
/// assert!(error.to_string().contains("NATS_PASSWORD"));
/// # }
/// ```
pub struct EnvError {
    pub(super) kind: EnvErrorKind,
    pub(super) variable: Option<&'static str>,
    pub(super) message: String,
    pub(super) source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl EnvError {
    pub(super) fn new(
        kind: EnvErrorKind,
        variable: &'static str,
        message: impl Into<String>,
    ) -> Self {
        EnvError {
            kind,
            variable: Some(variable),
            message: message.into(),
            source: None,
        }
    }

    pub(super) fn source(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(Box::new(source));
        self
    }

    /// The kind of problem.
    pub fn kind(&self) -> EnvErrorKind {
        self.kind
    }

    /// The variable concerned (for a conflict, the first of those set); `None` when
    /// connecting failed.
    pub fn variable(&self) -> Option<&'static str> {
        self.variable
    }
}

/// The message, then the source's (an I/O error, a connect error) after a colon, as
/// async-nats' errors read.
impl fmt::Display for EnvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)?;
        if let Some(source) = &self.source {
            write!(f, ": {source}")?;
        }
        Ok(())
    }
}

impl std::error::Error for EnvError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_ref()
            .map(|source| source.as_ref() as &(dyn std::error::Error + 'static))
    }
}

debug_as_display!(EnvError);
