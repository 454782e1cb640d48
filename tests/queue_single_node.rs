//! Two runtimes share one queue consumer on a single JetStream server.

mod fixture;

use fixture::{Fixture, Job};
use nats_topology::{Context, HandlerError, queue_consumer, stream};

#[stream(name = "E2E_JOBS", subjects = ["e2e.jobs.>"])]
struct Jobs;

#[queue_consumer(stream = Jobs, group = "workers", subject = "e2e.jobs.created", concurrency = 8)]
async fn on_job(job: Job, cx: Context) -> Result<(), HandlerError> {
    fixture::record(job, &cx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousand_jobs_each_handled_once_across_two_runtimes() {
    let fx = Fixture::start().await;
    fixture::two_runtimes_share_work(&fx, "e2e.jobs.created", 1_000).await;
}
