//! [`NatsCluster`]: three JetStream nodes forming one cluster, for R3 streams and for killing a
//! node.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::binary::server_binary_async;
use crate::builder::Setup;
use crate::error::TestkitError;
use crate::link::Link;
use crate::ports::{RefusingPort, free_ports, make_store_dir, unique_suffix};
use crate::probe::wait_ready;
use crate::process::{ClusterArgs, Node, START_ATTEMPTS, url_for};
use crate::tls::{Certificates, TlsFiles};

/// How long a cluster (or a restarted cluster node) may take to become ready.
const CLUSTER_READY_TIMEOUT: Duration = Duration::from_secs(30);

/// The number of nodes in a [`NatsCluster`].
const CLUSTER_SIZE: usize = 3;

/// How long a fresh cluster's meta group may take to form with every node before the cluster
/// is started again (twice at most; the last attempt waits the whole
/// [`CLUSTER_READY_TIMEOUT`]). It forms within a second when it forms at all.
const FORMATION_WAIT: Duration = Duration::from_secs(10);

/// How many times a fresh cluster is started when its meta group does not form.
const FORMATION_ATTEMPTS: usize = 3;

/// Why a cluster did not start.
enum Launch {
    /// A node did not start or become ready (maybe a lost port race).
    Failed(TestkitError),
    /// The nodes run, but the meta group has not formed with all of them.
    Unformed(TestkitError),
}

/// Three real JetStream `nats-server` nodes on loopback forming one cluster, each with free
/// client and cluster ports and its own store directory.
///
/// Connect with [`server_addrs`](Self::server_addrs): a comma-separated URL string is not a
/// server list in async-nats. Dropping the cluster kills every node by pid, reaps them and
/// removes their store directories.
pub struct NatsCluster {
    nodes: Vec<Node>,
    /// The links every route and client connection goes through, for a cluster started with
    /// [`start_linked`](NatsCluster::start_linked).
    net: Option<Network>,
}

/// The links of a cluster started with [`NatsCluster::start_linked`].
struct Network {
    /// `routes[i][j]`: the link node `i` dials to reach node `j` (`None` for `i == j`).
    routes: Vec<Vec<Option<Link>>>,
    /// One link per node behind [`NatsCluster::urls`].
    clients: Vec<Link>,
    /// The links [`NatsCluster::client_link`] handed out, healed with the rest.
    handed_out: std::sync::Mutex<Vec<Link>>,
    /// The refusing ports the nodes advertise as their route URLs, held while they run.
    _advertised: Vec<RefusingPort>,
}

impl NatsCluster {
    /// Starts three nodes (`node0`, `node1`, `node2`, with a cluster name unique to this
    /// cluster) and waits (up to 30 s) until `$JS.API.INFO` answers successfully on every node
    /// and the meta group has formed with all three nodes (its leader counts three peers,
    /// each current), so that any one node may be killed or cut off from then on.
    ///
    /// A fresh cluster may still time out the first replicated stream create: retry it with
    /// [`eventually`](crate::eventually).
    ///
    /// For users and permissions, accounts or TLS, start it with [`NatsCluster::builder`].
    pub async fn start() -> Result<NatsCluster, TestkitError> {
        Self::start_setup(Arc::default(), false).await
    }

    /// Starts three nodes as [`start`](NatsCluster::start) does, but with every connection
    /// through a [`Link`] a test can stall, slow down or cut: each route (one link per ordered
    /// pair of nodes, the one the first node dials) and each client connection
    /// ([`urls`](Self::urls) and [`server_addrs`](Self::server_addrs) give one shared link per
    /// node; [`client_link`](Self::client_link) gives a client a link of its own). No traffic
    /// bypasses the links: the nodes advertise a route URL nothing listens on, so a route
    /// gossiped from one server to another is refused and only the configured routes (through
    /// the links) exist, and they advertise no client URLs to clients (`no_advertise`), so a
    /// client reconnects only to the URLs it was given.
    ///
    /// [`isolate`](Self::isolate) cuts a node off from the two others (a partition: its
    /// clients still reach it), [`heal`](Self::heal) ends every fault.
    pub async fn start_linked() -> Result<NatsCluster, TestkitError> {
        Self::start_setup(Arc::default(), true).await
    }

