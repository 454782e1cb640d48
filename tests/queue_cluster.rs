//! Two runtimes share one queue consumer of an R3 stream on a 3-node cluster.

mod common;

use common::{Job, Seen};
use nats_topology::testkit::NatsCluster;
use nats_topology::{Context, HandlerError, queue_consumer, stream};

#[stream(name = "E2E_R3_JOBS", subjects = ["e2e.r3.jobs.>"], replicas = 3)]
struct Jobs;

#[queue_consumer(stream = Jobs, group = "workers", subject = "e2e.r3.jobs.created", concurrency = 8)]
async fn on_job(job: Job, cx: Context) -> Result<(), HandlerError> {
    cx.state::<Seen>()
        .expect("state given to the builder")
        .record(job.id);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousand_jobs_each_handled_once_across_two_runtimes_on_r3() {
    let cluster = NatsCluster::start().await.expect("a 3-node cluster starts");
    common::two_runtimes_share_work(cluster.server_addrs(), "e2e.r3.jobs.created", 1_000).await;
}
