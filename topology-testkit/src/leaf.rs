//! [`NatsLeafTopology`]: a hub server and a leaf node server, each with its own JetStream
//! domain, connected over a leaf node port on loopback.

use std::time::Duration;

use tokio::time::Instant;

use crate::binary::server_binary_async;
use crate::error::TestkitError;
use crate::ports::{free_ports, make_store_dir, unique_suffix};
use crate::probe::wait_ready;
use crate::process::{LeafArgs, Node, START_ATTEMPTS};

/// How long the two servers may take to be ready and to see each other's JetStream.
const LEAF_READY_TIMEOUT: Duration = Duration::from_secs(30);
/// Bound on one cross-domain `INFO` probe.
const CROSS_PROBE_TIMEOUT: Duration = Duration::from_millis(500);

/// The hub's JetStream domain in [`NatsLeafTopology::start`].
pub const HUB_DOMAIN: &str = "hub";
/// The leaf node's JetStream domain in [`NatsLeafTopology::start`].
pub const LEAF_DOMAIN: &str = "edge";

/// Two real JetStream `nats-server` processes on loopback: a **hub** (JetStream domain `hub`,
/// accepting leaf node connections on a free port) and a **leaf node** (JetStream domain
/// `edge`) connected to it, as an edge site connects to a cloud. Both bind the global
/// account, so a client of either server reaches the other's JetStream under
/// `$JS.<domain>.API` (`async_nats::jetstream::with_domain(client, "edge")` from the hub).
///
/// Each server has its own store directory (with its log, `server.log`, and its
/// configuration file, `server.conf`). Dropping the topology kills both by pid, reaps them and
/// removes their directories.
///
/// ```no_run
/// use nats_topology_testkit::NatsLeafTopology;
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let servers = NatsLeafTopology::start().await?;
/// let hub = async_nats::connect(servers.hub_url()).await?;
/// // From the hub, the leaf node's JetStream.
/// let edge = async_nats::jetstream::with_domain(hub, servers.leaf_domain());
/// edge.create_stream(async_nats::jetstream::stream::Config {
///     name: "READINGS".into(),
///     subjects: vec!["readings.>".into()],
///     ..Default::default()
/// })
/// .await?;
/// # Ok(())
/// # }
/// ```
pub struct NatsLeafTopology {
    hub: Node,
    leaf: Node,
}

impl NatsLeafTopology {
    /// Starts the hub (domain [`HUB_DOMAIN`]) and the leaf node (domain [`LEAF_DOMAIN`]) and
    /// waits (up to 30 s) until each answers `$JS.API.INFO` and each reaches the other's
    /// JetStream through the leaf node connection (`$JS.edge.API.INFO` answered on the hub,
    /// `$JS.hub.API.INFO` on the leaf).
    pub async fn start() -> Result<NatsLeafTopology, TestkitError> {
        Self::start_with_domains(HUB_DOMAIN, LEAF_DOMAIN).await
    }

