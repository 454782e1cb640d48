//! [`ObjectStore`]: the handle on a declared object store.

use std::sync::Arc;

use async_nats::jetstream::{self, object_store};
use futures::TryStreamExt;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::OnceCell;

use super::JetStreamSource;
use super::error::{ObjectError, ObjectErrorKind};
use topology_core::bucket::BucketDecl;

pub use async_nats::jetstream::object_store::{Object, ObjectInfo};

/// The handle on an object store, on async-nats' `jetstream::object_store::ObjectStore`:
/// objects put and read as bytes or streamed, in chunks. `#[object_store]` generates
/// `Uploads::store(&runtime) -> ObjectStore`.
///
/// Cheap to clone; the store is opened (one stream read) at the first operation, and kept.
///
/// ```no_run
/// use nats_topology::model::BucketDecl;
/// use nats_topology::bucket::ObjectStore;
///
/// # async fn f(runtime: nats_topology::Runtime) -> Result<(), nats_topology::bucket::ObjectError> {
/// static UPLOADS: BucketDecl = BucketDecl::object("UPLOADS").replicas(3);
/// let uploads = ObjectStore::new(&runtime, UPLOADS);
/// uploads.put_bytes("avatar.png", b"\x89PNG...").await?;
/// let bytes = uploads.get_bytes("avatar.png").await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct ObjectStore {
    js: jetstream::Context,
    decl: BucketDecl,
    store: Arc<OnceCell<object_store::ObjectStore>>,
}

impl std::fmt::Debug for ObjectStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectStore")
            .field("bucket", &self.decl.name)
            .finish_non_exhaustive()
    }
}

impl ObjectStore {
    /// A handle on `decl`'s object store.
    pub fn new(source: impl JetStreamSource, decl: BucketDecl) -> Self {
        ObjectStore {
            js: source.jetstream_context(),
            decl,
            store: Arc::default(),
        }
    }

    /// The store's name.
    pub fn bucket(&self) -> &'static str {
        self.decl.name
    }

    fn error(&self, kind: ObjectErrorKind, object: Option<&str>) -> ObjectError {
        ObjectError::new(kind, self.decl.name, object)
    }

    async fn store(&self) -> Result<&object_store::ObjectStore, ObjectError> {
        self.store
            .get_or_try_init(|| async {
                self.js
                    .get_object_store(self.decl.name)
                    .await
                    .map_err(|e| self.error(ObjectErrorKind::Open, None).source(e))
            })
            .await
    }

    /// Puts an object read from `data`, in chunks, replacing any of the same name.
    pub async fn put(
        &self,
        name: &str,
        data: &mut (impl AsyncRead + Unpin),
    ) -> Result<ObjectInfo, ObjectError> {
        self.store()
            .await?
            .put(name, data)
            .await
            .map_err(|e| self.error(ObjectErrorKind::Request, Some(name)).source(e))
    }

    /// Puts an object from bytes.
    pub async fn put_bytes(&self, name: &str, bytes: &[u8]) -> Result<ObjectInfo, ObjectError> {
        let mut reader = bytes;
        self.put(name, &mut reader).await
    }

    /// The object, to read as a stream (`tokio::io::AsyncRead`); its digest is checked at
    /// the end.
    pub async fn get(&self, name: &str) -> Result<Object, ObjectError> {
        self.store().await?.get(name).await.map_err(|e| {
            let kind = match e.kind() {
                object_store::GetErrorKind::NotFound => ObjectErrorKind::NotFound,
                _ => ObjectErrorKind::Request,
            };
            self.error(kind, Some(name)).source(e)
        })
    }

    /// The whole object, read into memory.
    pub async fn get_bytes(&self, name: &str) -> Result<Vec<u8>, ObjectError> {
        let mut object = self.get(name).await?;
        let mut bytes = Vec::with_capacity(object.info().size);
        object
            .read_to_end(&mut bytes)
            .await
            .map_err(|e| self.error(ObjectErrorKind::Io, Some(name)).source(e))?;
        Ok(bytes)
    }

    /// The object's description (size, chunks, digest, ...); a deleted object is
    /// [`ObjectErrorKind::NotFound`].
    pub async fn info(&self, name: &str) -> Result<ObjectInfo, ObjectError> {
        let info = self.store().await?.info(name).await.map_err(|e| {
            let kind = match e.kind() {
                object_store::InfoErrorKind::NotFound => ObjectErrorKind::NotFound,
                _ => ObjectErrorKind::Request,
            };
            self.error(kind, Some(name)).source(e)
        })?;
        if info.deleted {
            return Err(self.error(ObjectErrorKind::NotFound, Some(name)));
        }
        Ok(info)
    }

    /// Deletes the object and its chunks.
    pub async fn delete(&self, name: &str) -> Result<(), ObjectError> {
        self.store().await?.delete(name).await.map_err(|e| {
            let kind = match e.kind() {
                object_store::DeleteErrorKind::NotFound => ObjectErrorKind::NotFound,
                _ => ObjectErrorKind::Request,
            };
            self.error(kind, Some(name)).source(e)
        })
    }

    /// The objects in the store (deleted ones left out).
    pub async fn list(&self) -> Result<Vec<ObjectInfo>, ObjectError> {
        let failed = |e| self.error(ObjectErrorKind::Request, None).source(e);
        let list = self.store().await?.list().await.map_err(failed)?;
        list.try_collect()
            .await
            .map_err(|e| self.error(ObjectErrorKind::Request, None).source(e))
    }
}
