//! Key-value buckets and object stores: each one's rules, a name declared twice differently,
//! and plain streams that reach into the subjects reserved for buckets.

use super::{Problems, stream_at};
use crate::registry::Topology;
use crate::registry::is_reserved_subject;
use topology_core::bucket::{self, BucketDecl};

pub(super) fn bucket_at(decl: &BucketDecl) -> String {
    format!("{} `{}`", decl.kind.noun(), decl.name)
}

pub(super) fn check(topology: &Topology, problems: &mut Problems) {
    let buckets = topology.buckets();
    for (i, decl) in buckets.iter().enumerate() {
        if let Err(e) = bucket::check_bucket(decl) {
            problems.push(bucket_at(decl), e.message());
        }
        // Sorted by name and kind: a name declared twice differently is adjacent.
        if i > 0 && buckets[i - 1].name == decl.name && buckets[i - 1].kind == decl.kind {
            problems.push(
                bucket_at(decl),
                "declared twice with different settings; keep one declaration and use its \
                 type everywhere",
            );
        }
    }
    for stream in topology.streams() {
        if topology.bucket_of_stream(stream.name).is_some() {
            continue;
        }
        if let Some(subject) = stream.subjects.iter().find(|s| is_reserved_subject(s)) {
            problems.push(
                stream_at(stream.name),
                format!(
                    "subject `{subject}` is reserved for key-value buckets (`$KV.<bucket>.>`) and \
                     object stores (`$O.<bucket>.>`); declare the bucket with `#[kv_bucket]` or \
                     `#[object_store]` instead of a stream on its subjects"
                ),
            );
        }
    }
}
