//! [`Kv`]: the typed handle on a declared key-value bucket.

use std::marker::PhantomData;
use std::sync::Arc;

use async_nats::jetstream::{self, kv};
use bytes::Bytes;
use futures::TryStreamExt;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::OnceCell;

use super::error::{KvError, KvErrorKind};
use super::{JetStreamSource, KvOperation};
use crate::codec::{Codec, CodecError, Decode, Encode, Json};
use topology_core::bucket::BucketDecl;

type EncodeFn<T> = fn(&T) -> Result<Bytes, CodecError>;
type DecodeFn<T> = fn(Bytes) -> Result<T, CodecError>;

/// The typed handle on a key-value bucket: values of type `T`, JSON-encoded (another codec with
/// [`Kv::encoded`]; raw bytes for `Kv<Bytes>`), on async-nats' `jetstream::kv::Store`.
/// `#[kv_bucket(.., value = Status)]` generates `MemberStatus::kv(&runtime) -> Kv<Status>`
/// (`codec = "msgpack"` there: `Kv::encoded(.., MsgPack)`); without `value`, `Kv<Bytes>`.
///
/// A key-value value has no headers, so no `Content-Type`: every writer of a bucket writes
/// its one codec, and a value in another is a decode error naming the key and the codec.
///
/// Cheap to clone; the bucket is opened (one stream read) at the first operation, and kept.
/// Every error names the bucket and the key; a compare-and-swap that lost is
/// [`KvErrorKind::Conflict`].
///
/// ```no_run
/// use nats_topology::model::BucketDecl;
/// use nats_topology::bucket::Kv;
///
/// # async fn f(runtime: nats_topology::Runtime) -> Result<(), nats_topology::bucket::KvError> {
/// static LEASES: BucketDecl = BucketDecl::kv("LEASES").history(1);
/// let leases: Kv<String> = Kv::json(&runtime, LEASES);
/// let revision = leases.create("shard-1", &"instance-a".to_owned()).await?;
/// leases.update("shard-1", &"instance-b".to_owned(), revision).await?;
/// assert_eq!(leases.get("shard-1").await?.as_deref(), Some("instance-b"));
/// # Ok(())
/// # }
/// ```
pub struct Kv<T> {
    js: jetstream::Context,
    decl: BucketDecl,
    store: Arc<OnceCell<kv::Store>>,
    encode: EncodeFn<T>,
    decode: DecodeFn<T>,
    _value: PhantomData<fn() -> T>,
}

impl<T> Clone for Kv<T> {
    fn clone(&self) -> Self {
        Kv {
            js: self.js.clone(),
            decl: self.decl,
            store: self.store.clone(),
            encode: self.encode,
            decode: self.decode,
            _value: PhantomData,
        }
    }
}

impl<T> std::fmt::Debug for Kv<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kv")
            .field("bucket", &self.decl.name)
            .finish_non_exhaustive()
    }
}

/// One revision of a key: what [`Kv::entry`] reads, and the change a `#[kv_watch]` handler
/// receives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvEntry<T> {
    /// The key.
    pub key: String,
    /// The value; `None` for a delete or a purge.
    pub value: Option<T>,
    /// Its revision (the stream sequence that wrote it): what [`Kv::update`] expects to
    /// replace.
    pub revision: u64,
    /// What the revision did: a put, a delete or a purge.
    pub operation: KvOperation,
    /// When it was written, by the server's clock (`None` if unknown).
    pub created: Option<std::time::SystemTime>,
    /// How many later changes of the watched keys there were when this one was delivered (0
    /// for the latest; always 0 from [`Kv::entry`]).
    pub delta: u64,
}

impl<T: Serialize + DeserializeOwned> Kv<T> {
    /// A handle on `decl`'s bucket whose values are JSON.
    pub fn json(source: impl JetStreamSource, decl: BucketDecl) -> Self {
        Kv::encoded(source, decl, Json)
    }
}

impl<T> Kv<T> {
    /// A handle on `decl`'s bucket whose values `codec` writes and reads: [`Json`],
    /// `MsgPack`, `Cbor` or `Protobuf` (features `msgpack`, `cbor`, `protobuf`).
    ///
    /// ```no_run
    /// use nats_topology::bucket::Kv;
    /// use nats_topology::codec::Json;
    /// use nats_topology::model::BucketDecl;
    ///
    /// # async fn f(runtime: nats_topology::Runtime) -> Result<(), nats_topology::bucket::KvError> {
    /// static LEASES: BucketDecl = BucketDecl::kv("LEASES").history(1);
    /// let leases: Kv<String> = Kv::encoded(&runtime, LEASES, Json);
    /// leases.put("shard-1", &"instance-a".to_owned()).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn encoded<C>(source: impl JetStreamSource, decl: BucketDecl, codec: C) -> Self
    where
        C: Encode<T> + Decode<T>,
    {
        let _ = codec;
        Kv::with_codec(
            source,
            decl,
            |value| C::encode(value).map_err(named::<C>),
            |bytes| C::decode(&bytes).map_err(named::<C>),
        )
    }
}

/// `error` naming the codec: a value another writer wrote in another codec says so.
fn named<C: Codec>(error: CodecError) -> CodecError {
    format!("{}: {error}", C::ID.content_type()).into()
}

impl Kv<Bytes> {
    /// A handle on `decl`'s bucket whose values are raw bytes.
    pub fn raw(source: impl JetStreamSource, decl: BucketDecl) -> Self {
        Kv::with_codec(source, decl, |v| Ok(v.clone()), Ok)
    }
}

