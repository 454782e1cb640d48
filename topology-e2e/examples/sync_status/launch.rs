//! The launcher's side of its helper processes (this program again, with an environment
//! variable saying what to be): start one, read what it reports when ready (a replica its
//! URL, the embedded cluster its servers), tell a replica its peers, and stop it by its pid:
//! close its stdin and wait for the drain, or SIGKILL it.

use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};

use crate::replica::{LISTENING, REPLICA_ENV, SERVERS_ENV};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How long a helper may take to be ready (a fresh cluster elects stream leaders first).
const START_TIMEOUT: Duration = Duration::from_secs(90);

/// A running helper process. Dropping it kills the process (SIGKILL, by pid).
pub struct Process {
    pub name: String,
    /// What it reported when ready.
    report: String,
    child: Child,
    stdin: Option<ChildStdin>,
}

impl Process {
    /// Starts `command` as replica `name` on `servers` and waits until it reports its URL.
    pub async fn replica(command: Command, name: &str, servers: &str) -> Result<Process, BoxError> {
        let env = [(REPLICA_ENV, name), (SERVERS_ENV, servers)];
        Process::start(command, &format!("replica {name}"), &env, LISTENING).await
    }

    /// Starts `command` with `env` and waits until it prints a line with `ready` (what follows
    /// is its report). The process gets a process group of its own, so that Ctrl-C in a
    /// terminal reaches the launcher only, which then stops each helper once, in order.
    pub async fn start(
        mut command: Command,
        name: &str,
        env: &[(&str, &str)],
        ready: &str,
    ) -> Result<Process, BoxError> {
        let mut child = command
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot start {name}: {e}"))?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("stdout is piped");
        let mut lines = BufReader::new(stdout).lines();
        let report = tokio::time::timeout(START_TIMEOUT, async {
            while let Some(line) = lines.next_line().await? {
                // A test harness may print on the same line before it.
                if let Some(at) = line.find(ready) {
                    return Ok(Some(line[at + ready.len()..].trim().to_owned()));
                }
            }
            Ok::<_, std::io::Error>(None)
        })
        .await;
        let report = match report {
            Ok(Ok(Some(report))) => report,
            Ok(Ok(None)) => return Err(format!("{name} exited before it was ready").into()),
            Ok(Err(e)) => return Err(format!("reading {name}'s output: {e}").into()),
            Err(_) => {
                return Err(format!("{name} was not ready within {START_TIMEOUT:?}").into());
            }
        };
        // Keep reading, so that the replica never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok(Process {
            name: name.to_owned(),
            report,
            child,
            stdin,
        })
    }

    /// What it reported when ready.
    pub fn report(&self) -> &str {
        &self.report
    }

    /// A replica's URL (`http://127.0.0.1:PORT/`).
    pub fn url(&self) -> &str {
        &self.report
    }

    /// A replica's origin (its URL without the trailing `/`).
    pub fn origin(&self) -> &str {
        self.report.trim_end_matches('/')
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Tells the replica every replica's origin (pages reconnect to them).
    pub async fn set_peers(&mut self, origins: &[String]) -> Result<(), BoxError> {
        let stdin = self.stdin.as_mut().ok_or("the process is stopping")?;
        stdin
            .write_all(format!("peers {}\n", origins.join(",")).as_bytes())
            .await?;
        stdin.flush().await?;
        Ok(())
    }

    /// Waits until the process exits by itself (or is killed by someone else).
    pub async fn exited(&mut self) -> std::io::Result<ExitStatus> {
        self.child.wait().await
    }

    /// SIGKILL, and reap it (the browser test kills the replica doing the work).
    #[allow(dead_code)]
    pub async fn kill(&mut self) -> std::io::Result<()> {
        self.child.kill().await
    }

    /// Closes its stdin (a replica drains and exits; the cluster stops its nodes) and waits up to `grace`; after that it
    /// is killed, and that is an error.
    pub async fn stop(mut self, grace: Duration) -> Result<ExitStatus, BoxError> {
        drop(self.stdin.take());
        match tokio::time::timeout(grace, self.child.wait()).await {
            Ok(status) => Ok(status?),
            Err(_) => {
                self.child.kill().await?;
                Err(format!("{} did not stop within {grace:?}; killed it", self.name).into())
            }
        }
    }
}
