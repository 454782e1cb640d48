//! An application written as the README's headline code (macros, `connect_from_env`,
//! `Runtime::builder(client).build()`, `run_until_signal`) is stopped the way Kubernetes,
//! systemd and Docker stop a process: SIGTERM while its handlers hold messages. It drains (the
//! handlers finish and their acks land), exits 0, and nothing is delivered twice: the next
//! instance takes the rest, each message once.
//!
//! The parent test re-runs this test binary as the application (`readme_app` in child mode)
//! and signals it by pid.

mod fixture;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use fixture::{Fixture, Running};
use nats_topology::{Context, HandlerError, Runtime, queue_consumer, stream};
use nats_topology_testkit::eventually;

/// Set in the child process: the application runs.
const CHILD_ENV: &str = "NATS_TOPOLOGY_README_APP";

#[stream(name = "README_SHUTDOWN", subjects = ["readme.shutdown.>"])]
struct ReadmeShutdown;

#[derive(serde::Deserialize)]
struct Job {
    id: u64,
}

/// Work that takes a while (simulated work, not synchronisation), so that SIGTERM finds
/// handlers running.
#[queue_consumer(
    stream = ReadmeShutdown,
    group = "work",
    subject = "readme.shutdown.jobs",
    concurrency = 4
)]
async fn on_job(job: Job, cx: Context) -> Result<(), HandlerError> {
    println!("START {} {}", job.id, cx.delivered());
    tokio::time::sleep(Duration::from_millis(400)).await;
    println!("DONE {}", job.id);
    Ok(())
}

/// In the child process: the README's application, until SIGTERM.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readme_app() {
    if std::env::var(CHILD_ENV).is_err() {
        return; // Run as a test on its own, it is only the child of the test below.
    }
    let client = nats_topology::connect_from_env().await.expect("connect");
    let runtime = Runtime::builder(client).build().expect("a valid topology");
    let outcome = runtime.run_until_signal().await;
    println!("EXITED {outcome:?}");
    outcome.expect("a clean drain");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_the_readme_app_and_nothing_is_delivered_twice() {
    let fx = Fixture::start().await;
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "readme_app", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, "1")
        .env("NATS_URL", fx.server.url())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the application");
    let pid = child.id();
    let (tx, mut lines) = tokio::sync::mpsc::unbounded_channel::<String>();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            // libtest prints "test <name> ... " before the test's own output.
            for word in ["START ", "DONE ", "EXITED "] {
                if let Some(at) = line.find(word) {
                    let _ = tx.send(line[at..].to_owned());
                }
            }
        }
    });

    let js = fx.jetstream().await;
    eventually(
        Duration::from_secs(20),
        "the application's consumer",
        || {
            let js = js.clone();
            async move {
                let stream = js.get_stream("README_SHUTDOWN").await.ok()?;
                stream.consumer_info("work").await.ok().map(|_| ())
            }
        },
    )
    .await;
    let jobs = 12u64;
    fixture::publish_jobs(&js, "readme.shutdown.jobs", 1..=jobs).await;

    // SIGTERM once handlers hold messages.
    let mut seen = Vec::new();
    while !seen.iter().any(|l: &String| l.starts_with("START ")) {
        let line = tokio::time::timeout(Duration::from_secs(20), lines.recv())
            .await
            .expect("a handler starts")
            .expect("the application runs");
        seen.push(line);
    }
    let status = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -TERM {pid}");
    let status = tokio::task::spawn_blocking(move || child.wait())
        .await
        .unwrap()
        .unwrap();
    while let Ok(line) = lines.try_recv() {
        seen.push(line);
    }
    // The reader thread may still hold the last lines: wait for the exit line.
    while !seen.iter().any(|l| l.starts_with("EXITED ")) {
        match tokio::time::timeout(Duration::from_secs(5), lines.recv()).await {
            Ok(Some(line)) => seen.push(line),
            _ => break,
        }
    }
    assert!(
        status.success(),
        "exits 0 after the drain: {status}; {seen:?}"
    );
    assert!(seen.contains(&"EXITED Ok(())".to_owned()), "{seen:?}");

    let ids = |word: &str| -> BTreeSet<u64> {
        seen.iter()
            .filter_map(|l| l.strip_prefix(word))
            .filter_map(|rest| rest.split_whitespace().next()?.parse().ok())
            .collect()
    };
    let (started, done) = (ids("START "), ids("DONE "));
    assert!(!started.is_empty());
    assert_eq!(
        started, done,
        "every handler running at SIGTERM finished: {seen:?}"
    );
    let info = fixture::consumer_info(&js, "README_SHUTDOWN", "work")
        .await
        .expect("the consumer");
    assert_eq!(info.num_ack_pending, 0, "every ack landed: {info:?}");
    assert_eq!(info.num_redelivered, 0, "{info:?}");
    assert_eq!(
        info.ack_floor.stream_sequence,
        started.len() as u64,
        "what was handled is acknowledged, and nothing else was taken: {info:?}"
    );

    // The next instance (the same application) takes the rest: each message delivered once.
    let runtime = fixture::fast(Runtime::builder(fx.connect().await))
        .build()
        .expect("a valid topology");
    let running = Running::spawn(runtime);
    let info = eventually(Duration::from_secs(30), "the rest handled", || {
        let js = js.clone();
        async move {
            let info = fixture::consumer_info(&js, "README_SHUTDOWN", "work").await?;
            (info.ack_floor.stream_sequence == jobs).then_some(info)
        }
    })
    .await;
    running.stop().await.expect("clean drain");
    assert_eq!(info.num_redelivered, 0, "nothing delivered twice: {info:?}");
    assert_eq!(
        info.delivered.consumer_sequence, jobs,
        "one delivery per message: {info:?}"
    );
}
