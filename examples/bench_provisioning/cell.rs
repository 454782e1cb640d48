//! One cell: N child processes started, released at one instant, their outcomes collected.

use std::process::Stdio;
use std::time::Duration;

use nats_topology::model::Storage;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::time::Instant;

use crate::report::Outcome;
use crate::shape::Shape;
use crate::trace::child_log;
use crate::{BoxError, READY_TIMEOUT, START_MARGIN, Variant, epoch_ms, policy, storage_name};

pub(crate) struct Cell<'a> {
    /// Leader-kill with `--trace`: the children write `<trace>.child<i>.log`.
    pub(crate) trace: Option<std::path::PathBuf>,
    pub(crate) urls: &'a [String],
    pub(crate) shape: &'a Shape,
    pub(crate) prefix: &'a str,
    pub(crate) variant: Variant,
    pub(crate) retry: bool,
    pub(crate) storage: Storage,
    pub(crate) n: usize,
}

pub(crate) struct Proc {
    pub(crate) child: Child,
    pub(crate) stdin: Option<ChildStdin>,
    pub(crate) lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    pub(crate) stderr: tokio::task::JoinHandle<String>,
}

impl Cell<'_> {
    /// Starts N children, waits until each is connected, releases them at one instant and
    /// collects their outcomes.
    /// `started` (leader-kill) receives the start instant, ms since the epoch.
    pub(crate) async fn run(
        &self,
        started: Option<tokio::sync::watch::Sender<Option<f64>>>,
    ) -> Result<Vec<Outcome>, BoxError> {
        let exe = std::env::current_exe()?;
        let mut procs = Vec::with_capacity(self.n);
        for i in 0..self.n {
            let mut command = Command::new(&exe);
            command.arg("--child");
            if let Some(base) = &self.trace {
                command.arg("--trace").arg(child_log(base, i));
            }
            let mut child = command
                .args(["--urls", &self.urls.join(",")])
                .args(["--stream", self.shape.stream.name])
                .args(["--prefix", self.prefix])
                .args(["--variant", self.variant.name()])
                .args(["--retry", if self.retry { "on" } else { "off" }])
                .args(["--storage", storage_name(self.storage)])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .kill_on_drop(true)
                .spawn()?;
            let stdin = child.stdin.take();
            let lines = BufReader::new(child.stdout.take().expect("piped")).lines();
            let mut err = child.stderr.take().expect("piped");
            let stderr = tokio::spawn(async move {
                let mut text = String::new();
                let _ = tokio::io::AsyncReadExt::read_to_string(&mut err, &mut text).await;
                text
            });
            procs.push(Proc {
                child,
                stdin,
                lines,
                stderr,
            });
        }

        // Barrier: every child connected (or failed to).
        let mut early: Vec<Option<Outcome>> = vec![None; self.n];
        for (i, proc) in procs.iter_mut().enumerate() {
            match tokio::time::timeout(READY_TIMEOUT, proc.lines.next_line()).await {
                Ok(Ok(Some(line))) if line == "ready" => {}
                Ok(Ok(Some(line))) => early[i] = Some(Outcome::parse(&line)),
                Ok(Ok(None)) | Ok(Err(_)) => {
                    early[i] = Some(Outcome::failed("exited before ready".into()))
                }
                Err(_) => early[i] = Some(Outcome::failed("not ready within 30 s".into())),
            }
        }
        let start = epoch_ms() + START_MARGIN.as_secs_f64() * 1000.0;
        let start_line = format!("{start:.3}\n");
        if let Some(started) = started {
            let _ = started.send(Some(start));
        }
        for proc in procs.iter_mut() {
            if let Some(stdin) = proc.stdin.as_mut() {
                let _ = stdin.write_all(start_line.as_bytes()).await;
                let _ = stdin.flush().await;
            }
        }

        // Collect, killing stragglers by pid. A process cannot legitimately run past the
        // retry deadline of its two steps plus a request timeout each.
        let policy = policy(self.retry);
        let limit = START_MARGIN
            + 2 * (policy.deadline + policy.cap + 2 * policy.request_timeout)
            + Duration::from_secs(10);
        let collect_until = Instant::now() + limit;
        let mut outcomes = Vec::with_capacity(self.n);
        for (i, mut proc) in procs.into_iter().enumerate() {
            let outcome = match early[i].take() {
                Some(outcome) => outcome,
                None => {
                    match tokio::time::timeout_at(collect_until, proc.lines.next_line()).await {
                        Ok(Ok(Some(line))) => Outcome::parse(&line),
                        Ok(Ok(None)) | Ok(Err(_)) => {
                            Outcome::failed("exited without a result".into())
                        }
                        Err(_) => Outcome {
                            // Killed after the limit: certainly longer than a timeout.
                            ms: limit.as_secs_f64() * 1000.0,
                            ..Outcome::failed(format!("no result within {limit:?}; killed"))
                        },
                    }
                }
            };
            if tokio::time::timeout(Duration::from_secs(5), proc.child.wait())
                .await
                .is_err()
            {
                // `Child::kill` sends SIGKILL to this child's pid and reaps it.
                let _ = proc.child.kill().await;
            }
            let stderr = proc.stderr.await.unwrap_or_default();
            let outcome = match (&outcome.error, stderr.trim()) {
                (Some(e), s) if !s.is_empty() && !outcome.ok => Outcome {
                    error: Some(format!("{e}; stderr: {s}")),
                    ..outcome
                },
                _ => outcome,
            };
            outcomes.push(outcome);
        }
        Ok(outcomes)
    }
}
