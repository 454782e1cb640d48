//! The launcher's side of a replica process: start it (this program again, with
//! [`REPLICA_ENV`] set), learn its URL, tell it its peers, and stop it by its pid: close its
//! stdin and wait for the drain, or SIGKILL it.

use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};

use crate::replica::{LISTENING, REPLICA_ENV, SERVERS_ENV};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How long a replica may take to be ready (a fresh cluster elects stream leaders first).
const START_TIMEOUT: Duration = Duration::from_secs(90);

/// A running replica process. Dropping it kills the process (SIGKILL, by pid).
pub struct ReplicaProcess {
    pub name: String,
    /// `http://127.0.0.1:PORT/`
    pub url: String,
    child: Child,
    stdin: Option<ChildStdin>,
}

impl ReplicaProcess {
    /// Starts `command` as replica `name` on `servers` and waits until it reports its URL. The
    /// process gets a process group of its own, so that Ctrl-C in a terminal reaches the
    /// launcher only, which then stops each replica once.
    pub async fn start(
        mut command: Command,
        name: &str,
        servers: &str,
    ) -> Result<ReplicaProcess, BoxError> {
        let mut child = command
            .env(REPLICA_ENV, name)
            .env(SERVERS_ENV, servers)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot start replica {name}: {e}"))?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("stdout is piped");
        let mut lines = BufReader::new(stdout).lines();
        let url = tokio::time::timeout(START_TIMEOUT, async {
            while let Some(line) = lines.next_line().await? {
                // A test harness may print on the same line before it.
                if let Some(at) = line.find(LISTENING) {
                    return Ok(Some(line[at + LISTENING.len()..].trim().to_owned()));
                }
            }
            Ok::<_, std::io::Error>(None)
        })
        .await;
        let url = match url {
            Ok(Ok(Some(url))) => url,
            Ok(Ok(None)) => return Err(format!("replica {name} exited before it was ready").into()),
            Ok(Err(e)) => return Err(format!("reading replica {name}'s output: {e}").into()),
            Err(_) => {
                return Err(format!("replica {name} was not ready within {START_TIMEOUT:?}").into());
            }
        };
        // Keep reading, so that the replica never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok(ReplicaProcess {
            name: name.to_owned(),
            url,
            child,
            stdin,
        })
    }

    /// The replica's origin (its URL without the trailing `/`).
    pub fn origin(&self) -> &str {
        self.url.trim_end_matches('/')
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Tells the replica every replica's origin (pages reconnect to them).
    pub async fn set_peers(&mut self, origins: &[String]) -> Result<(), BoxError> {
        let stdin = self.stdin.as_mut().ok_or("the replica is stopping")?;
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

    /// Closes its stdin (the replica drains and exits) and waits up to `grace`; after that it
    /// is killed, and that is an error.
    pub async fn stop(mut self, grace: Duration) -> Result<ExitStatus, BoxError> {
        drop(self.stdin.take());
        match tokio::time::timeout(grace, self.child.wait()).await {
            Ok(status) => Ok(status?),
            Err(_) => {
                self.child.kill().await?;
                Err(format!(
                    "replica {} did not drain within {grace:?}; killed it",
                    self.name
                )
                .into())
            }
        }
    }
}
