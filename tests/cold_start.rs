//! Many replicas provisioning one fresh R3 stream at the same instant: every one succeeds.
//!
//! The parent test starts a 3-node cluster and re-runs this test binary as separate processes
//! (`provision_one_stream_and_two_consumers` in child mode), all released at one instant.

mod fixture;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fixture::Fixture;
use nats_topology::model::{ConsumerDecl, QueueDecl, StreamDecl, StreamRef};
use nats_topology::{HandlerError, Runtime, Topology};

/// Set in child processes: `<url>,<url>,...|<stream name>|<start at, ms since the epoch>`.
const CHILD_ENV: &str = "NATS_TOPOLOGY_COLD_START_CHILD";
const RESULT: &str = "COLD_START_RESULT";
const PROCESSES: usize = 8;

fn topology(name: &'static str, replicas: u8) -> Topology {
    let subjects: &'static [&'static str] =
        vec![&*format!("{}.>", name.to_lowercase()).leak()].leak();
    let filter = |suffix: &str| -> &'static [&'static str] {
        vec![&*format!("{}.{suffix}", name.to_lowercase()).leak()].leak()
    };
    let stream: &'static StreamDecl =
        Box::leak(Box::new(StreamDecl::new(name, subjects).replicas(replicas)));
    let noop =
        |_| -> nats_topology::HandlerFuture { Box::pin(async { Ok::<(), HandlerError>(()) }) };
    Topology::new()
        .stream(*stream)
        .consumer(
            ConsumerDecl::queue(
                "cold::a",
                StreamRef::Declared(stream),
                QueueDecl::new("worker_a"),
            )
            .subjects(filter("a")),
            noop,
        )
        .consumer(
            ConsumerDecl::queue(
                "cold::b",
                StreamRef::Declared(stream),
                QueueDecl::new("worker_b"),
            )
            .subjects(filter("b")),
            noop,
        )
}

fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis()
}

/// In a child process: provision at the given instant and print the outcome. Alone: provision
/// one stream and two consumers on a server of its own, and check that a second provisioning
/// finds nothing to do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provision_one_stream_and_two_consumers() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        let mut parts = spec.split('|');
        let urls: Vec<async_nats::ServerAddr> = parts
            .next()
            .unwrap()
            .split(',')
            .map(|u| u.parse().unwrap())
            .collect();
        let name: &'static str = parts.next().unwrap().to_owned().leak();
        let start_at: u128 = parts.next().unwrap().parse().unwrap();
        let client = async_nats::connect(urls).await.expect("connect");
        let runtime = Runtime::builder(client)
            .topology(topology(name, 3))
            .build()
            .unwrap();
        let wait = start_at.saturating_sub(now_ms());
        tokio::time::sleep(Duration::from_millis(wait as u64)).await; // the common start instant
        let started = std::time::Instant::now();
        let outcome = runtime.provision().await;
        let ms = started.elapsed().as_millis();
        match &outcome {
            Ok(report) => println!("{RESULT} ok {ms} {}", report.attempts),
            Err(e) => println!("{RESULT} err {ms} {} {e}", e.attempts()),
        }
        outcome.expect("provisioning succeeds");
        return;
    }
    let fx = Fixture::start().await;
    let runtime = fx
        .builder()
        .await
        .topology(topology("COLD_ALONE", 1))
        .build()
        .unwrap();
    let report = runtime.provision().await.expect("provisioning succeeds");
    assert_eq!(
        report.attempts, 3,
        "one stream and two consumers, no retry needed"
    );
    fixture::assert_nothing_to_do(&runtime).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_processes_cold_start_one_r3_stream_three_times() {
    let fx = Fixture::cluster().await;
    let urls = fx.server.urls().join(",");
    let exe = std::env::current_exe().unwrap();
    for rep in 0..3 {
        let name = format!("COLD_START_{rep}");
        let start_at = now_ms() + 1_500;
        let children: Vec<_> = (0..PROCESSES)
            .map(|_| {
                Command::new(&exe)
                    .args([
                        "--exact",
                        "provision_one_stream_and_two_consumers",
                        "--nocapture",
                        "--test-threads=1",
                    ])
                    .env(CHILD_ENV, format!("{urls}|{name}|{start_at}"))
                    .stdout(Stdio::piped())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("spawn a child process")
            })
            .collect();
        let results: Vec<String> = tokio::task::spawn_blocking(move || {
            children
                .into_iter()
                .map(|mut child| {
                    let stdout = child.stdout.take().unwrap();
                    // Read to the end, so the child never writes into a closed pipe.
                    let lines: Vec<String> = BufReader::new(stdout)
                        .lines()
                        .map_while(Result::ok)
                        .collect();
                    let status = child.wait().expect("wait for a child");
                    // libtest prints "test <name> ... " before the test's own output.
                    let line = lines
                        .iter()
                        .find_map(|l| l.find(RESULT).map(|at| l[at..].to_owned()))
                        .unwrap_or_else(|| format!("{RESULT} no result"));
                    format!("{line} ({status})")
                })
                .collect()
        })
        .await
        .unwrap();
        let ok = results
            .iter()
            .filter(|l| l.contains(" ok ") && l.ends_with("(exit status: 0)"))
            .count();
        eprintln!(
            "repetition {}: {ok}/{PROCESSES} ready: {results:?}",
            rep + 1
        );
        assert_eq!(ok, PROCESSES, "every process provisions: {results:#?}");
    }
}
