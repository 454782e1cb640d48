//! Key-value buckets and object stores: what `#[kv_bucket]` and `#[object_store]` declare, and
//! their rules.
//!
//! A bucket is a stream underneath, named and shaped as every NATS client expects (ADR-8 for
//! key-value, ADR-20 for objects): a key-value bucket `NAME` is the stream `KV_NAME` capturing
//! `$KV.NAME.>`, with `max_msgs_per_subject` = history, roll-ups allowed, deletes denied, direct
//! gets allowed and `discard = new`; an object store `NAME` is the stream `OBJ_NAME` capturing
//! `$O.NAME.C.>` and `$O.NAME.M.>`. The runtime builds that stream from a [`BucketDecl`].
//!
//! ```
//! use core::time::Duration;
//! use topology_core::bucket::{check_bucket, BucketDecl, BucketError};
//!
//! const STATUS: BucketDecl = BucketDecl::kv("MEMBER_STATUS")
//!     .history(1)
//!     .ttl(Duration::from_secs(3600))
//!     .replicas(3);
//! assert_eq!(check_bucket(&STATUS), Ok(()));
//! assert_eq!(check_bucket(&BucketDecl::kv("member.status")), Err(BucketError::Name));
//! assert_eq!(check_bucket(&BucketDecl::kv("S").history(65)), Err(BucketError::History));
//! ```

use core::time::Duration;

use crate::duration;
use crate::limits::{self, MAX_BYTES, REPLICAS};
use crate::placement::Storage;
use crate::prim::IntRange;

/// `history`: 1 to 64 values kept per key (the server's limit for key-value buckets).
pub const HISTORY: IntRange = IntRange { min: 1, max: 64 };
/// `max_value_size`: at least 1 byte, at most `i32::MAX` (omit it for the server's limit).
pub const MAX_VALUE_SIZE: IntRange = limits::MAX_MSG_SIZE;

/// The stream settings every client expects of a key-value bucket or an object store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BucketShape {
    /// `allow_rollup_hdrs`: a purge of a key (or object) is a roll-up.
    pub allow_rollup: bool,
    /// `deny_delete`: messages are removed by purge markers, never deleted one by one.
    pub deny_delete: bool,
    /// `allow_direct`: reads answered by any replica.
    pub allow_direct: bool,
}

/// A key-value bucket or an object store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BucketKind {
    /// A key-value bucket (`#[kv_bucket]`): stream `KV_<name>`, subjects `$KV.<name>.>`.
    KeyValue,
    /// An object store (`#[object_store]`): stream `OBJ_<name>`, subjects `$O.<name>.C.>` and
    /// `$O.<name>.M.>`.
    Object,
}

impl BucketKind {
    /// The prefix of its stream's name: `KV_` or `OBJ_`.
    pub const fn stream_prefix(&self) -> &'static str {
        match self {
            BucketKind::KeyValue => "KV_",
            BucketKind::Object => "OBJ_",
        }
    }
    /// How reports and errors name it: `key-value bucket` or `object store`.
    pub const fn noun(&self) -> &'static str {
        match self {
            BucketKind::KeyValue => "key-value bucket",
            BucketKind::Object => "object store",
        }
    }
}

/// A key-value bucket or object store declaration.
///
/// Every optional field is `None` when the declaration does not set it: the defaults of the
/// official clients apply (history 1, one replica, file storage, no limits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BucketDecl {
    /// Key-value or object.
    pub kind: BucketKind,
    /// The bucket's name (`[a-zA-Z0-9_-]+`).
    pub name: &'static str,
    /// Values kept per key, 1..=64 (key-value only; default 1).
    pub history: Option<u8>,
    /// How long a value (or object) is kept.
    pub ttl: Option<Duration>,
    /// Number of replicas (1..=5).
    pub replicas: Option<u8>,
    /// Storage backend (cannot be changed once created).
    pub storage: Option<Storage>,
    /// Largest value accepted, in bytes (key-value only).
    pub max_value_size: Option<i32>,
    /// Total size of the bucket in bytes.
    pub max_bytes: Option<i64>,
    /// A description stored on the server.
    pub description: Option<&'static str>,
    /// Owned by someone else: never created or changed here, only verified.
    pub external: bool,
    /// The version of the service declaring it, stamped on the server (the macros set the
    /// declaring crate's `CARGO_PKG_VERSION`).
    pub version: Option<&'static str>,
}

