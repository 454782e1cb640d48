//! The errors of the bucket handles: each names the bucket and, when there is one, the key or
//! object, and keeps the client's error as its source.

use std::error::Error as StdError;
use std::fmt;

type Source = Box<dyn StdError + Send + Sync + 'static>;

/// What went wrong with a key-value operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvErrorKind {
    /// A compare-and-swap lost: the key's last revision is not `expected_revision` (another
    /// writer got there first; server error 10071). Read the entry again and retry, or give up.
    Conflict {
        /// The revision the write expected to replace.
        expected_revision: u64,
    },
    /// `create` found a value already under the key.
    AlreadyExists,
    /// The key is empty, starts or ends with `.`, or holds characters a key cannot.
    InvalidKey,
    /// The bucket could not be opened (it does not exist yet, or is not a key-value bucket).
    Open,
    /// The value could not be encoded as JSON.
    Encode,
    /// The stored value does not decode as the bucket's value type.
    Decode,
    /// The request failed or timed out (the source says why).
    Request,
}

/// An error of a [`Kv`](super::Kv) handle: what, in which bucket, for which key.
///
/// ```
/// # async fn f(kv: nats_topology::bucket::Kv<u64>) {
/// use nats_topology::bucket::KvErrorKind;
///
/// match kv.update("leader", &7, 41).await {
///     Ok(revision) => println!("took it at revision {revision}"),
///     Err(e) if matches!(e.kind(), KvErrorKind::Conflict { .. }) => println!("someone else won: {e}"),
///     Err(e) => eprintln!("{e}"),
/// }
/// # }
/// ```
pub struct KvError {
    kind: KvErrorKind,
    bucket: &'static str,
    key: Option<String>,
    source: Option<Source>,
}

impl KvError {
    pub(crate) fn new(kind: KvErrorKind, bucket: &'static str, key: Option<&str>) -> Self {
        KvError {
            kind,
            bucket,
            key: key.map(str::to_owned),
            source: None,
        }
    }

    pub(crate) fn source(mut self, source: impl Into<Source>) -> Self {
        self.source = Some(source.into());
        self
    }

    /// What went wrong.
    pub fn kind(&self) -> KvErrorKind {
        self.kind
    }

    /// The bucket's name.
    pub fn bucket(&self) -> &str {
        self.bucket
    }

    /// The key, for an operation on one.
    pub fn key(&self) -> Option<&str> {
        self.key.as_deref()
    }
}

impl fmt::Display for KvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "key-value bucket `{}`", self.bucket)?;
        if let Some(key) = &self.key {
            write!(f, ", key `{key}`")?;
        }
        let what = match self.kind {
            KvErrorKind::Conflict { expected_revision } => {
                return write!(
                    f,
                    ": the key is no longer at revision {expected_revision} (another writer \
                     changed it first); read the entry again and retry with its revision"
                );
            }
            KvErrorKind::AlreadyExists => {
                "a value already exists; read it, or `update` it with its revision"
            }
            KvErrorKind::InvalidKey => {
                "not a valid key: keys are non-empty, do not start or end with `.`, and hold \
                 letters, digits and `-/_=.`"
            }
            KvErrorKind::Open => {
                "the bucket could not be opened: declare it (`#[kv_bucket]`) in a runtime that \
                 provisions it, or check that it exists"
            }
            KvErrorKind::Encode => "the value could not be encoded by the bucket's codec",
            KvErrorKind::Decode => {
                "the stored value does not decode as the bucket's value type with its codec \
                 (every writer of a bucket writes the same codec and type)"
            }
            KvErrorKind::Request => "the request failed",
        };
        write!(f, ": {what}")?;
        if let Some(source) = &self.source {
            write!(f, ": {source}")?;
        }
        Ok(())
    }
}

impl StdError for KvError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.source
            .as_deref()
            .map(|s| s as &(dyn StdError + 'static))
    }
}

/// What went wrong with an object store operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObjectErrorKind {
    /// No object of that name.
    NotFound,
    /// The store could not be opened (it does not exist yet, or is not an object store).
    Open,
    /// Reading or writing the object's bytes failed.
    Io,
    /// The request failed or timed out (the source says why).
    Request,
}

/// An error of an [`ObjectStore`](super::ObjectStore) handle: what, in which store, for which
/// object.
pub struct ObjectError {
    kind: ObjectErrorKind,
    bucket: &'static str,
    object: Option<String>,
    source: Option<Source>,
}

impl ObjectError {
    pub(crate) fn new(kind: ObjectErrorKind, bucket: &'static str, object: Option<&str>) -> Self {
        ObjectError {
            kind,
            bucket,
            object: object.map(str::to_owned),
            source: None,
        }
    }

    pub(crate) fn source(mut self, source: impl Into<Source>) -> Self {
        self.source = Some(source.into());
        self
    }

    /// What went wrong.
    pub fn kind(&self) -> ObjectErrorKind {
        self.kind
    }

    /// The store's name.
    pub fn bucket(&self) -> &str {
        self.bucket
    }

    /// The object's name, for an operation on one.
    pub fn object(&self) -> Option<&str> {
        self.object.as_deref()
    }
}

impl fmt::Display for ObjectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "object store `{}`", self.bucket)?;
        if let Some(object) = &self.object {
            write!(f, ", object `{object}`")?;
        }
        let what = match self.kind {
            ObjectErrorKind::NotFound => "no such object",
            ObjectErrorKind::Open => {
                "the store could not be opened: declare it (`#[object_store]`) in a runtime \
                 that provisions it, or check that it exists"
            }
            ObjectErrorKind::Io => "reading or writing the object failed",
            ObjectErrorKind::Request => "the request failed",
        };
        write!(f, ": {what}")?;
        if let Some(source) = &self.source {
            write!(f, ": {source}")?;
        }
        Ok(())
    }
}

impl StdError for ObjectError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.source
            .as_deref()
            .map(|s| s as &(dyn StdError + 'static))
    }
}

debug_as_display!(KvError, ObjectError);