    /// As [`start`](Self::start), with other domain names (two distinct subject tokens).
    pub async fn start_with_domains(
        hub_domain: &str,
        leaf_domain: &str,
    ) -> Result<NatsLeafTopology, TestkitError> {
        let binary = server_binary_async().await?;
        let mut attempt = 1;
        loop {
            let ports = free_ports(3)?;
            let suffix = unique_suffix();
            let mut hub = Node::new(
                binary.clone(),
                format!("hub-{suffix}"),
                make_store_dir("hub")?,
            );
            hub.port = ports[0];
            hub.leaf = Some(LeafArgs {
                domain: hub_domain.to_owned(),
                listen_port: Some(ports[1]),
                remote_port: None,
                system_account: false,
            });
            let mut leaf = Node::new(
                binary.clone(),
                format!("leaf-{suffix}"),
                make_store_dir("leaf")?,
            );
            leaf.port = ports[2];
            leaf.leaf = Some(LeafArgs {
                domain: leaf_domain.to_owned(),
                listen_port: None,
                remote_port: Some(ports[1]),
                system_account: false,
            });
            let mut topology = NatsLeafTopology { hub, leaf };
            match topology.launch().await {
                Ok(()) => return Ok(topology),
                Err(_)
                    if attempt < START_ATTEMPTS
                        && (topology.hub.lost_port_race() || topology.leaf.lost_port_race()) =>
                {
                    // Dropping `topology` kills both and removes their directories.
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn launch(&mut self) -> Result<(), TestkitError> {
        let deadline = Instant::now() + LEAF_READY_TIMEOUT;
        self.hub.spawn()?;
        self.leaf.spawn()?;
        let mut nodes = [&mut self.hub, &mut self.leaf];
        for node in nodes.iter_mut() {
            let left = deadline.saturating_duration_since(Instant::now());
            wait_ready(std::slice::from_mut(*node), left).await?;
        }
        let hub_domain = self.hub_domain().to_owned();
        let leaf_domain = self.leaf_domain().to_owned();
        cross_ready(&mut self.hub, &leaf_domain, deadline).await?;
        cross_ready(&mut self.leaf, &hub_domain, deadline).await
    }

    /// The hub's client URL, `nats://127.0.0.1:<port>`.
    pub fn hub_url(&self) -> String {
        self.hub.url()
    }

    /// The leaf node's client URL, `nats://127.0.0.1:<port>`.
    pub fn leaf_url(&self) -> String {
        self.leaf.url()
    }

    /// The hub's JetStream domain.
    pub fn hub_domain(&self) -> &str {
        &self.hub.leaf.as_ref().expect("a hub has a domain").domain
    }

    /// The leaf node's JetStream domain.
    pub fn leaf_domain(&self) -> &str {
        &self.leaf.leaf.as_ref().expect("a leaf has a domain").domain
    }

    /// The pid of the hub while it runs.
    pub fn hub_pid(&self) -> Option<u32> {
        self.hub.pid()
    }

    /// The pid of the leaf node while it runs.
    pub fn leaf_pid(&self) -> Option<u32> {
        self.leaf.pid()
    }

    /// The hub's store directory (with `server.log` and `server.conf`).
    pub fn hub_store_dir(&self) -> &std::path::Path {
        &self.hub.dir
    }

    /// The leaf node's store directory (with `server.log` and `server.conf`).
    pub fn leaf_store_dir(&self) -> &std::path::Path {
        &self.leaf.dir
    }
}

impl std::fmt::Debug for NatsLeafTopology {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsLeafTopology")
            .field("hub", &(self.hub_url(), self.hub_domain(), self.hub_pid()))
            .field(
                "leaf",
                &(self.leaf_url(), self.leaf_domain(), self.leaf_pid()),
            )
            .finish()
    }
}

/// Waits until a client of `node` gets an answer without an error to
/// `$JS.<domain>.API.INFO`: the leaf node connection is up and carries the other server's
/// JetStream API.
pub(crate) async fn cross_ready(
    node: &mut Node,
    domain: &str,
    deadline: Instant,
) -> Result<(), TestkitError> {
    let subject = format!("$JS.{domain}.API.INFO");
    let url = node.url();
    let mut last = String::from("not tried");
    let mut client = None;
    loop {
        if let Some(status) = node.exit_status() {
            return Err(node.exited_error(status));
        }
        if client.is_none() {
            match async_nats::ConnectOptions::new()
                .name("nats-topology-testkit-probe")
                .connection_timeout(CROSS_PROBE_TIMEOUT)
                .connect(url.as_str())
                .await
            {
                Ok(c) => client = Some(c),
                Err(e) => last = format!("connecting to {url}: {e}"),
            }
        }
        if let Some(client) = &client {
            let request = client.request(subject.clone(), "{}".into());
            match tokio::time::timeout(CROSS_PROBE_TIMEOUT, request).await {
                Ok(Ok(reply)) => {
                    match serde_json::from_slice::<serde_json::Value>(&reply.payload) {
                        Ok(v) if v.is_object() && v.get("error").is_none() => return Ok(()),
                        _ => {
                            last = format!(
                                "{subject} on {url} answered {}",
                                String::from_utf8_lossy(&reply.payload)
                            )
                        }
                    }
                }
                Ok(Err(e)) => last = format!("{subject} on {url}: {e}"),
                Err(_) => {
                    last = format!("{subject} on {url}: no answer within {CROSS_PROBE_TIMEOUT:?}")
                }
            }
        }
        if Instant::now() >= deadline {
            return Err(node.not_ready(
                LEAF_READY_TIMEOUT,
                format!(
                    "the leaf node connection does not carry JetStream domain `{domain}`: {last}"
                ),
            ));
        }
        // Repeated at the readiness probes' pace, until the deadline above.
        tokio::time::sleep(crate::probe::PROBE_INTERVAL).await;
    }
}
