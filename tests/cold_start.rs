//! Many replicas provisioning one fresh R3 stream at the same instant: every one succeeds.
//!
//! The parent test starts a 3-node cluster and re-runs this test binary as separate processes
//! (`provision_one_stream_and_two_consumers` in child mode), all released at one instant.

mod fixture;

use fixture::Fixture;
use fixture::children::{now_ms, provision_at, ready, run_children};
use nats_topology::model::{ConsumerDecl, QueueDecl, StreamDecl, StreamRef};
use nats_topology::{HandlerError, Topology};

/// Set in child processes: `<url>,<url>,...|<stream name>|<start at, ms since the epoch>`.
const CHILD_ENV: &str = "NATS_TOPOLOGY_COLD_START_CHILD";
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

/// In a child process: provision at the given instant and print the outcome. Alone: provision
/// one stream and two consumers on a server of its own, and check that a second provisioning
/// finds nothing to do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provision_one_stream_and_two_consumers() {
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
    for rep in 0..3 {
        let name = format!("COLD_START_{rep}");
        let start_at = now_ms() + 1_500;
        let spec = format!("{urls}|{name}|{start_at}");
        let results = run_children(
            "provision_one_stream_and_two_consumers",
            CHILD_ENV,
            &spec,
            PROCESSES,
        )
        .await;
        let ok = ready(&results);
        eprintln!(
            "repetition {}: {ok}/{PROCESSES} ready: {results:?}",
            rep + 1
        );
        assert_eq!(ok, PROCESSES, "every process provisions: {results:#?}");
    }
}
