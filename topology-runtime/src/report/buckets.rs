//! What [`inspect`](fn@super::inspect) shows of each declared key-value bucket and object store:
//! whether its stream exists, and what it holds.

use std::fmt;

use crate::provision::{ProvisionError, Provisioner, VERSION_KEY};
use crate::registry::Topology;
use topology_core::bucket::BucketKind;

/// The state of one declared key-value bucket or object store on the server.
///
/// ```
/// use nats_topology::model::BucketKind;
/// use nats_topology::report::{BucketReport, ServerBucket};
///
/// let report = BucketReport {
///     kind: BucketKind::KeyValue,
///     name: "MEMBER_STATUS".into(),
///     stream: "KV_MEMBER_STATUS".into(),
///     server: Some(ServerBucket { messages: 3, bytes: 120, history: 1, replicas: 3, version: None }),
/// };
/// assert_eq!(
///     report.to_string(),
///     "key-value bucket `MEMBER_STATUS` (stream `KV_MEMBER_STATUS`): 3 messages, 120 bytes, \
///      history 1, 3 replicas"
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BucketReport {
    /// Key-value or object.
    pub kind: BucketKind,
    /// The bucket's name.
    pub name: String,
    /// Its stream's name.
    pub stream: String,
    /// What the server holds, or `None` if the bucket does not exist.
    pub server: Option<ServerBucket>,
}

/// What the server says about a bucket's stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerBucket {
    /// Messages in the stream (values, delete markers and history; chunks and metadata for
    /// an object store).
    pub messages: u64,
    /// Bytes stored.
    pub bytes: u64,
    /// Values kept per key (`max_msgs_per_subject`).
    pub history: i64,
    /// Replicas.
    pub replicas: usize,
    /// The version stamped on it (`nats-topology.version`), if any.
    pub version: Option<String>,
}

impl fmt::Display for BucketReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} `{}` (stream `{}`): ",
            self.kind.noun(),
            self.name,
            self.stream
        )?;
        let Some(s) = &self.server else {
            return write!(f, "DOES NOT EXIST");
        };
        write!(f, "{} messages, {} bytes", s.messages, s.bytes)?;
        if self.kind == BucketKind::KeyValue {
            write!(f, ", history {}", s.history)?;
        }
        write!(f, ", {} replicas", s.replicas.max(1))?;
        if let Some(version) = &s.version {
            write!(f, ", declared by {version}")?;
        }
        Ok(())
    }
}

/// Reads every declared bucket's stream.
pub(super) async fn inspect_buckets(
    provisioner: &Provisioner,
    topology: &Topology,
) -> Result<Vec<BucketReport>, ProvisionError> {
    let mut reports = Vec::new();
    for bucket in topology.buckets() {
        let stream = format!("{}{}", bucket.kind.stream_prefix(), bucket.name);
        let server = provisioner
            .read_stream(&stream)
            .await?
            .map(|info| ServerBucket {
                messages: info.state.messages,
                bytes: info.state.bytes,
                history: info.config.max_messages_per_subject,
                replicas: info.config.num_replicas,
                version: info.config.metadata.get(VERSION_KEY).cloned(),
            });
        reports.push(BucketReport {
            kind: bucket.kind,
            name: bucket.name.to_owned(),
            stream,
            server,
        });
    }
    Ok(reports)
}
