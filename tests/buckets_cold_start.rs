//! Many replicas provisioning one fresh R3 key-value bucket at the same instant: every one is
//! ready, none retries past a first timeout (the CREATE-first path of streams, DESIGN.md §4).
//!
//! The parent test starts a 3-node cluster and re-runs this test binary as separate processes
//! (`provision_one_bucket` in child mode), all released at one instant.

mod fixture;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fixture::Fixture;
use nats_topology::model::BucketDecl;
use nats_topology::{Runtime, Topology};
use nats_topology_testkit::eventually;

/// Set in child processes: `<url>,<url>,...|<bucket name>|<start at, ms since the epoch>`.
const CHILD_ENV: &str = "NATS_TOPOLOGY_BUCKET_COLD_START_CHILD";
const RESULT: &str = "BUCKET_COLD_START_RESULT";
const PROCESSES: usize = 8;

fn topology(name: &'static str, replicas: u8) -> Topology {
    Topology::new().bucket(
        BucketDecl::kv(name)
            .history(5)
            .ttl(Duration::from_secs(3600))
            .replicas(replicas),
    )
}

fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis()
}

/// In a child process: provision at the given instant and print the outcome. Alone: provision
/// the bucket on a server of its own in one attempt, and find nothing to do the second time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provision_one_bucket() {
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
            Ok(report) => println!(
                "{RESULT} ok {ms} attempts={} timed_out={}",
                report.attempts, report.timed_out
            ),
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
    assert_eq!(report.attempts, 1, "one bucket, no retry needed");
    fixture::assert_nothing_to_do(&runtime).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_processes_cold_start_one_r3_bucket() {
    let fx = Fixture::cluster().await;
    let urls = fx.server.urls().join(",");
    let exe = std::env::current_exe().unwrap();
    for rep in 0..2 {
        let name = format!("COLD_BUCKET_{rep}");
        let start_at = now_ms() + 1_500;
        let children: Vec<_> = (0..PROCESSES)
            .map(|_| {
                Command::new(&exe)
                    .args([
                        "--exact",
                        "provision_one_bucket",
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
        eprintln!("repetition {}: {results:?}", rep + 1);
        let ok = results
            .iter()
            .filter(|l| l.contains(" ok ") && l.ends_with("(exit status: 0)"))
            .count();
        assert_eq!(ok, PROCESSES, "every process provisions: {results:#?}");
        // No process waited out more than one request timeout (a retry after a first timeout
        // would be the cliff this provisioning avoids).
        let retried: Vec<&String> = results
            .iter()
            .filter(|l| !l.contains("timed_out=0") && !l.contains("timed_out=1 "))
            .collect();
        assert!(
            retried.is_empty(),
            "no retry past a first timeout: {retried:#?}"
        );
        // The bucket is what the declaration says, on three replicas.
        let js = fx.jetstream().await;
        let stream = js.get_stream(format!("KV_{name}")).await.unwrap();
        let config = &stream.cached_info().config;
        assert_eq!(
            (config.num_replicas, config.max_messages_per_subject),
            (3, 5)
        );
        // Writable once its leader is elected (at once from 2.11.2; on 2.10 a write can find
        // no leader for a few hundred milliseconds after the create returned).
        let store = js.get_key_value(&name).await.unwrap();
        eventually(
            Duration::from_secs(10),
            "a write to the new bucket",
            || async { store.put("k", "v".into()).await.ok() },
        )
        .await;
    }
}
