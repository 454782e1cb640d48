//! [`NatsSupercluster`]: JetStream clusters joined by gateways, each gateway connection through
//! a [`Link`] a test can stall or cut, every node tagged with its cluster.

use std::time::Duration;

use crate::binary::server_binary_async;
use crate::cluster::ClusterMonitor;
use crate::error::TestkitError;
use crate::leaf::{HUB_DOMAIN, LEAF_DOMAIN, cross_ready};
use crate::link::Link;
use crate::ports::{RefusingPort, free_ports, make_store_dir, unique_suffix};
use crate::probe::wait_ready;
use crate::process::{ClusterArgs, GatewayArgs, LeafArgs, Node, START_ATTEMPTS};

/// How long a supercluster may take to become ready.
const READY_TIMEOUT: Duration = Duration::from_secs(45);

/// Real JetStream `nats-server` clusters on loopback joined by gateways into one supercluster
/// (one JetStream meta group across all of them), for placement, mirrors and sources across
/// clusters.
///
/// Clusters are named `A`, `B`, ... in the order of the sizes given; nodes are numbered across
/// the whole supercluster (`node0`.. in cluster `A`, then `B`'s), and each node carries the
/// server tags `cluster:<name>` (lower case, `cluster:a`) and `node:<i>`, for a stream's
/// `placement`. Every gateway connection goes through a [`Link`] (one per node, which every
/// node of the other clusters dials), and each node advertises a gateway URL nothing listens
/// on, so no gateway connection bypasses the links: [`stall_gateways`](Self::stall_gateways)
/// separates the clusters while each keeps working inside. Client connections and the routes
/// inside a cluster are direct.
///
/// Dropping it kills every node by pid, reaps them and removes their store directories.
///
/// ```no_run
/// use nats_topology_testkit::NatsSupercluster;
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// // Cluster A of three nodes (R3 streams), cluster B of one.
/// let sc = NatsSupercluster::start(&[3, 1]).await?;
/// let in_a = async_nats::connect(sc.server_addrs(0)).await?;
/// let js = async_nats::jetstream::new(in_a);
/// js.create_stream(async_nats::jetstream::stream::Config {
///     name: "IN_B".into(),
///     subjects: vec!["in.b.>".into()],
///     placement: Some(async_nats::jetstream::stream::Placement {
///         cluster: Some("B".into()),
///         tags: vec![],
///     }),
///     ..Default::default()
/// })
/// .await?;
/// # Ok(())
/// # }
/// ```
pub struct NatsSupercluster {
    nodes: Vec<Node>,
    /// The cluster of each node (an index into `names`).
    cluster_of: Vec<usize>,
    names: Vec<String>,
    /// `gateways[i]`: the link to node `i`'s gateway port.
    gateways: Vec<Link>,
    /// The refusing ports the nodes advertise as their gateway URLs, held while they run.
    _advertised: Vec<RefusingPort>,
    /// A leaf node (JetStream domain [`LEAF_DOMAIN`]) connected to the first node, whose
    /// whole supercluster is then the JetStream domain [`HUB_DOMAIN`]: the edge site of
    /// [`NatsLeafTopology`](crate::NatsLeafTopology), hanging off the supercluster.
    leaf: Option<Node>,
}

impl NatsSupercluster {
    /// Starts one cluster per entry of `sizes` (each 1 to 5 nodes; at least two clusters) and
    /// waits (up to 45 s) until every node answers `$JS.API.INFO` and the JetStream meta group
    /// has formed with every node of every cluster current.
    pub async fn start(sizes: &[usize]) -> Result<NatsSupercluster, TestkitError> {
        Self::start_inner(sizes, false).await
    }

    /// As [`start`](Self::start), with a leaf node hanging off the first node, as an edge site
    /// hangs off a cloud: the supercluster is the JetStream domain [`HUB_DOMAIN`], the leaf
    /// node the domain [`LEAF_DOMAIN`] (as in [`NatsLeafTopology`](crate::NatsLeafTopology)),
    /// and the leaf node's clients reach the supercluster's JetStream under `$JS.hub.API`. Also
    /// waits until each side answers the other's `$JS.<domain>.API.INFO`.
    pub async fn start_with_leaf(sizes: &[usize]) -> Result<NatsSupercluster, TestkitError> {
        Self::start_inner(sizes, true).await
    }

