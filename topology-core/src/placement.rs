//! Where a stream lives: on disk or in memory ([`Storage`]), and on which servers
//! ([`Placement`], a cluster and/or server tags).

/// Where a stream keeps its messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Storage {
    /// On disk; survives a server restart (the server default).
    File,
    /// In memory; lost when the server restarts.
    Memory,
}

/// Where a stream's replicas live: in the cluster named `cluster` (of a supercluster), on
/// servers carrying every one of `tags` (their `server_tags`), or both.
///
/// ```
/// use topology_core::model::{Placement, StreamDecl};
///
/// const NEAR_USERS: StreamDecl = StreamDecl::new("ORDERS", &["orders.>"])
///     .replicas(3)
///     .placement(Placement::cluster("eu-west").tags(&["ssd"]));
/// assert_eq!(NEAR_USERS.placement.unwrap().cluster, Some("eu-west"));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Placement {
    /// The cluster's name.
    pub cluster: Option<&'static str>,
    /// Server tags every replica's server must carry.
    pub tags: &'static [&'static str],
}

impl Placement {
    /// In the cluster named `cluster`.
    pub const fn cluster(cluster: &'static str) -> Self {
        Placement {
            cluster: Some(cluster),
            tags: &[],
        }
    }
    /// On servers carrying every one of `tags`, in whichever cluster has them.
    pub const fn tagged(tags: &'static [&'static str]) -> Self {
        Placement {
            cluster: None,
            tags,
        }
    }
    /// Also on servers carrying every one of `tags`.
    pub const fn tags(mut self, tags: &'static [&'static str]) -> Self {
        self.tags = tags;
        self
    }
}