impl BucketDecl {
    /// A key-value bucket named `name`, with the official clients' defaults.
    pub const fn kv(name: &'static str) -> Self {
        Self::new(BucketKind::KeyValue, name)
    }
    /// An object store named `name`, with the official clients' defaults.
    pub const fn object(name: &'static str) -> Self {
        Self::new(BucketKind::Object, name)
    }
    const fn new(kind: BucketKind, name: &'static str) -> Self {
        BucketDecl {
            kind,
            name,
            history: None,
            ttl: None,
            replicas: None,
            storage: None,
            max_value_size: None,
            max_bytes: None,
            description: None,
            external: false,
            version: None,
        }
    }
    /// Sets the values kept per key.
    pub const fn history(mut self, history: u8) -> Self {
        self.history = Some(history);
        self
    }
    /// Sets how long a value is kept.
    pub const fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }
    /// Sets the number of replicas.
    pub const fn replicas(mut self, replicas: u8) -> Self {
        self.replicas = Some(replicas);
        self
    }
    /// Sets the storage backend.
    pub const fn storage(mut self, storage: Storage) -> Self {
        self.storage = Some(storage);
        self
    }
    /// Sets the largest value accepted, in bytes.
    pub const fn max_value_size(mut self, size: i32) -> Self {
        self.max_value_size = Some(size);
        self
    }
    /// Sets the total size of the bucket in bytes.
    pub const fn max_bytes(mut self, max_bytes: i64) -> Self {
        self.max_bytes = Some(max_bytes);
        self
    }
    /// Sets the description.
    pub const fn description(mut self, description: &'static str) -> Self {
        self.description = Some(description);
        self
    }
    /// Marks the bucket as owned elsewhere: verified, never created or changed.
    pub const fn external(mut self) -> Self {
        self.external = true;
        self
    }
    /// Sets the declaring service's version, stamped on the server's stream.
    pub const fn version(mut self, version: &'static str) -> Self {
        self.version = Some(version);
        self
    }
}

/// Implemented by `#[kv_bucket]` types: the declaration, and the type of its values.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a key-value bucket",
    label = "not a `#[kv_bucket]` type",
    note = "declare it with `#[kv_bucket(name = \"...\")]` on a unit struct"
)]
pub trait KvBucketDef {
    /// The bucket's declaration.
    const DECL: BucketDecl;
}

/// Implemented by `#[object_store]` types.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an object store",
    label = "not an `#[object_store]` type",
    note = "declare it with `#[object_store(name = \"...\")]` on a unit struct"
)]
pub trait ObjectStoreDef {
    /// The store's declaration.
    const DECL: BucketDecl;
}

/// Why a bucket declaration is invalid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BucketError {
    /// The name is not `[a-zA-Z0-9_-]+`.
    Name,
    /// `history` outside [`HISTORY`].
    History,
    /// `history` on an object store.
    HistoryOnObject,
    /// `max_value_size` on an object store (objects are chunked).
    MaxValueSizeOnObject,
    /// `replicas` outside [`REPLICAS`].
    Replicas,
    /// `ttl` is zero or too long.
    Ttl,
    /// `max_value_size` outside [`MAX_VALUE_SIZE`].
    MaxValueSize,
    /// `max_bytes` outside [`MAX_BYTES`].
    MaxBytes,
    /// The description is longer than [`MAX_DESCRIPTION_LEN`](crate::rules::MAX_DESCRIPTION_LEN).
    DescriptionTooLong,
    /// Settings on an external bucket, which is never created or changed here.
    ExternalWithSettings,
}

impl BucketError {
    /// What is wrong, in lowercase.
    pub const fn message(&self) -> &'static str {
        match self {
            BucketError::Name => {
                "a bucket name is one or more of the letters a-z and A-Z, the digits 0-9, `_` and `-` (the rule of the server and of every client)"
            }
            BucketError::History => "history must be between 1 and 64 values per key",
            BucketError::HistoryOnObject => {
                "an object store keeps one version of each object: `history` is for key-value buckets"
            }
            BucketError::MaxValueSizeOnObject => {
                "an object store splits objects into chunks: `max_value_size` is for key-value buckets; limit the store with `max_bytes`"
            }
            BucketError::Replicas => "replicas must be between 1 and 5",
            BucketError::Ttl => {
                "ttl must be more than zero and at most about 292 years; omit it to keep values forever"
            }
            BucketError::MaxValueSize => {
                "max_value_size must be between 1 and 2147483647; omit it for the server's limit"
            }
            BucketError::MaxBytes => "max_bytes must be at least 1; omit it for no limit",
            BucketError::DescriptionTooLong => limits::DESCRIPTION_TOO_LONG,
            BucketError::ExternalWithSettings => {
                "an external bucket is never created or changed here, so it takes no settings but its name"
            }
        }
    }
}