    pub(crate) async fn start_setup(
        setup: Arc<Setup>,
        linked: bool,
    ) -> Result<NatsCluster, TestkitError> {
        let binary = server_binary_async().await?;
        // One CA for the whole cluster, so that one client configuration fits every node.
        let certificates = setup.tls.map(|_| Certificates::generate()).transpose()?;
        let mut attempt = 1;
        let mut formations = 1;
        loop {
            let (mut nodes, net) =
                Self::configure(&binary, linked, &setup, certificates.as_ref()).await?;
            let patient = formations >= FORMATION_ATTEMPTS;
            match Self::launch(&mut nodes, patient).await {
                Ok(()) => return Ok(NatsCluster { nodes, net }),
                Err(Launch::Failed(_))
                    if attempt < START_ATTEMPTS && nodes.iter_mut().any(Node::lost_port_race) =>
                {
                    // Dropping `nodes` kills them and removes their directories; try new ports.
                    attempt += 1;
                }
                Err(Launch::Unformed(detail)) if !patient => {
                    // nats-server 2.10 now and then forms the meta group of a fresh cluster
                    // with two nodes and never adds the third (its `cluster_size` stays 2, or
                    // the third answers "JetStream system temporarily unavailable" for good;
                    // seen in about 1 start in 20 with three clusters starting at once). A
                    // fresh cluster again forms whole.
                    eprintln!(
                        "testkit: a fresh cluster's meta group did not form with all \
                         {CLUSTER_SIZE} nodes within {FORMATION_WAIT:?} ({detail}); starting \
                         the cluster again on new ports"
                    );
                    formations += 1;
                }
                Err(Launch::Failed(e) | Launch::Unformed(e)) => return Err(e),
            }
        }
    }

    /// The index of the node a server name names (`node1` is 1), as the server reports it as
    /// a stream's, consumer's or meta group's leader; `None` for any other name.
    ///
    /// ```
    /// use nats_topology_testkit::NatsCluster;
    /// assert_eq!(NatsCluster::node_index("node2"), Some(2));
    /// assert_eq!(NatsCluster::node_index("hub"), None);
    /// ```
    pub fn node_index(server_name: &str) -> Option<usize> {
        server_name.strip_prefix("node")?.parse().ok()
    }

    async fn configure(
        binary: &Path,
        linked: bool,
        setup: &Arc<Setup>,
        certificates: Option<&Certificates>,
    ) -> Result<(Vec<Node>, Option<Network>), TestkitError> {
        let ports = free_ports(3 * CLUSTER_SIZE)?;
        let (client_ports, rest) = ports.split_at(CLUSTER_SIZE);
        let (cluster_ports, monitor_ports) = rest.split_at(CLUSTER_SIZE);
        let net = if linked {
            let mut routes = Vec::with_capacity(CLUSTER_SIZE);
            for i in 0..CLUSTER_SIZE {
                let mut row = Vec::with_capacity(CLUSTER_SIZE);
                for (j, &port) in cluster_ports.iter().enumerate() {
                    row.push(if i == j {
                        None
                    } else {
                        Some(Link::start(port).await?)
                    });
                }
                routes.push(row);
            }
            let mut clients = Vec::with_capacity(CLUSTER_SIZE);
            for &port in client_ports {
                clients.push(Link::start(port).await?);
            }
            let advertised = (0..CLUSTER_SIZE)
                .map(|_| RefusingPort::bind())
                .collect::<Result<Vec<_>, _>>()?;
            Some(Network {
                routes,
                clients,
                handed_out: Default::default(),
                _advertised: advertised,
            })
        } else {
            None
        };
        let cluster_name = format!("testkit-{}", unique_suffix());
        let mut nodes = Vec::with_capacity(CLUSTER_SIZE);
        for i in 0..CLUSTER_SIZE {
            let dir = make_store_dir(&format!("node{i}"))?;
            let mut node = Node::new(binary.to_path_buf(), format!("node{i}"), dir);
            node.set_up(setup.clone(), certificates)?;
            node.port = client_ports[i];
            let route_ports = (0..CLUSTER_SIZE)
                .filter(|&j| j != i)
                .map(|j| match &net {
                    Some(net) => net.route(i, j).port(),
                    None => cluster_ports[j],
                })
                .collect();
            node.cluster = Some(ClusterArgs {
                cluster_port: cluster_ports[i],
                monitor_port: monitor_ports[i],
                route_ports,
                cluster_name: cluster_name.clone(),
                advertise: net.as_ref().map(|net| net._advertised[i].port),
            });
            nodes.push(node);
        }
        Ok((nodes, net))
    }

