//! Once a migration is done, a later new instance does not drain the old consumer again.
//!
//! The old consumer `v1` holds ten messages whose acks were lost (an instance that is gone,
//! or acks sent into a partition): the first new instance waits the old consumer's `ack_wait`
//! for them, then creates `v2` at the old ack floor + 1, which delivers them again. A second
//! new instance, started after that while an old instance still pulls from the paused `v1`
//! (so that it is not retired yet), finds `v2` and is ready without waiting the `ack_wait`
//! again; every job is handled once across the two.

mod fixture;

use std::time::Duration;

use fixture::{Fixture, Running, fast, job_topology, publish_jobs, queue, stream};
use futures::StreamExt;
use nats_topology::Runtime;
use nats_topology::model::QueueDecl;
use nats_topology::model::StreamDecl;
use nats_topology_testkit::NatsServer;
use tokio::time::Instant;

const ACK_WAIT: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_instance_after_the_migration_does_not_wait_for_the_old_consumers_lost_acks() {
    let fx = Fixture::start().await;
    let decl = stream("MIGDONE", &["migdone.>"]);
    let runtime = |new: bool| runtime(&fx, decl, new);
    // The old version's stream and consumer.
    runtime(false)
        .await
        .provision()
        .await
        .expect("the old version provisions");
    let js = fx.jetstream().await;
    publish_jobs(&js, "migdone.work", 1..=10).await;

    // An old instance takes them all and its acks never arrive.
    let v1: async_nats::jetstream::consumer::PullConsumer = js
        .get_stream("MIGDONE")
        .await
        .expect("the stream")
        .get_consumer("v1")
        .await
        .expect("v1");
    let mut held = v1
        .fetch()
        .max_messages(10)
        .messages()
        .await
        .expect("fetched");
    let mut lost = 0;
    while let Some(message) = held.next().await {
        message.expect("a message");
        lost += 1;
    }
    assert_eq!(lost, 10);
    // And an old instance still pulls (a request waiting), so the old consumer is not retired
    // while the second new instance starts.
    let mut waiting = v1
        .batch()
        .max_messages(1)
        .expires(Duration::from_secs(120))
        .messages()
        .await
        .expect("a waiting pull request");
    let old_instance = tokio::spawn(async move { waiting.next().await.is_some() });

    let first = Instant::now();
    let new_a = Running::spawn(runtime(true).await);
    new_a.ready(ACK_WAIT * 3).await;
    let first_ready = first.elapsed();

    let second = Instant::now();
    let new_b = Running::spawn(runtime(true).await);
    // Well within the old consumer's ack_wait: nothing is drained again.
    new_b.ready(ACK_WAIT / 2).await;
    println!(
        "first new instance ready after {first_ready:?} (it waited for the lost acks), the \
         second after {:?}",
        second.elapsed()
    );
    assert!(
        first_ready >= ACK_WAIT,
        "the first new instance waited for the lost acks: {first_ready:?}"
    );

    let v1 = js
        .get_stream("MIGDONE")
        .await
        .expect("the stream")
        .consumer_info("v1")
        .await
        .expect("the old consumer, kept by the old instance's request");
    assert!(v1.paused && v1.num_ack_pending == 10, "{v1:?}");
    old_instance.abort();

    fx.ledger.wait_covers(1..=10, Duration::from_secs(20)).await;
    for running in [new_a, new_b] {
        running.stop().await.expect("a clean drain");
    }
    fx.ledger.assert_handled_once(10);
}

/// The old declaration (`v1`, version 1.0.0) or the new one (`v2` migrating from `v1`,
/// version 2.0.0), both with an `ack_wait` of `ACK_WAIT`.
async fn runtime(fx: &Fixture<NatsServer>, decl: StreamDecl, new: bool) -> Runtime {
    let group = if new {
        QueueDecl::new("v2").migrate_from("v1")
    } else {
        QueueDecl::new("v1")
    };
    let consumer = queue(
        "tests::on_job",
        &decl,
        "migdone.work",
        group.ack_wait(ACK_WAIT),
    );
    fast(fx.builder().await)
        .topology(job_topology(
            decl,
            consumer,
            fx.ledger.clone(),
            Duration::ZERO,
        ))
        .version(if new { "2.0.0" } else { "1.0.0" })
        .build()
        .expect("valid topology")
}
