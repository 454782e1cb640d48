//! The error a handler returns, and the permanent error a payload that cannot be decoded
//! becomes. Transient or permanent is all dispatch needs to know to nak or dead-letter.

use std::fmt;

/// The error a handler returns.
///
/// A handler returns `Result<(), E>` for any `E` that converts into
/// `Box<dyn std::error::Error + Send + Sync>`: every std error, `anyhow::Error`,
/// `eyre::Report`, `String` and `&str`, or `HandlerError` itself. Each of them also converts
/// into `HandlerError` with `?`. By default an error is *transient*: the message is negatively
/// acknowledged and redelivered after the consumer's backoff. [`HandlerError::permanent`] marks
/// it as one that no retry will fix: the message is dead-lettered (if the consumer declares a
/// `dead_letter` subject) and terminated.
///
/// ```
/// use nats_topology::HandlerError;
///
/// fn check(amount: i64) -> Result<(), HandlerError> {
///     if amount < 0 {
///         return Err(HandlerError::permanent("negative amount"));
///     }
///     let _parsed: u32 = "42".parse()?; // any std error converts
///     Ok(())
/// }
/// assert!(check(-1).unwrap_err().is_permanent());
/// assert!(check(1).is_ok());
/// ```
///
/// # Why `HandlerError` does not implement `std::error::Error`
///
/// For the same reason `anyhow::Error` does not: `?` relies on the blanket
/// `impl<E: Into<Box<dyn Error + Send + Sync>>> From<E> for HandlerError`, which would overlap
/// with the standard library's `impl<T> From<T> for T` if `HandlerError` were itself an error
/// (rustc rejects the pair). Keeping `?` for every error type is worth more. Where a
/// `dyn Error` is needed, use [`HandlerError::source`] or [`HandlerError::into_source`]; its
/// `Display` and `Debug` are those of the underlying error.
pub struct HandlerError {
    source: Box<dyn std::error::Error + Send + Sync + 'static>,
    permanent: bool,
    unavailable: bool,
}

impl HandlerError {
    /// A transient failure: the message is redelivered after a delay.
    pub fn new(error: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>) -> Self {
        HandlerError {
            source: error.into(),
            permanent: false,
            unavailable: false,
        }
    }

    /// A transient failure because what the handler depends on is down (a database, an API):
    /// the consumer stops taking messages at once and probes with one until a handler
    /// succeeds (see [`RuntimeBuilder::outage`](crate::RuntimeBuilder::outage)), instead of
    /// waiting for the failures to add up.
    ///
    /// ```
    /// use nats_topology::HandlerError;
    ///
    /// let error = HandlerError::unavailable("the ledger database refuses connections");
    /// assert!(error.is_unavailable() && !error.is_permanent());
    /// ```
    pub fn unavailable(
        error: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> Self {
        HandlerError {
            source: error.into(),
            permanent: false,
            unavailable: true,
        }
    }

    /// Whether the handler said that what it depends on is down
    /// ([`HandlerError::unavailable`]).
    pub fn is_unavailable(&self) -> bool {
        self.unavailable
    }

    /// A failure no retry will fix: the message is dead-lettered and terminated at once.
    pub fn permanent(error: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>) -> Self {
        HandlerError {
            source: error.into(),
            permanent: true,
            unavailable: false,
        }
    }

    /// Whether this failure is permanent.
    pub fn is_permanent(&self) -> bool {
        self.permanent
    }

    /// The underlying error.
    pub fn source(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        &*self.source
    }

    /// The underlying error, by value (for a caller that needs a `dyn Error`).
    pub fn into_source(self) -> Box<dyn std::error::Error + Send + Sync + 'static> {
        self.source
    }
}

impl<E> From<E> for HandlerError
where
    E: Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
{
    fn from(error: E) -> Self {
        HandlerError::new(error)
    }
}

impl fmt::Display for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.source, f)
    }
}

impl fmt::Debug for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HandlerError")
            .field("source", &self.source)
            .field("permanent", &self.permanent)
            .field("unavailable", &self.unavailable)
            .finish()
    }
}

/// A payload that could not be decoded, or whose `Content-Type` names another codec than the
/// handler's; always permanent (redelivery cannot fix it).
#[derive(Debug, thiserror::Error)]
#[error("cannot decode the payload as {type_name} ({}): {source}", codec.content_type())]
pub struct DecodeError {
    pub(super) type_name: &'static str,
    pub(super) codec: crate::codec::CodecId,
    #[source]
    pub(super) source: crate::codec::CodecError,
}

/// The text of a caught panic.
pub(crate) fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}
