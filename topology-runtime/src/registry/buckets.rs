//! The stream a bucket is: the name, subjects and settings every NATS client expects of a
//! key-value bucket (ADR-8, as async-nats' `create_key_value` makes it) or an object store
//! (ADR-20, as `create_object_store` makes it).

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use topology_core::bucket::{BucketDecl, BucketKind};
use topology_core::model::{BucketShape, Discard, StreamDecl};

/// What the official clients set on a key-value bucket's stream.
const KV_SHAPE: BucketShape = BucketShape {
    allow_rollup: true,
    deny_delete: true,
    allow_direct: true,
};

/// What the official clients set on an object store's stream.
const OBJECT_SHAPE: BucketShape = BucketShape {
    allow_rollup: true,
    deny_delete: false,
    allow_direct: true,
};

/// The stream of a bucket declaration: `KV_<name>` on `$KV.<name>.>`, or `OBJ_<name>` on
/// `$O.<name>.C.>` and `$O.<name>.M.>`, with the bucket's settings. An external bucket's
/// stream is external and takes no settings.
///
/// ```
/// use nats_topology::model::BucketDecl;
/// use nats_topology::bucket::stream_of;
///
/// let stream = stream_of(&BucketDecl::kv("MEMBER_STATUS").history(5));
/// assert_eq!(stream.name, "KV_MEMBER_STATUS");
/// assert_eq!(stream.subjects, ["$KV.MEMBER_STATUS.>"]);
/// assert_eq!(stream.max_msgs_per_subject, Some(5));
/// ```
pub fn stream_of(decl: &BucketDecl) -> StreamDecl {
    let (name, subjects) = names(decl.kind, decl.name);
    let mut stream = StreamDecl::new(name, subjects);
    if decl.external {
        return stream.external();
    }
    stream = stream.discard(Discard::New);
    stream = match decl.kind {
        BucketKind::KeyValue => stream
            .bucket_shape(KV_SHAPE)
            .max_msgs_per_subject(decl.history.unwrap_or(1).into()),
        BucketKind::Object => stream.bucket_shape(OBJECT_SHAPE),
    };
    stream.replicas = decl.replicas;
    stream.storage = decl.storage;
    stream.max_age = decl.ttl;
    stream.max_bytes = decl.max_bytes;
    stream.max_msg_size = decl.max_value_size;
    stream.description = decl.description;
    stream.version = decl.version;
    stream
}

type Names = (&'static str, &'static [&'static str]);

/// The stream name and subjects of a bucket, made once per bucket and kept for the program's
/// life (a declaration's strings are `'static`; there is one entry per distinct bucket).
fn names(kind: BucketKind, bucket: &'static str) -> Names {
    static NAMES: OnceLock<Mutex<HashMap<(BucketKind, &'static str), Names>>> = OnceLock::new();
    let mut names = NAMES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    *names.entry((kind, bucket)).or_insert_with(|| {
        let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
        let stream = leak(format!("{}{bucket}", kind.stream_prefix()));
        let subjects: Vec<&'static str> = match kind {
            BucketKind::KeyValue => vec![leak(format!("$KV.{bucket}.>"))],
            BucketKind::Object => vec![
                leak(format!("$O.{bucket}.C.>")),
                leak(format!("$O.{bucket}.M.>")),
            ],
        };
        (stream, Vec::leak(subjects))
    })
}

/// Whether a subject of a plain stream is one of those reserved for key-value buckets
/// (`$KV.>`) or object stores (`$O.>`).
pub(crate) fn is_reserved_subject(subject: &str) -> bool {
    matches!(subject.split('.').next(), Some("$KV" | "$O"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_store_stream() {
        let stream = stream_of(&BucketDecl::object("UPLOADS").replicas(3));
        assert_eq!(stream.name, "OBJ_UPLOADS");
        assert_eq!(stream.subjects, ["$O.UPLOADS.C.>", "$O.UPLOADS.M.>"]);
        assert_eq!(stream.discard, Some(Discard::New));
        assert_eq!(stream.replicas, Some(3));
    }

    #[test]
    fn external_bucket_stream_takes_no_settings() {
        let stream = stream_of(&BucketDecl::kv("FLAGS").external());
        assert!(stream.external);
        assert_eq!(stream.bucket_shape, None);
        assert_eq!(topology_core::rules::check_stream(&stream), Ok(()));
    }

    #[test]
    fn reserved_subjects() {
        assert!(is_reserved_subject("$KV.FLAGS.>"));
        assert!(is_reserved_subject("$O.*.C.x"));
        assert!(!is_reserved_subject(">"));
        assert!(!is_reserved_subject("orders.>"));
        assert!(!is_reserved_subject("$JS.API.>"));
    }
}
