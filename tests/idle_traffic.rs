//! What an idle queue consumer asks of the server: its ack floor is read every fourth
//! heartbeat while nothing happens, and every heartbeat again as soon as it has work. The
//! reads are counted on the server's own API subject (a subscriber beside the server sees each
//! request), on a real server.

mod fixture;

use std::time::Duration;

use fixture::{Fixture, Running, job_topology, queue, stream};
use futures::StreamExt;
use nats_topology::model::QueueDecl;
use tokio::time::Instant;

/// The intervals between the next `count` reads of the consumer's info.
async fn intervals(reads: &mut async_nats::Subscriber, count: usize) -> Vec<Duration> {
    let mut at = Vec::new();
    while at.len() <= count {
        let read = tokio::time::timeout(Duration::from_secs(20), reads.next())
            .await
            .expect("the consumer's info is read within 20 s")
            .expect("the subscription lives");
        drop(read);
        at.push(Instant::now());
    }
    at.windows(2).map(|w| w[1] - w[0]).collect()
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// With a 500 ms heartbeat, an idle consumer's info is read about every 2 s; while messages
/// keep coming, about every 500 ms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_consumer_reads_its_ack_floor_every_fourth_heartbeat_and_every_one_with_work() {
    let fx = Fixture::start().await;
    let jobs = stream("IDLE", &["idle.>"]);
    let consumer = queue("idle::jobs", &jobs, "idle.jobs", QueueDecl::new("idlers"));
    let topology = job_topology(jobs, consumer, fx.ledger.clone(), Duration::ZERO);
    let running = Running::start(fixture::fast(fx.builder().await).topology(topology)).await;
    running.ready(Duration::from_secs(20)).await;

    let watcher = fx.connect().await;
    let mut reads = watcher
        .subscribe("$JS.API.CONSUMER.INFO.IDLE.idlers")
        .await
        .expect("subscribe");
    watcher.flush().await.expect("flush");

    // Idle: nothing was published.
    let idle = median(intervals(&mut reads, 4).await);
    assert!(
        idle >= Duration::from_millis(1500),
        "an idle consumer is read every fourth heartbeat (2 s), not every {idle:?}"
    );

    // Busy: a job every 100 ms.
    let js = fx.jetstream().await;
    let publisher = tokio::spawn(async move {
        for i in 0u64.. {
            fixture::publish_jobs(&js, "idle.jobs", i..i + 1).await;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    fx.ledger.wait_covers(0..5, Duration::from_secs(20)).await;
    // The read after the first job may still be an idle one's.
    let _ = intervals(&mut reads, 1).await;
    let busy = median(intervals(&mut reads, 5).await);
    publisher.abort();
    assert!(
        busy <= Duration::from_millis(1000),
        "a consumer with work is read every heartbeat (500 ms), not every {busy:?}"
    );
    running.stop().await.expect("drains");
}