impl<T> Kv<T> {
    fn with_codec(
        source: impl JetStreamSource,
        decl: BucketDecl,
        encode: EncodeFn<T>,
        decode: DecodeFn<T>,
    ) -> Self {
        Kv {
            js: source.jetstream_context(),
            decl,
            store: Arc::default(),
            encode,
            decode,
            _value: PhantomData,
        }
    }

    /// The bucket's name.
    pub fn bucket(&self) -> &'static str {
        self.decl.name
    }

    fn error(&self, kind: KvErrorKind, key: Option<&str>) -> KvError {
        KvError::new(kind, self.decl.name, key)
    }

    async fn store(&self) -> Result<&kv::Store, KvError> {
        self.store
            .get_or_try_init(|| async {
                self.js
                    .get_key_value(self.decl.name)
                    .await
                    .map_err(|e| self.error(KvErrorKind::Open, None).source(e))
            })
            .await
    }

    fn encode(&self, key: &str, value: &T) -> Result<Bytes, KvError> {
        (self.encode)(value).map_err(|e| self.error(KvErrorKind::Encode, Some(key)).source(e))
    }

    fn decode(&self, key: &str, bytes: Bytes) -> Result<T, KvError> {
        (self.decode)(bytes).map_err(|e| self.error(KvErrorKind::Decode, Some(key)).source(e))
    }

    /// The key's current value; `None` if it has none (never set, deleted or purged).
    pub async fn get(&self, key: &str) -> Result<Option<T>, KvError> {
        Ok(self.entry(key).await?.and_then(|entry| entry.value))
    }

    /// The key's current value with its revision; `None` if it has none.
    pub async fn entry(&self, key: &str) -> Result<Option<KvEntry<T>>, KvError> {
        let found = self.store().await?.entry(key).await.map_err(|e| {
            let kind = match e.kind() {
                kv::EntryErrorKind::InvalidKey => KvErrorKind::InvalidKey,
                _ => KvErrorKind::Request,
            };
            self.error(kind, Some(key)).source(e)
        })?;
        match found {
            Some(entry) if entry.operation == kv::Operation::Put => Ok(Some(KvEntry {
                value: Some(self.decode(key, entry.value)?),
                key: entry.key,
                revision: entry.revision,
                operation: KvOperation::Put,
                created: crate::handler::system_time(entry.created.unix_timestamp_nanos()),
                delta: 0,
            })),
            _ => Ok(None),
        }
    }

    /// Sets the key's value, whatever it was; returns the new revision.
    pub async fn put(&self, key: &str, value: &T) -> Result<u64, KvError> {
        let bytes = self.encode(key, value)?;
        self.store().await?.put(key, bytes).await.map_err(|e| {
            let kind = match e.kind() {
                kv::PutErrorKind::InvalidKey => KvErrorKind::InvalidKey,
                _ => KvErrorKind::Request,
            };
            self.error(kind, Some(key)).source(e)
        })
    }

    /// Sets the key's value only if it has none ([`KvErrorKind::AlreadyExists`] otherwise);
    /// returns the new revision.
    pub async fn create(&self, key: &str, value: &T) -> Result<u64, KvError> {
        let bytes = self.encode(key, value)?;
        self.store().await?.create(key, bytes).await.map_err(|e| {
            let kind = match e.kind() {
                kv::CreateErrorKind::AlreadyExists => KvErrorKind::AlreadyExists,
                kv::CreateErrorKind::InvalidKey => KvErrorKind::InvalidKey,
                _ => KvErrorKind::Request,
            };
            self.error(kind, Some(key)).source(e)
        })
    }

    /// Compare-and-swap: sets the key's value only if its last revision is `revision`;
    /// returns the new revision. Another writer first: [`KvErrorKind::Conflict`].
    pub async fn update(&self, key: &str, value: &T, revision: u64) -> Result<u64, KvError> {
        let bytes = self.encode(key, value)?;
        let store = self.store().await?;
        store.update(key, bytes, revision).await.map_err(|e| {
            let kind = match e.kind() {
                kv::UpdateErrorKind::WrongLastRevision => KvErrorKind::Conflict {
                    expected_revision: revision,
                },
                kv::UpdateErrorKind::InvalidKey => KvErrorKind::InvalidKey,
                _ => KvErrorKind::Request,
            };
            self.error(kind, Some(key)).source(e)
        })
    }

    /// Deletes the key's value (a delete marker; the history is kept).
    pub async fn delete(&self, key: &str) -> Result<(), KvError> {
        self.store().await?.delete(key).await.map_err(|e| {
            let kind = match e.kind() {
                kv::DeleteErrorKind::InvalidKey => KvErrorKind::InvalidKey,
                _ => KvErrorKind::Request,
            };
            self.error(kind, Some(key)).source(e)
        })
    }

    /// Deletes the key's value and its history (a purge marker, a roll-up).
    pub async fn purge(&self, key: &str) -> Result<(), KvError> {
        self.store().await?.purge(key).await.map_err(|e| {
            let kind = match e.kind() {
                kv::PurgeErrorKind::InvalidKey => KvErrorKind::InvalidKey,
                _ => KvErrorKind::Request,
            };
            self.error(kind, Some(key)).source(e)
        })
    }

    /// The keys that have a value, in no particular order.
    pub async fn keys(&self) -> Result<Vec<String>, KvError> {
        let failed = |e| self.error(KvErrorKind::Request, None).source(e);
        let keys = self.store().await?.keys().await.map_err(failed)?;
        keys.try_collect()
            .await
            .map_err(|e| self.error(KvErrorKind::Request, None).source(e))
    }
}
