//! `run_until_signal` in a real process: the first SIGTERM drains (waiting for a handler that
//! is still running), a second one stops waiting at once.
//!
//! The parent test re-runs this test binary as the child process (`signal_child` in child
//! mode) and signals it by pid.

mod fixture;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use fixture::Fixture;
use nats_topology::model::{ConsumerDecl, QueueDecl, StreamDecl, StreamRef};
use nats_topology::{ConsumerState, HandlerError, Runtime, Topology};
use nats_topology_testkit::eventually;
use tokio::sync::Notify;

/// Set in the child process: the server URL.
const CHILD_ENV: &str = "NATS_TOPOLOGY_SIGNAL_CHILD";
static STUCK: StreamDecl = StreamDecl::new("SIGNAL_STUCK", &["signal.stuck.>"]);

/// A consumer whose handler announces itself on `started` and never finishes.
fn stuck_topology(started: Arc<Notify>) -> Topology {
    Topology::new().stream(STUCK).consumer(
        ConsumerDecl::queue(
            "signals::stuck",
            StreamRef::Declared(&STUCK),
            QueueDecl::new("stuck"),
        ),
        move |_| {
            started.notify_one();
            Box::pin(async {
                std::future::pending::<()>().await;
                Ok::<(), HandlerError>(())
            })
        },
    )
}

/// In the child process: run until signalled, printing each stage for the parent. Alone: a
/// drain waits for a stuck handler only as long as the grace period.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signal_child() {
    let started = Arc::new(Notify::new());
    if let Ok(url) = std::env::var(CHILD_ENV) {
        let client = async_nats::connect(url).await.expect("connect");
        let runtime = Runtime::builder(client)
            .topology(stuck_topology(started.clone()))
            .grace_period(Duration::from_secs(600))
            .build()
            .unwrap();
        let health = runtime.health();
        tokio::spawn(async move {
            started.notified().await;
            println!("STAGE handling");
            eventually(Duration::from_secs(600), "draining", || {
                let draining = health
                    .consumers()
                    .iter()
                    .any(|c| c.state == ConsumerState::Draining);
                async move { draining.then_some(()) }
            })
            .await;
            println!("STAGE draining");
        });
        let outcome = runtime.run_until_signal().await;
        println!("STAGE exited {outcome:?}");
        return;
    }
    let fx = Fixture::start().await;
    let runtime = fx
        .builder()
        .await
        .topology(stuck_topology(started.clone()))
        .grace_period(Duration::from_millis(300))
        .build()
        .unwrap();
    let health = runtime.health();
    let running = tokio::spawn(runtime.run_until(async move { started.notified().await }));
    fixture::wait_ready(&health, Duration::from_secs(20)).await;
    let js = fx.jetstream().await;
    js.publish("signal.stuck.one", "x".into())
        .await
        .unwrap()
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(20), running)
        .await
        .expect("the drain ends once the grace period passes")
        .unwrap()
        .expect("a clean return");
}

fn signal(pid: u32) {
    let status = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -TERM {pid}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_signal_drains_and_second_signal_forces_exit() {
    let fx = Fixture::start().await;
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "signal_child", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, fx.server.url())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the child");
    let pid = child.id();
    let (tx, mut stages) = tokio::sync::mpsc::unbounded_channel::<String>();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            // libtest prints "test <name> ... " before the test's own output.
            if let Some(at) = line.find("STAGE ") {
                let _ = tx.send(line[at + 6..].to_owned());
            }
        }
    });
    let mut next_stage = async || {
        tokio::time::timeout(Duration::from_secs(30), stages.recv())
            .await
            .expect("the child reports its next stage in time")
            .expect("the child is still running")
    };

    let js = fx.jetstream().await;
    eventually(Duration::from_secs(20), "the child's consumer", || {
        let js = js.clone();
        async move {
            js.get_stream(STUCK.name)
                .await
                .ok()?
                .consumer_info("stuck")
                .await
                .ok()
                .map(|_| ())
        }
    })
    .await;
    js.publish("signal.stuck.one", "x".into())
        .await
        .unwrap()
        .await
        .unwrap();
    assert_eq!(next_stage().await, "handling");

    signal(pid);
    assert_eq!(next_stage().await, "draining", "the first signal drains");

    // The handler never finishes and the grace period is 10 minutes: only the second signal
    // can end the drain now.
    signal(pid);
    let exited = next_stage().await;
    assert_eq!(exited, "exited Ok(())", "the second signal forces the exit");
    let status = tokio::task::spawn_blocking(move || child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "the child exits cleanly: {status}");
}
