//! One `nats-server` process: its arguments, spawning, its log, signals (SIGTERM by pid for a
//! graceful stop, SIGKILL), reaping and restarting on the same ports and store directory.

use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::POLL_INTERVAL;
use crate::builder::Setup;
use crate::error::TestkitError;
use crate::tls::{Certificates, TlsFiles};

/// How long a graceful stop waits after SIGTERM before it sends SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(10);
/// How many times a start picks new ports after losing the bind/spawn race.
pub(crate) const START_ATTEMPTS: usize = 5;
/// How many lines of a server's log go into an error message.
const LOG_TAIL_LINES: usize = 40;

pub(crate) fn display_command(program: &Path, args: &[OsString]) -> String {
    let mut out = program.display().to_string();
    for arg in args {
        out.push(' ');
        out.push_str(&arg.to_string_lossy());
    }
    out
}

/// `tls://127.0.0.1:<port>` or `nats://127.0.0.1:<port>`.
pub(crate) fn url_for(tls: bool, port: u16) -> String {
    let scheme = if tls { "tls" } else { "nats" };
    format!("{scheme}://127.0.0.1:{port}")
}

fn file_len(path: &Path) -> u64 {
    fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// The last `LOG_TAIL_LINES` lines written to `path` from byte `offset` on.
fn read_tail(path: &Path, offset: u64) -> String {
    let mut text = String::new();
    if let Ok(mut file) = File::open(path) {
        let _ = file.seek(SeekFrom::Start(offset));
        let mut bytes = Vec::new();
        let _ = file.read_to_end(&mut bytes);
        text = String::from_utf8_lossy(&bytes).into_owned();
    }
    let lines: Vec<&str> = text.lines().collect();
    let start = lines.len().saturating_sub(LOG_TAIL_LINES);
    lines[start..].join("\n")
}

/// Cluster membership of a node.
pub(crate) struct ClusterArgs {
    pub(crate) cluster_port: u16,
    /// The HTTP monitoring port (`-m`), for `/jsz` (who is the meta leader).
    pub(crate) monitor_port: u16,
    pub(crate) route_ports: Vec<u16>,
    pub(crate) cluster_name: String,
    /// Behind links (see `NatsCluster::start_linked`): the route URL this node advertises to
    /// the others (one nothing listens on, so that no route bypasses the links), and no client
    /// URLs advertised to clients (`--no_advertise`), so that clients reconnect only through
    /// the URLs they were given.
    pub(crate) advertise: Option<u16>,
}

/// A JetStream domain and leaf node connections (written to a configuration file, `-c`: the
/// command line has no flags for them).
pub(crate) struct LeafArgs {
    /// The `domain` of the `jetstream` block.
    pub(crate) domain: String,
    /// The port this server accepts leaf node connections on (the hub).
    pub(crate) listen_port: Option<u16>,
    /// The leaf node port of the hub this server connects to (the leaf).
    pub(crate) remote_port: Option<u16>,
    /// Declares the accounts explicitly: a system account `SYS` (a server with both gateways
    /// and leaf nodes refuses to start without one) and the application's `APP`, with
    /// JetStream, that clients and leaf nodes without credentials are mapped to
    /// (`no_auth_user`).
    pub(crate) system_account: bool,
}

impl LeafArgs {
    fn config(&self) -> String {
        let mut config = format!("jetstream {{\n  domain: \"{}\"\n}}\n", self.domain);
        if self.system_account {
            config.push_str(concat!(
                "accounts {\n",
                "  SYS: { users: [{ user: \"sys\", password: \"sys\" }] }\n",
                "  APP: { jetstream: enabled, users: [{ user: \"app\", password: \"app\" }] }\n",
                "}\n",
                "system_account: SYS\n",
                "no_auth_user: app\n",
            ));
        }
        if let Some(port) = self.listen_port {
            config.push_str(&format!(
                "leafnodes {{\n  listen: \"127.0.0.1:{port}\"\n}}\n"
            ));
        }
        if let Some(port) = self.remote_port {
            config.push_str(&format!(
                "leafnodes {{\n  remotes: [\n    {{ url: \"nats-leaf://127.0.0.1:{port}\" }}\n  ]\n}}\n"
            ));
        }
        config
    }
}

/// Membership of a supercluster: the gateway this node listens on and dials, and its server
/// tags (written to the configuration file: the command line has no flags for them).
pub(crate) struct GatewayArgs {
    /// The gateway's name: the node's cluster's name.
    pub(crate) name: String,
    pub(crate) listen_port: u16,
    /// The gateway URL this node advertises (one nothing listens on, so that no gateway
    /// connection bypasses the links).
    pub(crate) advertise_port: u16,
    /// Each other cluster's name and the ports to dial it through.
    pub(crate) remotes: Vec<(String, Vec<u16>)>,
    pub(crate) tags: Vec<String>,
}

impl GatewayArgs {
    fn config(&self) -> String {
        let remotes = self
            .remotes
            .iter()
            .map(|(name, ports)| {
                let urls = ports
                    .iter()
                    .map(|p| format!("\"nats://127.0.0.1:{p}\""))
                    .collect::<Vec<_>>()
                    .join(", ");
                format!("    {{ name: \"{name}\", urls: [{urls}] }}\n")
            })
            .collect::<String>();
        let tags = self
            .tags
            .iter()
            .map(|t| format!("\"{t}\""))
            .collect::<Vec<_>>()
            .join(", ");
        format!(
            "gateway {{\n  name: \"{}\"\n  listen: \"127.0.0.1:{}\"\n  advertise: \
             \"127.0.0.1:{}\"\n  gateways: [\n{remotes}  ]\n}}\nserver_tags: [{tags}]\n",
            self.name, self.listen_port, self.advertise_port
        )
    }
}

/// One `nats-server` process: its fixed configuration (ports, store directory) and, while it
/// runs, the child process. Shared by [`NatsServer`](crate::NatsServer) and
/// [`NatsCluster`](crate::NatsCluster).
pub(crate) struct Node {
    binary: PathBuf,
    name: String,
    pub(crate) port: u16,
    pub(crate) cluster: Option<ClusterArgs>,
    pub(crate) leaf: Option<LeafArgs>,
    pub(crate) gateway: Option<GatewayArgs>,
    /// Configuration of the test's own, environment variables, probe credentials.
    pub(crate) setup: Arc<Setup>,
    /// The certificate files in `dir`, for a server with TLS.
    pub(crate) tls: Option<TlsFiles>,
    pub(crate) dir: PathBuf,
    child: Option<Child>,
    /// Lengths of the log and output files when the current process was spawned, so that error
    /// messages show only this run's lines.
    log_offset: u64,
    out_offset: u64,
}

impl Node {
    pub(crate) fn new(binary: PathBuf, name: String, dir: PathBuf) -> Node {
        Node {
            binary,
            name,
            port: 0,
            cluster: None,
            leaf: None,
            gateway: None,
            setup: Arc::default(),
            tls: None,
            dir,
            child: None,
            log_offset: 0,
            out_offset: 0,
        }
    }

    /// Gives the node the test's configuration and, for TLS, writes the certificates into its
    /// store directory.
    pub(crate) fn set_up(
        &mut self,
        setup: Arc<Setup>,
        certificates: Option<&Certificates>,
    ) -> Result<(), TestkitError> {
        self.tls = match (setup.tls, certificates) {
            (Some(mode), Some(certificates)) => Some(certificates.write(&self.dir, mode)?),
            _ => None,
        };
        self.setup = setup;
        Ok(())
    }

    /// The client URL: `tls://` for a server with TLS, else `nats://`.
    pub(crate) fn url(&self) -> String {
        url_for(self.tls.is_some(), self.port)
    }

    pub(crate) fn log_path(&self) -> PathBuf {
        self.dir.join("server.log")
    }

    pub(crate) fn out_path(&self) -> PathBuf {
        self.dir.join("server.out")
    }

    pub(crate) fn config_path(&self) -> PathBuf {
        self.dir.join("server.conf")
    }

    pub(crate) fn args(&self) -> Vec<OsString> {
        let mut args: Vec<OsString> = vec![
            "-a".into(),
            "127.0.0.1".into(),
            "-p".into(),
            self.port.to_string().into(),
            "-js".into(),
            "-sd".into(),
            self.dir.clone().into(),
            "-l".into(),
            self.log_path().into(),
            "--server_name".into(),
            self.name.clone().into(),
        ];
        if self.needs_config_file() {
            // Flags win over the file: the file adds the domain and the leaf nodes, TLS, and
            // the test's own configuration.
            args.extend(["-c".into(), self.config_path().into()]);
        }
        if let Some(cluster) = &self.cluster {
            args.extend([
                "-m".into(),
                cluster.monitor_port.to_string().into(),
                "--cluster".into(),
                format!("nats://127.0.0.1:{}", cluster.cluster_port).into(),
                "--cluster_name".into(),
                cluster.cluster_name.clone().into(),
            ]);
            let routes = cluster
                .route_ports
                .iter()
                .map(|p| format!("nats://127.0.0.1:{p}"))
                .collect::<Vec<_>>()
                .join(",");
            // A supercluster's cluster of one routes to itself (see `supercluster.rs`); no
            // other node runs without routes.
            if !routes.is_empty() {
                args.extend(["--routes".into(), routes.into()]);
            }
            if let Some(port) = cluster.advertise {
                args.extend([
                    "--cluster_advertise".into(),
                    format!("127.0.0.1:{port}").into(),
                    "--no_advertise".into(),
                ]);
            }
        }
        args
    }

    /// Whether the server needs a configuration file (`-c`).
    fn needs_config_file(&self) -> bool {
        self.leaf.is_some() || self.gateway.is_some() || self.setup.needs_config_file()
    }

    /// The configuration file: the leaf node and gateway settings, the `tls` block, then the
    /// test's own text (last, so that it can override what comes before).
    fn config_file(&self) -> String {
        let mut config = String::new();
        if let Some(leaf) = &self.leaf {
            config.push_str(&leaf.config());
        }
        if let Some(gateway) = &self.gateway {
            config.push_str(&gateway.config());
        }
        if let Some(tls) = &self.tls {
            config.push_str(&tls.config_block());
        }
        config.push_str(&self.setup.config);
        config
    }

    /// The readiness probe's connection options: its credentials and, for a server with TLS,
    /// the CA and the client certificate; an error if its credentials text does not parse.
    pub(crate) fn probe_options(&self) -> Result<async_nats::ConnectOptions, String> {
        let options = match &self.tls {
            Some(tls) => tls.connect_options(),
            None => async_nats::ConnectOptions::new(),
        };
        self.setup.probe.apply(options)
    }

    pub(crate) fn command_line(&self) -> String {
        display_command(&self.binary, &self.args())
    }

    pub(crate) fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The last lines of this run's log file and stdout/stderr.
    pub(crate) fn tail(&self) -> String {
        let log = read_tail(&self.log_path(), self.log_offset);
        let out = read_tail(&self.out_path(), self.out_offset);
        match (log.is_empty(), out.is_empty()) {
            (true, true) => "(empty)".to_string(),
            (false, true) => log,
            (true, false) => out,
            (false, false) => format!("{log}\n(stdout/stderr:)\n{out}"),
        }
    }

    pub(crate) fn spawn(&mut self) -> Result<(), TestkitError> {
        debug_assert!(self.child.is_none(), "spawn while a process runs");
        if self.needs_config_file() {
            fs::write(self.config_path(), self.config_file())
                .map_err(|e| TestkitError::io("writing the server configuration file", e))?;
        }
        self.log_offset = file_len(&self.log_path());
        self.out_offset = file_len(&self.out_path());
        let out = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.out_path())
            .map_err(|e| TestkitError::io("opening the server output file", e))?;
        let err = out
            .try_clone()
            .map_err(|e| TestkitError::io("opening the server output file", e))?;
        let child = Command::new(&self.binary)
            .args(self.args())
            .envs(self.setup.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| TestkitError::Spawn {
                command: self.command_line(),
                source: Arc::new(e),
            })?;
        self.child = Some(child);
        Ok(())
    }

    /// `Some(status)` if the process has exited (it is then reaped), `None` while it runs.
    pub(crate) fn exit_status(&mut self) -> Option<ExitStatus> {
        let child = self.child.as_mut()?;
        child.try_wait().ok().flatten()
    }

    pub(crate) fn exited_error(&self, status: ExitStatus) -> TestkitError {
        TestkitError::Exited {
            command: self.command_line(),
            status: status.to_string(),
            log_tail: self.tail(),
        }
    }

    /// True if the current process exited because one of its ports was taken.
    pub(crate) fn lost_port_race(&mut self) -> bool {
        self.exit_status().is_some() && self.tail().contains("address already in use")
    }

    pub(crate) fn not_ready(&self, timeout: Duration, detail: String) -> TestkitError {
        TestkitError::NotReady {
            timeout,
            detail,
            command: self.command_line(),
            log_tail: self.tail(),
        }
    }

    /// Replaces the test's configuration text, rewrites the configuration file and has the
    /// running server reload it (SIGHUP by pid).
    pub(crate) fn reload(&mut self, config: String) -> Result<(), TestkitError> {
        let mut setup = (*self.setup).clone();
        setup.config = config;
        self.setup = Arc::new(setup);
        // A reload reads the file again but not every flag: the server's name (a flag) must
        // be in the file too, or the server refuses the reload as a change of name.
        let file = format!("server_name: \"{}\"\n{}", self.name, self.config_file());
        fs::write(self.config_path(), file)
            .map_err(|e| TestkitError::io("writing the server configuration file", e))?;
        self.signal(libc::SIGHUP);
        Ok(())
    }

    /// Sends `signal` to the process if it still runs (it is not reaped, so the pid is ours).
    pub(crate) fn signal(&mut self, signal: libc::c_int) {
        if self.exit_status().is_some() {
            return;
        }
        if let Some(pid) = self.pid().and_then(|p| libc::pid_t::try_from(p).ok()) {
            // SAFETY: kill(2) has no memory-safety preconditions; the pid is our own unreaped
            // child, so it cannot have been reused by another process.
            unsafe {
                libc::kill(pid, signal);
            }
        }
    }

    /// SIGKILL by pid, then reap.
    pub(crate) fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            // `Child::kill` sends SIGKILL to this child's pid, unless it has already been reaped.
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM by pid, wait up to `STOP_GRACE`, then SIGKILL; always reaps.
    pub(crate) async fn stop(&mut self) {
        if self.child.is_none() {
            return;
        }
        self.signal(libc::SIGTERM);
        let deadline = Instant::now() + STOP_GRACE;
        while self.exit_status().is_none() && Instant::now() < deadline {
            tokio::time::sleep(POLL_INTERVAL).await;
        }
        self.kill();
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
        let _ = fs::remove_dir_all(&self.dir);
    }
}
