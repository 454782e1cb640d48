//! Key-value buckets and object stores: the typed handles on them (`kv`: [`Kv`], `object`: [`ObjectStore`]), with their errors (`error`), and
//! the watches of a key-value bucket (`watch`: the [`KvEntry`] a `#[kv_watch]` handler receives).
//!
//! A declared bucket is provisioned as the stream it is, by the same CREATE-first provisioning,
//! drift rules and version stamps as a declared stream; the handles read and write it through
//! async-nats' `jetstream::kv::Store` and `jetstream::object_store::ObjectStore`.

mod error;
mod kv;
mod object;
mod watch;

use async_nats::jetstream;

pub use bytes::Bytes;

/// The stream a bucket is (the registry derives it when a bucket is declared).
pub use crate::registry::stream_of;
pub use error::{KvError, KvErrorKind, ObjectError, ObjectErrorKind};
pub use kv::{Kv, KvEntry};
pub use object::ObjectStore;
pub use watch::KvOperation;
#[doc(hidden)]
pub use watch::{
    JsonValue, KvBucketValue, KvWatchArg, RawValue, ValueCodec, decode_kv_entry,
    decode_kv_watch_arg,
};

/// Where a handle finds JetStream: a [`Runtime`](crate::Runtime), a handler's
/// [`Context`](crate::Context), an endpoint's [`RequestContext`](crate::RequestContext), or a
/// JetStream context.
pub trait JetStreamSource {
    /// The JetStream context handles use (with the runtime's domain or API prefix).
    fn jetstream_context(&self) -> jetstream::Context;
}

impl JetStreamSource for crate::handler::Context {
    fn jetstream_context(&self) -> jetstream::Context {
        self.scope.common.jetstream.clone()
    }
}

impl JetStreamSource for crate::service::RequestContext {
    fn jetstream_context(&self) -> jetstream::Context {
        self.jetstream().clone()
    }
}

impl JetStreamSource for jetstream::Context {
    fn jetstream_context(&self) -> jetstream::Context {
        self.clone()
    }
}

impl<S: JetStreamSource + ?Sized> JetStreamSource for &S {
    fn jetstream_context(&self) -> jetstream::Context {
        (**self).jetstream_context()
    }
}
