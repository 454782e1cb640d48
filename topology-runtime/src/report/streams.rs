//! What [`inspect`](fn@super::inspect) shows of each declared stream: whether it exists, what it
//! holds, where it lives (its cluster, the leader, each replica and whether it is current),
//! and whether it takes writes.

use std::fmt;

use std::time::Duration;

use crate::health::Writes;
use crate::provision::{ProvisionError, Provisioner};
use crate::registry::Topology;

/// One declared stream on the server.
///
/// ```
/// use std::time::Duration;
/// use nats_topology::report::{Replica, ServerStream, StreamReport};
///
/// let seen = Duration::from_millis(800);
/// let mut report = StreamReport {
///     stream: "ORDERS".into(),
///     server: Some(ServerStream {
///         messages: 20,
///         cluster: Some("eu".into()),
///         leader: Some("n2".into()),
///         replicas: vec![
///             Replica { server: "n1".into(), current: true, offline: false, seen },
///             Replica { server: "n3".into(), current: false, offline: false, seen },
///         ],
///     }),
/// };
/// assert_eq!(
///     report.to_string(),
///     "stream `ORDERS`: 20 messages; cluster `eu`, leader `n2`, replicas `n1` (current), `n3` (behind)"
/// );
/// // Its leader cut off from both others: it takes no writes.
/// for replica in &mut report.server.as_mut().unwrap().replicas {
///     (replica.current, replica.seen) = (false, Duration::from_secs(14));
/// }
/// assert!(report.to_string().ends_with(
///     "; NO QUORUM: its leader `n2` reaches 1 of 3 replicas (itself included); writes wait"
/// ));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamReport {
    /// The stream's name.
    pub stream: String,
    /// What the server holds, or `None` if the stream does not exist.
    pub server: Option<ServerStream>,
}

/// Where a stream lives and what it holds, as its leader says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerStream {
    /// Messages stored.
    pub messages: u64,
    /// The cluster its replicas are in (`None` on a server outside a cluster).
    pub cluster: Option<String>,
    /// The server leading it (`None` while it has no leader).
    pub leader: Option<String>,
    /// The other replicas (the leader is not listed).
    pub replicas: Vec<Replica>,
}

/// A replica of a stream other than its leader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replica {
    /// The server holding it.
    pub server: String,
    /// Up to date with the leader.
    pub current: bool,
    /// Considered offline by the group.
    pub offline: bool,
    /// How long ago its leader last heard from it.
    pub seen: Duration,
}

impl ServerStream {
    /// Whether it takes writes: a leader that reaches a quorum of its replicas (a stream
    /// outside a cluster always does).
    pub fn writes(&self) -> Writes {
        if self.cluster.is_none() && self.replicas.is_empty() {
            return Writes::Taken;
        }
        Writes::from_cluster(
            self.leader.as_deref(),
            self.replicas.iter().map(|r| (r.current, r.offline, r.seen)),
        )
    }
}

impl fmt::Display for StreamReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "stream `{}`: ", self.stream)?;
        let Some(s) = &self.server else {
            return write!(f, "DOES NOT EXIST");
        };
        write!(f, "{} messages", s.messages)?;
        if let Some(cluster) = &s.cluster {
            write!(f, "; cluster `{cluster}`")?;
        }
        match &s.leader {
            Some(leader) => write!(f, ", leader `{leader}`")?,
            None => write!(
                f,
                ", NO LEADER (being elected, or its servers are unreachable)"
            )?,
        }
        for (i, replica) in s.replicas.iter().enumerate() {
            let state = match (replica.offline, replica.current) {
                (true, _) => "offline",
                (false, true) => "current",
                (false, false) => "behind",
            };
            let lead = if i == 0 { ", replicas " } else { ", " };
            write!(f, "{lead}`{}` ({state})", replica.server)?;
        }
        // No leader is said above; a leader without a quorum only here.
        let writes = s.writes();
        if matches!(writes, Writes::NoQuorum { .. }) {
            write!(f, "; {writes}")?;
        }
        Ok(())
    }
}

/// Reads every declared stream (buckets are reported as buckets).
pub(super) async fn inspect_streams(
    provisioner: &Provisioner,
    topology: &Topology,
) -> Result<Vec<StreamReport>, ProvisionError> {
    let mut reports = Vec::new();
    for decl in topology.streams() {
        if topology.bucket_of_stream(decl.name).is_some() {
            continue;
        }
        let server = provisioner.read_stream(decl.name).await?.map(|info| {
            let cluster = info.cluster.unwrap_or_default();
            ServerStream {
                messages: info.state.messages,
                cluster: cluster.name,
                leader: cluster.leader,
                replicas: cluster
                    .replicas
                    .into_iter()
                    .map(|peer| Replica {
                        server: peer.name,
                        current: peer.current,
                        offline: peer.offline,
                        seen: peer.active,
                    })
                    .collect(),
            }
        });
        reports.push(StreamReport {
            stream: decl.name.to_owned(),
            server,
        });
    }
    Ok(reports)
}
