//! Confirmed acks (`ack = "confirmed"`): a message counts as handled only once the server has
//! confirmed its ack, so a runtime killed with SIGKILL never sees a confirmed message again,
//! the handled count always matches the server's ack floor, and a drain returns only after
//! every confirmation.
//!
//! The kill test re-runs this test binary as the child process (`killed_child` in child mode),
//! which prints each handled stream sequence and its confirmed count; the parent kills it by
//! pid, then runs the same consumer itself.

mod fixture;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use fixture::{Fixture, Ledger, Running, consumer_info, fast, publish_jobs};
use nats_topology::model::{AckMode, ConsumerDecl, QueueDecl, StreamDecl, StreamRef};
use nats_topology::{ConsumerState, HandlerError, Health, Runtime, Topology};
use nats_topology_testkit::eventually;

/// Set in the child process: the server URL.
const CHILD_ENV: &str = "NATS_TOPOLOGY_CONFIRMED_ACKS_CHILD";

static KILLED: StreamDecl = StreamDecl::new("ACKS_KILLED", &["acks.killed.>"]);
const KILLED_SUBJECT: &str = "acks.killed.jobs";

/// The consumer the child and then the parent run, eight messages at a time, with a short
/// `ack_wait` so that what the child left unconfirmed comes back quickly.
fn killed_decl() -> ConsumerDecl {
    ConsumerDecl::queue(
        "confirmed_acks::killed",
        StreamRef::Declared(&KILLED),
        QueueDecl::new("killed")
            .ack_wait(Duration::from_secs(2))
            .ack(AckMode::Confirmed),
    )
    .subjects(&[KILLED_SUBJECT])
    .concurrency(8)
}

/// A handler recording each stream sequence it handled.
fn sequence_topology(record: impl Fn(u64) + Send + Sync + 'static) -> Topology {
    Topology::new()
        .stream(KILLED)
        .consumer(killed_decl(), move |incoming| {
            record(incoming.context().stream_sequence());
            Box::pin(async { Ok::<(), HandlerError>(()) })
        })
}

/// In the child process: runs the consumer, printing the handled count so far (confirmed
/// acks), `CONFIRMED <n>`, and `HANDLED <sequence>` as each handler runs, until killed.
/// Alone: while a confirmed-ack runtime runs, its handled count is what the server has
/// recorded at that very moment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_child() {
    if let Ok(url) = std::env::var(CHILD_ENV) {
        let client = async_nats::connect(url).await.expect("connect");
        // The confirmed count is read as each handler runs: messages keep arriving until the
        // kill, so the last count printed is at most a handler's time behind.
        let health: Arc<OnceLock<Health>> = Arc::default();
        let reporter = health.clone();
        let runtime = fast(Runtime::builder(client))
            .topology(sequence_topology(move |sequence| {
                if let Some(health) = reporter.get() {
                    println!("CONFIRMED {}", health.consumers()[0].handled);
                }
                println!("HANDLED {sequence}");
            }))
            .build()
            .expect("a valid topology");
        let _ = health.set(runtime.health());
        let _ = runtime.run_until(std::future::pending::<()>()).await;
        return;
    }

    let fx = Fixture::start().await;
    let running =
        Running::start(fast(fx.builder().await).topology(sequence_topology(|_| {}))).await;
    let js = fx.jetstream().await;
    publish_jobs(&js, KILLED_SUBJECT, 0..200).await;
    eventually(Duration::from_secs(30), "200 messages handled", || {
        let handled = running.health.consumers()[0].handled;
        async move { (handled >= 200).then_some(()) }
    })
    .await;
    // Read once, at once: no waiting for the server to catch up.
    let info = consumer_info(&js, KILLED.name, "killed").await.unwrap();
    assert_eq!(
        info.ack_floor.stream_sequence, 200,
        "every message counted as handled is acknowledged on the server"
    );
    assert_eq!(info.num_ack_pending, 0);
    running.stop().await.expect("a clean drain");
}