    async fn start_inner(sizes: &[usize], leaf: bool) -> Result<NatsSupercluster, TestkitError> {
        assert!(
            sizes.len() >= 2 && sizes.iter().all(|n| (1..=5).contains(n)),
            "a supercluster of at least two clusters of 1 to 5 nodes each, not {sizes:?}"
        );
        let mut attempt = 1;
        loop {
            let mut started = Self::configure(sizes, leaf).await?;
            match started.launch().await {
                Ok(()) => return Ok(started),
                Err(_)
                    if attempt < START_ATTEMPTS
                        && (started.nodes.iter_mut().any(Node::lost_port_race)
                            || started.leaf.as_mut().is_some_and(Node::lost_port_race)) =>
                {
                    // Dropping it kills the nodes and removes their directories; new ports.
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn configure(sizes: &[usize], leaf: bool) -> Result<NatsSupercluster, TestkitError> {
        let binary = server_binary_async().await?;
        let total: usize = sizes.iter().sum();
        // With a leaf node: the first node's leaf node port, and the leaf node's client port.
        let ports = free_ports(4 * total + 2 * usize::from(leaf))?;
        let (ports, leaf_ports) = ports.split_at(4 * total);
        let (client_ports, rest) = ports.split_at(total);
        let (cluster_ports, rest) = rest.split_at(total);
        let (monitor_ports, gateway_ports) = rest.split_at(total);
        let names: Vec<String> = (0..sizes.len())
            .map(|c| char::from(b'A' + c as u8).to_string())
            .collect();
        let cluster_of: Vec<usize> = sizes
            .iter()
            .enumerate()
            .flat_map(|(c, &n)| std::iter::repeat_n(c, n))
            .collect();
        let mut gateways = Vec::with_capacity(total);
        for &port in gateway_ports {
            gateways.push(Link::start(port).await?);
        }
        let advertised = (0..total)
            .map(|_| RefusingPort::bind())
            .collect::<Result<Vec<_>, _>>()?;
        let suffix = unique_suffix();
        let mut nodes = Vec::with_capacity(total);
        for i in 0..total {
            let own = cluster_of[i];
            let dir = make_store_dir(&format!("node{i}"))?;
            let mut node = Node::new(binary.clone(), format!("node{i}"), dir);
            node.port = client_ports[i];
            node.cluster = Some(ClusterArgs {
                cluster_port: cluster_ports[i],
                monitor_port: monitor_ports[i],
                // A cluster of one routes to itself: the server refuses JetStream in a
                // cluster without configured routes, and ignores a route to itself.
                route_ports: (0..total)
                    .filter(|&j| cluster_of[j] == own && (j != i || sizes[own] == 1))
                    .map(|j| cluster_ports[j])
                    .collect(),
                // The gateway's name is the cluster's: the server requires them to match.
                cluster_name: names[own].clone(),
                advertise: None,
            });
            node.gateway = Some(GatewayArgs {
                name: names[own].clone(),
                listen_port: gateway_ports[i],
                advertise_port: advertised[i].port,
                remotes: (0..names.len())
                    .filter(|&c| c != own)
                    .map(|c| {
                        let through = (0..total)
                            .filter(|&j| cluster_of[j] == c)
                            .map(|j| gateways[j].port())
                            .collect();
                        (names[c].clone(), through)
                    })
                    .collect(),
                tags: vec![
                    format!("cluster:{}", names[own].to_lowercase()),
                    format!("node:{i}"),
                    format!("testkit:{suffix}"),
                ],
            });
            if leaf {
                // The whole supercluster is one domain; the first node accepts the leaf node.
                node.leaf = Some(LeafArgs {
                    domain: HUB_DOMAIN.to_owned(),
                    listen_port: (i == 0).then_some(leaf_ports[0]),
                    remote_port: None,
                    system_account: true,
                });
            }
            nodes.push(node);
        }
        let leaf = match leaf {
            false => None,
            true => {
                let mut node = Node::new(
                    binary.clone(),
                    format!("leaf-{suffix}"),
                    make_store_dir("leaf")?,
                );
                node.port = leaf_ports[1];
                node.leaf = Some(LeafArgs {
                    domain: LEAF_DOMAIN.to_owned(),
                    listen_port: None,
                    remote_port: Some(leaf_ports[0]),
                    system_account: false,
                });
                Some(node)
            }
        };
        Ok(NatsSupercluster {
            nodes,
            cluster_of,
            names,
            gateways,
            _advertised: advertised,
            leaf,
        })
    }

    async fn launch(&mut self) -> Result<(), TestkitError> {
        let deadline = tokio::time::Instant::now() + READY_TIMEOUT;
        for node in self.nodes.iter_mut() {
            node.spawn()?;
        }
        wait_ready(&mut self.nodes, READY_TIMEOUT).await?;
        let monitor = self.monitor();
        loop {
            let last = match monitor.meta_group().await {
                Ok(()) => return self.launch_leaf(deadline).await,
                Err(detail) => detail,
            };
            if tokio::time::Instant::now() >= deadline {
                return Err(self.nodes[0].not_ready(
                    READY_TIMEOUT,
                    format!(
                        "the meta group has not formed with all {} nodes of clusters {:?}: \
                         {last}",
                        self.nodes.len(),
                        self.names
                    ),
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Starts the leaf node, if any, once the supercluster is up, and waits until each side
    /// reaches the other's JetStream.
    async fn launch_leaf(&mut self, deadline: tokio::time::Instant) -> Result<(), TestkitError> {
        let Some(leaf) = self.leaf.as_mut() else {
            return Ok(());
        };
        leaf.spawn()?;
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        wait_ready(std::slice::from_mut(leaf), left).await?;
        cross_ready(leaf, HUB_DOMAIN, deadline).await?;
        cross_ready(&mut self.nodes[0], LEAF_DOMAIN, deadline).await
    }

    /// The leaf node's client URL (see [`start_with_leaf`](Self::start_with_leaf)). Panics if
    /// it was started without one.
    pub fn leaf_url(&self) -> String {
        self.leaf
            .as_ref()
            .expect("a supercluster started with `start_with_leaf`")
            .url()
    }

    /// The clusters' names (`A`, `B`, ...), in order.
    pub fn clusters(&self) -> &[String] {
        &self.names
    }

    /// The nodes of cluster `c` (indices across the supercluster). Panics if `c` is not a
    /// cluster.
    pub fn nodes_of(&self, c: usize) -> Vec<usize> {
        assert!(c < self.names.len(), "no cluster {c}");
        (0..self.nodes.len())
            .filter(|&i| self.cluster_of[i] == c)
            .collect()
    }

    /// The client URL of node `i`. Panics if `i` is not a node.
    pub fn url(&self, i: usize) -> String {
        self.nodes[i].url()
    }

    /// The client addresses of cluster `c`'s nodes, to connect to that cluster.
    pub fn server_addrs(&self, c: usize) -> Vec<async_nats::ServerAddr> {
        self.nodes_of(c)
            .into_iter()
            .map(|i| self.url(i).parse().expect("a loopback URL"))
            .collect()
    }

    /// The monitoring endpoints of every node (`/jsz`, the meta leader).
    pub fn monitor(&self) -> ClusterMonitor {
        ClusterMonitor::new(
            self.nodes
                .iter()
                .map(|n| n.cluster.as_ref().expect("cluster arguments").monitor_port)
                .collect(),
        )
    }

    /// The link every node of the other clusters dials to reach node `i`'s gateway.
    pub fn gateway_link(&self, i: usize) -> &Link {
        &self.gateways[i]
    }

    /// Stalls every gateway connection (both ways): the clusters no longer hear from each
    /// other, while each still works inside and answers its clients.
    pub fn stall_gateways(&self) {
        for link in &self.gateways {
            link.stall();
        }
    }

    /// Ends every fault on the gateway links.
    pub fn heal(&self) {
        for link in &self.gateways {
            link.heal();
        }
    }

    /// The pid of node `i` while it runs.
    pub fn pid(&self, i: usize) -> Option<u32> {
        self.nodes[i].pid()
    }

    /// Kills node `i` (SIGKILL by pid) and reaps it.
    pub fn kill(&mut self, i: usize) {
        self.nodes[i].kill();
    }

    /// The number of nodes across all clusters.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Always false: a supercluster has nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }
}

impl std::fmt::Debug for NatsSupercluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let nodes: Vec<_> = self
            .nodes
            .iter()
            .zip(&self.cluster_of)
            .map(|(n, &c)| (self.names[c].as_str(), n.url(), n.pid()))
            .collect();
        f.debug_struct("NatsSupercluster")
            .field("nodes", &nodes)
            .finish()
    }
}