/// Whether `name` is a valid bucket name: `[a-zA-Z0-9_-]+` (nats-server's and the clients'
/// `validBucketRe`).
pub const fn valid_bucket_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    if bytes.is_empty() {
        return false;
    }
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if !(b.is_ascii_alphanumeric() || b == b'_' || b == b'-') {
            return false;
        }
        i += 1;
    }
    true
}

/// The keys of `#[kv_bucket]`/`#[object_store]` that an external bucket cannot take, each
/// the name of a field of [`BucketDecl`].
pub const EXTERNAL_REFUSED_KEYS: &[&str] = &[
    "history",
    "ttl",
    "replicas",
    "storage",
    "max_value_size",
    "max_bytes",
    "description",
];

const fn has_settings(decl: &BucketDecl) -> bool {
    decl.history.is_some()
        || decl.ttl.is_some()
        || decl.replicas.is_some()
        || decl.storage.is_some()
        || decl.max_value_size.is_some()
        || decl.max_bytes.is_some()
        || decl.description.is_some()
}

/// Checks a bucket declaration.
pub const fn check_bucket(decl: &BucketDecl) -> Result<(), BucketError> {
    if !valid_bucket_name(decl.name) || decl.name.len() > crate::names::MAX_NAME_LEN - 4 {
        return Err(BucketError::Name);
    }
    if decl.external && has_settings(decl) {
        return Err(BucketError::ExternalWithSettings);
    }
    if let Some(h) = decl.history {
        if matches!(decl.kind, BucketKind::Object) {
            return Err(BucketError::HistoryOnObject);
        }
        if !HISTORY.contains(h as i128) {
            return Err(BucketError::History);
        }
    }
    if let Some(n) = decl.max_value_size {
        if matches!(decl.kind, BucketKind::Object) {
            return Err(BucketError::MaxValueSizeOnObject);
        }
        if !MAX_VALUE_SIZE.contains(n as i128) {
            return Err(BucketError::MaxValueSize);
        }
    }
    if let Some(n) = decl.replicas
        && !REPLICAS.contains(n as i128)
    {
        return Err(BucketError::Replicas);
    }
    if let Some(d) = decl.ttl
        && (d.is_zero() || !duration::fits(d))
    {
        return Err(BucketError::Ttl);
    }
    if let Some(n) = decl.max_bytes
        && !MAX_BYTES.contains(n as i128)
    {
        return Err(BucketError::MaxBytes);
    }
    if let Some(d) = decl.description
        && !limits::description_fits(d)
    {
        return Err(BucketError::DescriptionTooLong);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for good in ["A", "member_status", "a-b-9"] {
            assert!(valid_bucket_name(good), "{good}");
        }
        for bad in ["", "a.b", "a b", "a*", "a>", "é", "a/b"] {
            assert!(!valid_bucket_name(bad), "{bad}");
        }
    }

    #[test]
    fn rules() {
        let kv = BucketDecl::kv("S");
        assert_eq!(check_bucket(&kv.history(64)), Ok(()));
        assert_eq!(check_bucket(&kv.history(0)), Err(BucketError::History));
        assert_eq!(check_bucket(&kv.replicas(6)), Err(BucketError::Replicas));
        assert_eq!(check_bucket(&kv.ttl(Duration::ZERO)), Err(BucketError::Ttl));
        assert_eq!(check_bucket(&kv.max_bytes(0)), Err(BucketError::MaxBytes));
        assert_eq!(
            check_bucket(&kv.max_value_size(0)),
            Err(BucketError::MaxValueSize)
        );
        assert_eq!(
            check_bucket(&kv.external().replicas(3)),
            Err(BucketError::ExternalWithSettings)
        );
        let obj = BucketDecl::object("O");
        assert_eq!(check_bucket(&obj.replicas(3)), Ok(()));
        assert_eq!(
            check_bucket(&obj.history(2)),
            Err(BucketError::HistoryOnObject)
        );
        assert_eq!(
            check_bucket(&obj.max_value_size(5)),
            Err(BucketError::MaxValueSizeOnObject)
        );
    }
}
