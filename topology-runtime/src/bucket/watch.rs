//! Watches of a key-value bucket (`#[kv_watch]`): the change a handler receives
//! ([`KvEntry`] with its [`KvOperation`]), how one is read from a message of the bucket's
//! stream, and the broadcast relay a watch runs as.
//!
//! A watch is a relay on the bucket's stream `KV_<name>`, filtered on `$KV.<name>.<keys>`,
//! created by every instance: the revision is the stream sequence, so the relay's resume point
//! (the last revision handled) is where a watch re-created after a loss starts again. It
//! handles one change at a time (`max_ack_pending = 1`): a handler error is retried before
//! any later revision is delivered.

use bytes::Bytes;
use topology_core::bucket::KvBucketDef;

use super::kv::KvEntry;
use crate::handler::{HandlerError, Incoming};

/// What a change did to its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KvOperation {
    /// A value was put.
    Put,
    /// The value was deleted (a delete marker; earlier revisions are kept).
    Delete,
    /// The value and its history were purged (a purge marker, or the server's marker when a
    /// value's time to live ran out).
    Purge,
}

/// The header naming a change's operation (ADR-8).
const KV_OPERATION: &str = "KV-Operation";
/// The header of a marker the server writes itself (nats-server 2.11+: a purge, a value's
/// time to live running out, a removal).
const MARKER_REASON: &str = "Nats-Marker-Reason";

impl KvOperation {
    /// The operation of a message with these headers; `None` for one no client writes.
    fn of(headers: Option<&async_nats::HeaderMap>) -> Option<KvOperation> {
        let Some(headers) = headers else {
            return Some(KvOperation::Put);
        };
        if let Some(op) = headers.get(KV_OPERATION) {
            return match op.as_str() {
                "PUT" => Some(KvOperation::Put),
                "DEL" => Some(KvOperation::Delete),
                "PURGE" => Some(KvOperation::Purge),
                _ => None,
            };
        }
        match headers.get(MARKER_REASON).map(|r| r.as_str()) {
            None => Some(KvOperation::Put),
            Some("MaxAge" | "Purge") => Some(KvOperation::Purge),
            Some("Remove") => Some(KvOperation::Delete),
            Some(_) => None,
        }
    }
}

/// Implemented by `#[kv_bucket]` types: the type of the bucket's values and how they decode,
/// for the `KvEntry` its watches receive. Not public API.
#[doc(hidden)]
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a key-value bucket",
    label = "not a `#[kv_bucket]` type",
    note = "a `#[kv_watch]` watches a bucket declared with `#[kv_bucket(name = \"...\")]` on a unit struct; an `#[object_store]` has no keys to watch"
)]
pub trait KvBucketValue: KvBucketDef {
    /// The type of its values (`Bytes` when the bucket declares no `value`).
    type Value;
    /// How they decode: the bucket's codec or [`RawValue`]. (Unbounded here, so that a value type
    /// that is not serde's is reported once, by the bucket's handle, and not again here.)
    type Codec;
}

/// How a bucket's values decode: its codec ([`Json`](crate::codec::Json) by default), or raw.
#[doc(hidden)]
pub trait ValueCodec<T> {
    /// Its content type, for an error.
    const CONTENT_TYPE: &'static str;
    /// Decodes one value.
    fn decode(bytes: Bytes) -> Result<T, Box<dyn std::error::Error + Send + Sync>>;
}

/// JSON values (a bucket with `value = T` and no `codec`).
#[doc(hidden)]
pub type JsonValue = crate::codec::Json;

/// Raw values (a bucket without `value`).
#[doc(hidden)]
pub struct RawValue;

impl<C: crate::codec::Decode<T>, T> ValueCodec<T> for C {
    const CONTENT_TYPE: &'static str = C::ID.content_type();
    fn decode(bytes: Bytes) -> Result<T, Box<dyn std::error::Error + Send + Sync>> {
        C::decode(&bytes)
    }
}

impl ValueCodec<Bytes> for RawValue {
    const CONTENT_TYPE: &'static str = "application/octet-stream";
    fn decode(bytes: Bytes) -> Result<Bytes, Box<dyn std::error::Error + Send + Sync>> {
        Ok(bytes)
    }
}

