//! Queue consumers of an R3 stream on a 3-node cluster: two runtimes share one, and one
//! deleted behind a runtime's back comes back in a single new session.

mod fixture;

use std::time::Duration;

use fixture::{Fixture, Job, Ledger, Running};
use nats_topology::model::{QueueDecl, Retention};
use nats_topology::{Context, HandlerError, queue_consumer, stream};
use nats_topology_testkit::eventually;

#[stream(name = "E2E_R3_JOBS", subjects = ["e2e.r3.jobs.>"], replicas = 3)]
struct Jobs;

#[queue_consumer(stream = Jobs, group = "workers", subject = "e2e.r3.jobs.created", concurrency = 8)]
async fn on_job(job: Job, cx: Context) -> Result<(), HandlerError> {
    fixture::record(job, &cx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousand_jobs_each_handled_once_across_two_runtimes_on_r3() {
    let fx = Fixture::cluster().await;
    fixture::two_runtimes_share_work(&fx, "e2e.r3.jobs.created", 1_000).await;
}

/// An R3 queue consumer deleted out of band is created again by both runtimes that share it,
/// at about the same moment. The one whose create finds the other's consumer is answered
/// before that consumer's leader is known everywhere, and its first pull requests are
/// refused; they are asked again within the same session: each runtime restarts once, not
/// once per refusal, and every job is handled once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r3_consumer_deleted_out_of_band_comes_back_in_one_session() {
    let fx = Fixture::cluster().await;
    let stream = fixture::stream("R3_REDO", &["r3redo.>"])
        .replicas(3)
        .retention(Retention::WorkQueue);
    let consumer = fixture::queue(
        "tests::r3redo",
        &stream,
        "r3redo.jobs",
        QueueDecl::new("redo"),
    );
    let ledgers = [Ledger::default(), Ledger::default()];
    let mut runs = Vec::new();
    for ledger in &ledgers {
        let topology = fixture::job_topology(stream, consumer, ledger.clone(), Duration::ZERO);
        runs.push(Running::start(fixture::fast(fx.builder().await).topology(topology)).await);
    }
    let js = fx.jetstream().await;
    let handled = |ids: std::ops::Range<u64>| {
        let all = fixture::union(&ledgers);
        ids.into_iter().all(|id| all.contains(&id))
    };
    fixture::publish_jobs(&js, "r3redo.jobs", 0..20).await;
    eventually(Duration::from_secs(20), "the first jobs handled", || {
        let done = handled(0..20);
        async move { done.then_some(()) }
    })
    .await;

    fixture::delete_consumer(&js, "R3_REDO", "redo").await;
    eventually(
        Duration::from_secs(30),
        "both runtimes lost the consumer and run again",
        || {
            let back = runs
                .iter()
                .all(|r| r.health.consumers()[0].restarts >= 1 && r.health.ready());
            async move { back.then_some(()) }
        },
    )
    .await;
    fixture::publish_jobs(&js, "r3redo.jobs", 20..60).await;
    eventually(Duration::from_secs(20), "the later jobs handled", || {
        let done = handled(20..60);
        async move { done.then_some(()) }
    })
    .await;
    // One loss each, one new session each.
    fixture::assert_restarts(&runs, 1);
    for outcome in Running::stop_all(runs).await {
        outcome.expect("a clean drain");
    }
    fixture::assert_each_handled_once(&ledgers, 60);
}
