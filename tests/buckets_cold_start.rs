//! Many replicas provisioning one fresh R3 key-value bucket at the same instant: every one is
//! ready, none retries past a first timeout (the CREATE-first path of streams, docs/PERFORMANCE.md "Why CREATE first").
//!
//! The parent test starts a 3-node cluster and re-runs this test binary as separate processes
//! (`provision_one_bucket` in child mode), all released at one instant.

mod fixture;

use std::time::Duration;

use fixture::Fixture;
use fixture::children::{assert_all_ready_within_one_timeout, now_ms, provision_at, run_children};
use nats_topology::Topology;
use nats_topology::model::BucketDecl;
use nats_topology_testkit::eventually;

/// Set in child processes: `<url>,<url>,...|<bucket name>|<start at, ms since the epoch>`.
const CHILD_ENV: &str = "NATS_TOPOLOGY_BUCKET_COLD_START_CHILD";
const PROCESSES: usize = 8;

fn topology(name: &'static str, replicas: u8) -> Topology {
    Topology::new().bucket(
        BucketDecl::kv(name)
            .history(5)
            .ttl(Duration::from_secs(3600))
            .replicas(replicas),
    )
}

/// In a child process: provision at the given instant and print the outcome. Alone: provision
/// the bucket on a server of its own in one attempt, and find nothing to do the second time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provision_one_bucket() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        let mut parts = spec.split('|');
        let urls = parts.next().unwrap();
        let name: &'static str = parts.next().unwrap().to_owned().leak();
        let start_at: u128 = parts.next().unwrap().parse().unwrap();
        provision_at(urls, start_at, topology(name, 3)).await;
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
    for rep in 0..2 {
        let name = format!("COLD_BUCKET_{rep}");
        let start_at = now_ms() + 1_500;
        let spec = format!("{urls}|{name}|{start_at}");
        let results = run_children("provision_one_bucket", CHILD_ENV, &spec, PROCESSES).await;
        eprintln!("repetition {}: {results:?}", rep + 1);
        assert_all_ready_within_one_timeout(&results, PROCESSES);
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