/// What the first argument of a `#[kv_watch]` handler of bucket `B` may be: the bucket's
/// `KvEntry<V>`, and nothing else (the compiler says so at the argument). Not public API.
#[doc(hidden)]
#[diagnostic::on_unimplemented(
    message = "the first argument of a `#[kv_watch]` handler of `{B}` is the change, `KvEntry<V>` with `V` the bucket's value type, not `{Self}`",
    label = "not the `KvEntry` of `{B}`'s values",
    note = "write `entry: KvEntry<V>` with the `value` type of `{B}`'s `#[kv_bucket]` (`KvEntry<Bytes>` when it declares none); the value is `entry.value`, `None` for a delete or a purge"
)]
pub trait KvWatchArg<B>: Sized {
    /// The argument, from the change.
    fn from_entry(entry: KvEntry<B::Value>) -> Self
    where
        B: KvBucketValue;
}

impl<B: KvBucketValue> KvWatchArg<B> for KvEntry<B::Value> {
    fn from_entry(entry: KvEntry<B::Value>) -> Self {
        entry
    }
}

/// [`decode_kv_entry`], as the handler's first argument `A` (which must be `B`'s `KvEntry`).
#[doc(hidden)]
pub fn decode_kv_watch_arg<B, A>(incoming: &Incoming) -> Result<A, HandlerError>
where
    B: KvBucketValue,
    B::Codec: ValueCodec<B::Value>,
    A: KvWatchArg<B>,
{
    decode_kv_entry::<B>(incoming).map(A::from_entry)
}

/// The change a `#[kv_watch]` handler receives, from a message of `B`'s stream. A value that
/// does not decode is a permanent failure naming the bucket, the key and the revision: the
/// watch passes over it (counted in health and metrics as dead-lettered, and logged).
#[doc(hidden)]
pub fn decode_kv_entry<B>(incoming: &Incoming) -> Result<KvEntry<B::Value>, HandlerError>
where
    B: KvBucketValue,
    B::Codec: ValueCodec<B::Value>,
{
    let bucket = B::DECL.name;
    let cx = incoming.context();
    let revision = cx.stream_sequence();
    let key = cx
        .subject()
        .strip_prefix("$KV.")
        .and_then(|rest| rest.strip_prefix(bucket))
        .and_then(|rest| rest.strip_prefix('.'))
        .unwrap_or(cx.subject())
        .to_owned();
    let Some(operation) = KvOperation::of(cx.headers()) else {
        return Err(HandlerError::permanent(format!(
            "key-value bucket `{bucket}`: key `{key}` at revision {revision} has an unknown \
             `KV-Operation` header; the watch passes over it (was it written by a key-value client?)"
        )));
    };
    let value = match operation {
        KvOperation::Put => Some(<B::Codec>::decode(incoming.payload().clone()).map_err(|e| {
            HandlerError::permanent(format!(
                "key-value bucket `{bucket}`: the value of key `{key}` at revision {revision} does \
                 not decode as `{}` ({}): {e}; the watch passes over it (fix the writer, or \
                 declare the bucket's `value` and `codec` as the type and codec written)",
                std::any::type_name::<B::Value>(),
                <B::Codec as ValueCodec<B::Value>>::CONTENT_TYPE
            ))
        })?),
        KvOperation::Delete | KvOperation::Purge => None,
    };
    Ok(KvEntry {
        key,
        value,
        revision,
        operation,
        created: cx.published(),
        delta: cx.pending(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations() {
        let mut headers = async_nats::HeaderMap::new();
        assert_eq!(KvOperation::of(None), Some(KvOperation::Put));
        assert_eq!(KvOperation::of(Some(&headers)), Some(KvOperation::Put));
        headers.insert(KV_OPERATION, "DEL");
        assert_eq!(KvOperation::of(Some(&headers)), Some(KvOperation::Delete));
        headers.insert(KV_OPERATION, "PURGE");
        assert_eq!(KvOperation::of(Some(&headers)), Some(KvOperation::Purge));
        headers.insert(KV_OPERATION, "ZAP");
        assert_eq!(KvOperation::of(Some(&headers)), None);
        let mut marker = async_nats::HeaderMap::new();
        marker.insert(MARKER_REASON, "MaxAge");
        assert_eq!(KvOperation::of(Some(&marker)), Some(KvOperation::Purge));
    }
}
