//! Two runtimes share one queue consumer on a single JetStream server.

mod common;

use common::{Job, Seen};
use nats_topology::testkit::NatsServer;
use nats_topology::{Context, HandlerError, queue_consumer, stream};

#[stream(name = "E2E_JOBS", subjects = ["e2e.jobs.>"])]
struct Jobs;

#[queue_consumer(stream = Jobs, group = "workers", subject = "e2e.jobs.created", concurrency = 8)]
async fn on_job(job: Job, cx: Context) -> Result<(), HandlerError> {
    cx.state::<Seen>()
        .expect("state given to the builder")
        .record(job.id);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousand_jobs_each_handled_once_across_two_runtimes() {
    let server = NatsServer::start().await.expect("nats-server starts");
    let addr = server.url().parse().unwrap();
    common::two_runtimes_share_work(vec![addr], "e2e.jobs.created", 1_000).await;
}
