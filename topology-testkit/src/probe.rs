//! Readiness: a probe with a deadline (TCP connect plus the server's `INFO` line, then a
//! `$JS.API.INFO` request that answers without an error, over TLS and with credentials when the
//! server requires them), never a fixed sleep.

use std::io;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::time::Instant;

use crate::error::TestkitError;
use crate::process::{Node, START_ATTEMPTS};

/// How often readiness probes are repeated.
pub(crate) const PROBE_INTERVAL: Duration = Duration::from_millis(50);
/// Bound on each single readiness probe (TCP connect, INFO line, JetStream request).
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// Bound on each `$JS.API.INFO` probe. A server without a JetStream meta leader does not answer
/// at all, so a short bound notices the leader sooner; the probe is repeated until the deadline.
const JS_PROBE_TIMEOUT: Duration = Duration::from_millis(500);

/// Readiness of one node as seen by [`wait_ready`].
#[derive(Default)]
struct Probe {
    /// The TCP connect succeeded and the `INFO` line arrived.
    tcp: bool,
    /// `$JS.API.INFO` answered without an error.
    jetstream: bool,
    /// The probe client, kept between attempts.
    client: Option<async_nats::Client>,
    /// The last failure, for the error message.
    last: String,
    /// The server refused the probe's credentials (or they do not parse): waiting longer
    /// changes nothing.
    refused: bool,
}

impl Probe {
    /// One readiness probe of `node`, bounded by a few `PROBE_TIMEOUT`s: over TLS and with the
    /// probe's credentials when the node has them.
    async fn step(&mut self, node: &Node) {
        let port = node.port;
        if !self.tcp {
            let addr = format!("127.0.0.1:{port}");
            let probe = async {
                let stream = tokio::net::TcpStream::connect(&addr).await?;
                let mut line = String::new();
                BufReader::new(stream).read_line(&mut line).await?;
                Ok::<_, io::Error>(line)
            };
            match tokio::time::timeout(PROBE_TIMEOUT, probe).await {
                Ok(Ok(line)) if line.starts_with("INFO ") => self.tcp = true,
                Ok(Ok(line)) => self.last = format!("no INFO on {addr}: first line {line:?}"),
                Ok(Err(e)) => self.last = format!("no INFO on {addr}: {e}"),
                Err(_) => self.last = format!("no INFO on {addr} within {PROBE_TIMEOUT:?}"),
            }
            if !self.tcp {
                return;
            }
        }
        let url = node.url();
        if self.client.is_none() {
            let options = match node.probe_options() {
                Ok(options) => options,
                Err(e) => {
                    self.last = e;
                    self.refused = true;
                    return;
                }
            };
            let connect = options
                .name("nats-topology-testkit-probe")
                .ignore_discovered_servers()
                .connection_timeout(PROBE_TIMEOUT)
                .request_timeout(Some(JS_PROBE_TIMEOUT))
                .connect(url.as_str());
            match tokio::time::timeout(PROBE_TIMEOUT, connect).await {
                Ok(Ok(client)) => self.client = Some(client),
                Ok(Err(e)) => {
                    self.refused = e.kind() == async_nats::ConnectErrorKind::AuthorizationViolation;
                    self.last = format!("connecting to {url}: {e}");
                    if self.refused {
                        self.last.push_str(
                            " (the server refuses the probe's credentials: give the probe a user \
                             of the configuration with `probe_user`, `probe_token`, \
                             `probe_nkey` or `probe_credentials`)",
                        );
                    }
                }
                Err(_) => self.last = format!("connecting to {url} timed out"),
            }
        }
        let Some(client) = &self.client else { return };
        let request = client.request("$JS.API.INFO", Default::default());
        match tokio::time::timeout(JS_PROBE_TIMEOUT, request).await {
            Ok(Ok(reply)) => match serde_json::from_slice::<serde_json::Value>(&reply.payload) {
                Ok(v) if v.is_object() && v.get("error").is_none() => self.jetstream = true,
                _ => {
                    self.last = format!(
                        "$JS.API.INFO on {url} answered {}",
                        String::from_utf8_lossy(&reply.payload)
                    )
                }
            },
            Ok(Err(e)) => self.last = format!("$JS.API.INFO on {url}: {e}"),
            Err(_) => {
                self.last = format!("$JS.API.INFO on {url}: no answer within {JS_PROBE_TIMEOUT:?}")
            }
        }
    }
}

/// Waits until every node in `nodes` (all spawned) accepts TCP connections, sends its `INFO`
/// line and answers `$JS.API.INFO` without an error. Fails as soon as any node exits, or when
/// `timeout` passes; the error names the failing node's command and log tail.
pub(crate) async fn wait_ready(nodes: &mut [Node], timeout: Duration) -> Result<(), TestkitError> {
    let deadline = Instant::now() + timeout;
    let mut probes: Vec<Probe> = nodes.iter().map(|_| Probe::default()).collect();
    loop {
        for node in nodes.iter_mut() {
            if let Some(status) = node.exit_status() {
                return Err(node.exited_error(status));
            }
        }
        if probes.iter().all(|p| p.jetstream) {
            return Ok(());
        }
        if let Some((node, probe)) = nodes.iter().zip(&probes).find(|(_, p)| p.refused) {
            return Err(node.not_ready(timeout, probe.last.clone()));
        }
        if Instant::now() >= deadline {
            let (node, probe) = nodes
                .iter()
                .zip(&probes)
                .find(|(_, p)| !p.jetstream)
                .expect("some node is not ready");
            return Err(node.not_ready(timeout, probe.last.clone()));
        }
        let steps = nodes
            .iter()
            .zip(probes.iter_mut())
            .filter(|(_, p)| !p.jetstream)
            .map(|(node, probe)| probe.step(node));
        futures::future::join_all(steps).await;
        if !probes.iter().all(|p| p.jetstream) {
            tokio::time::sleep(PROBE_INTERVAL).await;
        }
    }
}

/// The body of `GET http://127.0.0.1:<port><path>` (HTTP/1.0, loopback, 1 s timeouts), or
/// `None` on any failure. Blocking: call it from `spawn_blocking`.
pub(crate) fn http_get(port: u16, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let timeout = std::time::Duration::from_secs(1);
    let address = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut stream = std::net::TcpStream::connect_timeout(&address, timeout).ok()?;
    stream.set_read_timeout(Some(timeout)).ok()?;
    stream.set_write_timeout(Some(timeout)).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.").then(|| body.to_owned())
}

/// Starting a node and waiting until it is ready: above the process (which only spawns,
/// signals and reaps it) and beside the probe that says when it is ready.
impl Node {
    /// Spawns the process on its current port and waits until it is ready (TCP and JetStream).
    pub(crate) async fn spawn_and_wait(&mut self, timeout: Duration) -> Result<(), TestkitError> {
        self.spawn()?;
        wait_ready(std::slice::from_mut(self), timeout).await
    }

    /// Stops the process if it runs, then starts it again on the same ports and store directory
    /// and waits until it is ready. Retries a few times if the port is briefly still taken.
    pub(crate) async fn restart(&mut self, timeout: Duration) -> Result<(), TestkitError> {
        self.stop().await;
        let mut attempt = 1;
        loop {
            match self.spawn_and_wait(timeout).await {
                Ok(()) => return Ok(()),
                Err(_) if attempt < START_ATTEMPTS && self.lost_port_race() => {
                    self.kill();
                    attempt += 1;
                    tokio::time::sleep(Duration::from_millis(100 * attempt as u64)).await;
                }
                Err(e) => {
                    self.kill();
                    return Err(e);
                }
            }
        }
    }
}
