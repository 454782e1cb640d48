//! Two runtimes share one queue consumer of an R3 stream on a 3-node cluster.

mod fixture;

use fixture::{Fixture, Job};
use nats_topology::{Context, HandlerError, queue_consumer, stream};

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
