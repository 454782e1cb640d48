//! [`NatsServer`]: one JetStream server that can be stopped, killed and restarted in place.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::binary::server_binary_async;
use crate::builder::Setup;
use crate::error::TestkitError;
use crate::ports::{free_ports, make_store_dir, unique_suffix};
use crate::process::{Node, START_ATTEMPTS};
use crate::tls::{Certificates, TlsFiles};

/// How long a single server may take to become ready.
const SERVER_READY_TIMEOUT: Duration = Duration::from_secs(20);

/// One real JetStream `nats-server` (`-js`) on a free loopback port, with its own temporary
/// store directory.
///
/// Dropping it kills the process by pid (SIGKILL), reaps it and removes the store directory.
pub struct NatsServer {
    node: Node,
}

impl NatsServer {
    /// Starts a JetStream server on a free loopback port and waits (up to 20 s) until it accepts
    /// connections and answers a JetStream API request.
    ///
    /// If the port is taken between choosing it and the server binding it, a new port is chosen
    /// (a few times). Errors include the command and the tail of the server's log.
    ///
    /// For users and permissions, accounts or TLS, start it with [`NatsServer::builder`].
    pub async fn start() -> Result<NatsServer, TestkitError> {
        Self::start_setup(Arc::default()).await
    }

    pub(crate) async fn start_setup(setup: Arc<Setup>) -> Result<NatsServer, TestkitError> {
        let binary = server_binary_async().await?;
        let dir = make_store_dir("server")?;
        let name = format!("testkit-{}", unique_suffix());
        let mut node = Node::new(binary, name, dir);
        let certificates = setup.tls.map(|_| Certificates::generate()).transpose()?;
        node.set_up(setup, certificates.as_ref())?;
        let mut attempt = 1;
        loop {
            node.port = free_ports(1)?[0];
            match node.spawn_and_wait(SERVER_READY_TIMEOUT).await {
                Ok(()) => return Ok(NatsServer { node }),
                Err(_) if attempt < START_ATTEMPTS && node.lost_port_race() => {
                    node.kill();
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Starts a JetStream server on the given loopback port and waits (up to 20 s) until it is
    /// ready, as [`start`](Self::start) does; the port is not changed if it is taken (an error).
    /// For a test of a client that is already trying to reach that port.
    pub async fn start_on_port(port: u16) -> Result<NatsServer, TestkitError> {
        let binary = server_binary_async().await?;
        let dir = make_store_dir("server")?;
        let name = format!("testkit-{}", unique_suffix());
        let mut node = Node::new(binary, name, dir);
        node.port = port;
        node.spawn_and_wait(SERVER_READY_TIMEOUT).await?;
        Ok(NatsServer { node })
    }

    /// The client URL, `nats://127.0.0.1:<port>`; `tls://127.0.0.1:<port>` for a server
    /// started with TLS ([`ServerBuilder::tls`](crate::ServerBuilder::tls)), which makes a
    /// client require TLS.
    pub fn url(&self) -> String {
        self.node.url()
    }

    /// The certificate files of a server started with TLS (in its store directory), `None`
    /// without TLS.
    ///
    /// ```no_run
    /// use nats_topology_testkit::NatsServer;
    ///
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// let server = NatsServer::builder().mutual_tls().start().await?;
    /// let tls = server.tls().expect("started with TLS");
    /// assert!(tls.ca().starts_with(server.store_dir()));
    /// # Ok(())
    /// # }
    /// ```
    pub fn tls(&self) -> Option<&TlsFiles> {
        self.node.tls.as_ref()
    }

    /// The client port (kept across [`restart`](Self::restart)).
    pub fn port(&self) -> u16 {
        self.node.port
    }

    /// The pid of the running process, or `None` after [`stop`](Self::stop) or
    /// [`kill`](Self::kill).
    pub fn pid(&self) -> Option<u32> {
        self.node.pid()
    }

    /// The store directory (kept across [`restart`](Self::restart), removed on drop). It also
    /// holds the server's log, `server.log`.
    pub fn store_dir(&self) -> &Path {
        &self.node.dir
    }

    /// Stops the server gracefully: SIGTERM by pid, waits up to 10 s, then SIGKILL. The process is
    /// reaped, so its port refuses connections afterwards. Does nothing if it is not running.
    pub async fn stop(&mut self) {
        self.node.stop().await;
    }

    /// Kills the server abruptly (SIGKILL by pid) and reaps it. Does nothing if it is not
    /// running.
    pub fn kill(&mut self) {
        self.node.kill();
    }

    /// Replaces the configuration text given to [`ServerBuilder::config`] with `config` and
    /// has the running server reload its configuration file (SIGHUP by pid), as an operator
    /// does after editing users or permissions. The reload is asynchronous: wait on what it
    /// changes. A later [`restart`](Self::restart) keeps the new text.
    ///
    /// [`ServerBuilder::config`]: crate::ServerBuilder::config
    pub fn reload(&mut self, config: impl Into<String>) -> Result<(), TestkitError> {
        self.node.reload(config.into())
    }

    /// Stops the server if it runs, then starts it again on the same port and the same store
    /// directory (file-backed streams survive), with the same configuration, environment,
    /// certificates and probe credentials, and waits until it is ready.
    pub async fn restart(&mut self) -> Result<(), TestkitError> {
        self.node.restart(SERVER_READY_TIMEOUT).await
    }
}

impl std::fmt::Debug for NatsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsServer")
            .field("url", &self.url())
            .field("tls", &self.tls().map(TlsFiles::verifies_clients))
            .field("pid", &self.pid())
            .field("store_dir", &self.store_dir())
            .finish()
    }
}