/// What the child printed.
#[derive(Default)]
struct ChildReport {
    /// Stream sequences in the order their handlers returned.
    handled: Vec<u64>,
    /// The last confirmed count printed.
    confirmed: u64,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_never_redelivers_a_confirmed_message() {
    const MESSAGES: u64 = 5000;
    const KILL_AFTER: u64 = 300;
    let fx = Fixture::start().await;
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "killed_child", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, fx.server.url())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the child");
    let pid = child.id();
    let report = Arc::new(Mutex::new(ChildReport::default()));
    let stdout = child.stdout.take().unwrap();
    let reader = {
        let report = report.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let mut report = report.lock().unwrap();
                // libtest prints "test <name> ... " before the test's own output.
                if let Some(at) = line.find("HANDLED ") {
                    report.handled.push(line[at + 8..].trim().parse().unwrap());
                } else if let Some(at) = line.find("CONFIRMED ") {
                    report.confirmed = line[at + 10..].trim().parse().unwrap();
                }
            }
        })
    };

    let js = fx.jetstream().await;
    eventually(Duration::from_secs(20), "the child's consumer", || {
        let js = js.clone();
        async move { consumer_info(&js, KILLED.name, "killed").await.map(|_| ()) }
    })
    .await;
    publish_jobs(&js, KILLED_SUBJECT, 0..MESSAGES).await;
    // Killed right after a handler returns: the acks of the last messages are on their way.
    eventually(
        Duration::from_secs(60),
        "the child to handle some messages and confirm some acks",
        || {
            let report = report.lock().unwrap();
            let ready = report.handled.len() as u64 >= KILL_AFTER && report.confirmed > 0;
            async move { ready.then_some(()) }
        },
    )
    .await;
    let status = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -KILL {pid}");
    let status = tokio::task::spawn_blocking(move || child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(!status.success(), "the child was killed: {status}");
    reader.join().unwrap();

    // Which messages were confirmed is not printed, only how many: at most the others (handled
    // by the child, not counted as confirmed when it died) may come back.
    let (child_handled, confirmed) = {
        let report = report.lock().unwrap();
        let handled: BTreeSet<u64> = report.handled.iter().copied().collect();
        assert_eq!(
            handled.len(),
            report.handled.len(),
            "the child handled each message once"
        );
        (handled, report.confirmed)
    };
    assert!(confirmed <= child_handled.len() as u64);
    assert!(
        (child_handled.len() as u64) < MESSAGES,
        "the child was killed while messages were still flowing"
    );

    // The same consumer, run here: it handles what the child left, including whatever the
    // child handled without a confirmation (redelivered after ack_wait).
    let again = Ledger::default();
    let recorder = again.clone();
    let running = Running::start(
        fast(fx.builder().await).topology(sequence_topology(move |s| recorder.record(s))),
    )
    .await;
    let all: BTreeSet<u64> = (1..=MESSAGES).collect();
    eventually(Duration::from_secs(60), "every message handled", || {
        let seen: BTreeSet<u64> = child_handled.union(&again.unique()).copied().collect();
        let done = seen == all;
        async move { done.then_some(()) }
    })
    .await;
    running.stop().await.expect("a clean drain");

    let handled_again: BTreeSet<u64> = again.unique();
    assert_eq!(
        again.len(),
        handled_again.len(),
        "each message handled once after the kill: {:?}",
        again.duplicates()
    );
    let unconfirmed = child_handled.len() as u64 - confirmed;
    let back: Vec<u64> = handled_again
        .intersection(&child_handled)
        .copied()
        .collect();
    eprintln!(
        "the child handled {} messages, {confirmed} confirmed, then was killed; {} handled after it, {} of them handled by the child already: {back:?}",
        child_handled.len(),
        handled_again.len(),
        back.len(),
    );
    assert!(
        back.len() as u64 <= unconfirmed,
        "{} messages the child handled came back, but only {unconfirmed} were handled without a confirmation: a confirmed message was handled again ({back:?})",
        back.len()
    );
}

static DRAINED: StreamDecl = StreamDecl::new("ACKS_DRAINED", &["acks.drained.>"]);

fn drained_decl(concurrency: u32) -> ConsumerDecl {
    ConsumerDecl::queue(
        "confirmed_acks::drained",
        StreamRef::Declared(&DRAINED),
        QueueDecl::new("drained").ack(AckMode::Confirmed),
    )
    .subjects(&["acks.drained.jobs"])
    .concurrency(concurrency)
}

/// After `run_until` returns, the server has recorded every ack the drain waited for: the
/// ack floor is the handled count, and nothing is pending acknowledgement. Read once, at once.
async fn assert_recorded(fx: &Fixture, health: &nats_topology::Health, expected: u64) {
    let js = fx.jetstream().await;
    let info = consumer_info(&js, DRAINED.name, "drained").await.unwrap();
    let handled = health.consumers()[0].handled;
    assert_eq!(
        handled, expected,
        "every handler that ran counted as handled"
    );
    assert_eq!(
        info.ack_floor.stream_sequence, handled,
        "the server's ack floor is the handled count when the drain returns"
    );
    assert_eq!(info.num_ack_pending, 0, "nothing awaits acknowledgement");
    assert_eq!(info.num_pending, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_waits_for_confirmations_of_running_handlers() {
    let fx = Fixture::start().await;
    let started = Ledger::default();
    // Handlers wait for the test: they finish only once the drain has begun.
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let (starts, ledger, handler_gate) = (started.clone(), fx.ledger.clone(), gate.clone());
    let topology = Topology::new()
        .stream(DRAINED)
        .consumer(drained_decl(4), move |incoming| {
            let (starts, ledger, gate) = (starts.clone(), ledger.clone(), handler_gate.clone());
            Box::pin(async move {
                let id = fixture::job_id(&incoming)?;
                starts.record(id);
                gate.acquire().await.expect("the gate stays open").forget();
                ledger.record(id);
                Ok(())
            })
        });
    let running = fx.run(topology).await;
    let health = running.health.clone();
    let js = fx.jetstream().await;
    publish_jobs(&js, "acks.drained.jobs", 0..4).await;
    started
        .wait_len(4, Duration::from_secs(20), "four handlers started")
        .await;
    let stopping = tokio::spawn(running.stop());
    eventually(Duration::from_secs(20), "the drain to begin", || {
        let draining = health.consumers()[0].state == ConsumerState::Draining;
        async move { draining.then_some(()) }
    })
    .await;
    gate.add_permits(4);
    stopping.await.unwrap().expect("a clean drain");
    assert_recorded(&fx, &health, 4).await;
    fx.ledger.assert_handled_once(4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_right_after_the_last_handler_returns_waits_for_its_confirmation() {
    let fx = Fixture::start().await;
    let topology =
        fixture::job_topology(DRAINED, drained_decl(8), fx.ledger.clone(), Duration::ZERO);
    let running = fx.run(topology).await;
    let health = running.health.clone();
    let js = fx.jetstream().await;
    publish_jobs(&js, "acks.drained.jobs", 0..500).await;
    fx.ledger
        .wait_len(500, Duration::from_secs(30), "every handler returned")
        .await;
    running.stop().await.expect("a clean drain");
    assert_recorded(&fx, &health, 500).await;
    fx.ledger.assert_handled_once(500);
}