    /// Spawns the nodes and waits until they are ready and the meta group has formed: for the
    /// whole [`CLUSTER_READY_TIMEOUT`] when `patient`, else for [`FORMATION_WAIT`] (nodes that
    /// all run but have not formed the group by then are [`Launch::Unformed`], for another
    /// attempt).
    async fn launch(nodes: &mut [Node], patient: bool) -> Result<(), Launch> {
        let start = tokio::time::Instant::now();
        for node in nodes.iter_mut() {
            node.spawn().map_err(Launch::Failed)?;
        }
        let wait = if patient {
            CLUSTER_READY_TIMEOUT
        } else {
            FORMATION_WAIT
        };
        if let Err(e) = wait_ready(nodes, wait).await {
            // Every node runs, but one answers `$JS.API.INFO` with "JetStream system
            // temporarily unavailable": it has not joined the meta group.
            let exited = nodes.iter_mut().any(|n| n.exit_status().is_some());
            return Err(if patient || exited {
                Launch::Failed(e)
            } else {
                Launch::Unformed(e)
            });
        }
        Self::wait_meta_group(nodes, start + wait)
            .await
            .map_err(Launch::Unformed)
    }

    /// Waits until every node names the same meta leader and that leader counts all
    /// [`CLUSTER_SIZE`] nodes as current peers of the meta group. A meta leader answers
    /// `$JS.API.INFO` as soon as two nodes have formed the group (`cluster_size` 2), before
    /// the third has joined it; cutting one of those two off then leaves the other without a
    /// quorum, and no election follows.
    async fn wait_meta_group(
        nodes: &mut [Node],
        deadline: tokio::time::Instant,
    ) -> Result<(), TestkitError> {
        let monitor = ClusterMonitor {
            ports: nodes
                .iter()
                .map(|n| n.cluster.as_ref().expect("cluster node").monitor_port)
                .collect(),
        };
        loop {
            let last = match monitor.meta_group().await {
                Ok(()) => return Ok(()),
                Err(detail) => detail,
            };
            if tokio::time::Instant::now() >= deadline {
                return Err(nodes[0].not_ready(
                    CLUSTER_READY_TIMEOUT,
                    format!("the meta group has not formed with all {CLUSTER_SIZE} nodes: {last}"),
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The client URLs of all nodes, `nats://127.0.0.1:<port>` (`tls://` for a cluster started
    /// with TLS), in node order (behind links, each node's shared client link).
    pub fn urls(&self) -> Vec<String> {
        (0..self.len()).map(|i| self.url(i)).collect()
    }

    /// The client URL of node `i` (behind links, its shared client link). Panics if
    /// `i >= self.len()`.
    pub fn url(&self, i: usize) -> String {
        match &self.net {
            Some(net) => url_for(self.nodes[i].tls.is_some(), net.clients[i].port()),
            None => self.nodes[i].url(),
        }
    }

    /// The certificate files of a cluster started with TLS (node 0's copy; every node has the
    /// same files from one CA in its own store directory), `None` without TLS.
    ///
    /// ```no_run
    /// use nats_topology_testkit::NatsCluster;
    ///
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// let cluster = NatsCluster::builder().tls().start().await?;
    /// let tls = cluster.tls().expect("started with TLS");
    /// let client = tls.connect_options().connect(cluster.server_addrs()).await?;
    /// # drop(client);
    /// # Ok(())
    /// # }
    /// ```
    pub fn tls(&self) -> Option<&TlsFiles> {
        self.nodes[0].tls.as_ref()
    }

    /// The client port of node `i`. Panics if `i >= self.len()`.
    pub fn port(&self, i: usize) -> u16 {
        self.nodes[i].port
    }

    /// The HTTP monitoring port of node `i` (`http://127.0.0.1:<port>/jsz`, `/varz`, ...).
    /// Panics if `i >= self.len()`.
    pub fn monitor_port(&self, i: usize) -> u16 {
        self.nodes[i]
            .cluster
            .as_ref()
            .expect("cluster nodes have cluster arguments")
            .monitor_port
    }

    /// The node that is the JetStream meta leader, as the running nodes' monitoring endpoint
    /// `/jsz` reports it; `None` while they know none or disagree. See [`ClusterMonitor`].
    pub async fn meta_leader(&self) -> Option<usize> {
        self.monitor()
            .meta_leader()
            .await
            .filter(|&l| self.nodes[l].pid().is_some())
    }

    /// A handle on the nodes' monitoring endpoints that does not borrow the cluster (so that
    /// one task can watch for a new leader while another restarts a node).
    pub fn monitor(&self) -> ClusterMonitor {
        ClusterMonitor {
            ports: (0..self.len()).map(|i| self.monitor_port(i)).collect(),
        }
    }

    /// The pid of node `i` while it runs, `None` after [`kill`](Self::kill). Panics if
    /// `i >= self.len()`.
    pub fn pid(&self, i: usize) -> Option<u32> {
        self.nodes[i].pid()
    }

    /// The store directory of node `i`. Panics if `i >= self.len()`.
    pub fn store_dir(&self, i: usize) -> &Path {
        &self.nodes[i].dir
    }

    /// The number of nodes (3).
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Always false: a cluster has three nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The client addresses of all nodes, ready for `async_nats::connect(cluster.server_addrs())`.
    pub fn server_addrs(&self) -> Vec<async_nats::ServerAddr> {
        self.urls()
            .iter()
            .map(|url| {
                url.parse()
                    .expect("a nats://127.0.0.1:<port> URL is a valid ServerAddr")
            })
            .collect()
    }

    /// Kills node `i` abruptly (SIGKILL by pid) and reaps it. Panics if `i >= self.len()`.
    pub fn kill(&mut self, i: usize) {
        self.nodes[i].kill();
    }

    /// Stops node `i` gracefully, as a rolling restart of the cluster does: SIGTERM by pid
    /// (the node tells its peers it is shutting down, and they count it offline at once),
    /// then waits up to 10 s for it to exit before SIGKILL, and reaps it. Panics if
    /// `i >= self.len()`.
    pub async fn stop(&mut self, i: usize) {
        self.nodes[i].stop().await;
    }

    /// Stops node `i` if it runs, starts it again on the same client and cluster ports and the
    /// same store directory, and waits (up to 30 s) until it answers a JetStream API request
    /// again. Panics if `i >= self.len()`.
    pub async fn restart(&mut self, i: usize) -> Result<(), TestkitError> {
        self.nodes[i].restart(CLUSTER_READY_TIMEOUT).await
    }
}

/// Network faults, for a cluster started with [`NatsCluster::start_linked`]. Each method panics
/// on a cluster started with [`NatsCluster::start`], whose connections go through no link.
impl NatsCluster {
    fn net(&self) -> &Network {
        self.net
            .as_ref()
            .expect("network faults need a cluster started with `NatsCluster::start_linked`")
    }

    /// A new link to node `i`'s client port, for one client of the test's (stall it, cut it,
    /// slow it down without touching the other clients); [`heal`](Self::heal) heals it too.
    /// Panics if `i >= self.len()`.
    pub async fn client_link(&self, i: usize) -> Result<Link, TestkitError> {
        let link = Link::start(self.nodes[i].port).await?;
        self.net()
            .handed_out
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(link.clone());
        Ok(link)
    }

    /// The shared client link of node `i`, behind [`url`](Self::url).
    pub fn shared_client_link(&self, i: usize) -> &Link {
        &self.net().clients[i]
    }

    /// The route link node `from` dials to reach node `to` (the route between the two goes
    /// through it, or through the one `to` dials: stall both to cut them apart). Panics if
    /// `from == to`.
    pub fn route_link(&self, from: usize, to: usize) -> &Link {
        self.net().route(from, to)
    }

    /// Cuts node `i` off from the two other nodes, both ways (every route link between them
    /// stalls; connections stay open): a partition with node `i` alone on the minority side.
    /// Its clients still reach it; to cut a client off too, stall its link.
    pub fn isolate(&self, i: usize) {
        for j in (0..self.len()).filter(|&j| j != i) {
            self.net().route(i, j).stall();
            self.net().route(j, i).stall();
        }
    }

    /// Adds `latency` in each direction to every link: routes, the shared client links and
    /// those handed out so far.
    pub fn latency(&self, latency: std::time::Duration) {
        for link in self.net().all() {
            link.latency(latency);
        }
    }

    /// Ends every fault on every link (routes, shared client links, links handed out).
    pub fn heal(&self) {
        for link in self.net().all() {
            link.heal();
        }
    }
}

impl Network {
    fn route(&self, from: usize, to: usize) -> &Link {
        self.routes[from][to]
            .as_ref()
            .expect("no route link from a node to itself")
    }

    fn all(&self) -> Vec<Link> {
        let mut all: Vec<Link> = self.routes.iter().flatten().flatten().cloned().collect();
        all.extend(self.clients.iter().cloned());
        all.extend(
            self.handed_out
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .cloned(),
        );
        all
    }
}

impl std::fmt::Debug for NatsCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let nodes: Vec<_> = self.nodes.iter().map(|n| (n.url(), n.pid())).collect();
        f.debug_struct("NatsCluster")
            .field("nodes", &nodes)
            .finish()
    }
}

/// The HTTP monitoring endpoints of a [`NatsCluster`]'s nodes.
///
/// The monitoring endpoint rather than a `$SYS` request: the kit's servers have no system
/// account user to connect as, and adding one would change every test's connection.
#[derive(Debug, Clone)]
pub struct ClusterMonitor {
    ports: Vec<u16>,
}

impl ClusterMonitor {
    pub(crate) fn new(ports: Vec<u16>) -> ClusterMonitor {
        ClusterMonitor { ports }
    }

    /// The JetStream meta leader as the reachable nodes' `/jsz` reports it
    /// (`meta_cluster.leader`, a server name `node<i>`): `None` while no reachable node knows
    /// one, or while they disagree (during an election). A node just killed is unreachable
    /// and does not count.
    pub async fn meta_leader(&self) -> Option<usize> {
        let ports = self.ports.clone();
        let count = ports.len();
        let leaders = tokio::task::spawn_blocking(move || {
            ports
                .into_iter()
                .filter_map(|port| crate::probe::http_get(port, "/jsz"))
                .filter_map(|body| {
                    let jsz: serde_json::Value = serde_json::from_str(&body).ok()?;
                    let leader = jsz["meta_cluster"]["leader"].as_str()?;
                    NatsCluster::node_index(leader)
                })
                .collect::<Vec<_>>()
        })
        .await
        .ok()?;
        let first = *leaders.first()?;
        leaders
            .iter()
            .all(|&l| l == first)
            .then_some(first)
            .filter(|&l| l < count)
    }

    /// `Ok` when every node names one meta leader and that leader's `/jsz` counts every node
    /// in the meta group (`cluster_size`) with each other node a current replica; otherwise
    /// what is missing.
    pub(crate) async fn meta_group(&self) -> Result<(), String> {
        let mut leaders = Vec::with_capacity(self.ports.len());
        let mut views = Vec::with_capacity(self.ports.len());
        for i in 0..self.ports.len() {
            let jsz = self
                .node_json(i, "/jsz")
                .await
                .ok_or_else(|| format!("node{i} does not answer /jsz"))?;
            let meta = &jsz["meta_cluster"];
            let leader = meta["leader"]
                .as_str()
                .ok_or_else(|| format!("node{i} knows no meta leader"))?;
            leaders.push(leader.to_owned());
            views.push(meta.clone());
        }
        if leaders.iter().any(|l| *l != leaders[0]) {
            return Err(format!(
                "the nodes name different meta leaders: {leaders:?}"
            ));
        }
        let leader = NatsCluster::node_index(&leaders[0])
            .filter(|&l| l < views.len())
            .ok_or_else(|| format!("the meta leader {} is not a node", leaders[0]))?;
        let view = &views[leader];
        let size = view["cluster_size"].as_u64().unwrap_or(0);
        let current = view["replicas"]
            .as_array()
            .map_or(0, |r| r.iter().filter(|r| r["current"] == true).count());
        if size as usize != self.ports.len() || current + 1 != self.ports.len() {
            return Err(format!(
                "the meta leader node{leader} counts {size} nodes in the meta group, \
                 {current} other(s) current"
            ));
        }
        Ok(())
    }

    /// The number of nodes watched.
    pub fn nodes(&self) -> usize {
        self.ports.len()
    }

    /// Node `i`'s monitoring endpoint `path` (for example `/jsz?streams=true`) as JSON, or
    /// `None` when the node does not answer (it is down, or restarting) or the body is not
    /// JSON. Panics if `i` is not a node of the cluster.
    pub async fn node_json(&self, i: usize, path: &str) -> Option<serde_json::Value> {
        let port = self.ports[i];
        let path = path.to_owned();
        let body = tokio::task::spawn_blocking(move || crate::probe::http_get(port, &path))
            .await
            .ok()??;
        serde_json::from_str(&body).ok()
    }
}
