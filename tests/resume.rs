//! Resume points belong to a stream instance: a queue consumer re-created after its stream was
//! deleted and created again (by the runtime, by a server restart of a memory stream, by the
//! owner of an external stream) starts as a fresh declaration would, not at the old ack floor,
//! so nothing published to the new stream is skipped; a relay re-created after a loss starts
//! after the last sequence it handled, so no broadcast published meanwhile is skipped.
//!
//! Every test asserts which ids were handled, never log lines.

mod fixture;

use std::ops::Range;
use std::time::Duration;

use async_nats::jetstream;
use fixture::{Fixture, Ledger, Running};
use nats_topology::model::{QueueDecl, Storage};
use nats_topology::{Relay, Topology};
use nats_topology_testkit::eventually;

/// How long a test waits for ids to be handled: far more than a re-creation takes, and short
/// enough that a skipped id fails the test quickly.
const HANDLED_WITHIN: Duration = Duration::from_secs(15);

/// Waits until `ledger` holds every id of `ids`; if it does not in time, fails naming the ids
/// never handled.
async fn handles_all(ledger: &Ledger, ids: Range<u64>, who: &str) {
    let waited = tokio::time::timeout(
        HANDLED_WITHIN,
        ledger.wait_covers(ids.clone(), HANDLED_WITHIN * 2),
    );
    if waited.await.is_err() {
        let seen = ledger.unique();
        let lost: Vec<u64> = ids.clone().filter(|id| !seen.contains(id)).collect();
        panic!(
            "{who}: {} of the {} ids {ids:?} never handled within {HANDLED_WITHIN:?}: {lost:?}",
            lost.len(),
            ids.end - ids.start
        );
    }
}

/// Handles `0..20`, waits until the runtime has read the ack floor of 20, then lets `lose`
/// delete the stream (and whatever else the scenario does); publishes `20..40` once the stream
/// exists again: every one of them must be handled, once.
async fn new_stream_is_read_from_its_start(
    fx: &mut Fixture,
    stream: nats_topology::model::StreamDecl,
    subject: &str,
    lose: impl AsyncFnOnce(&mut Fixture),
) {
    let name = stream.name;
    let consumer = fixture::queue("tests::resume", &stream, subject, QueueDecl::new("worker"));
    let running = fx.run_jobs(stream, consumer, Duration::ZERO).await;
    let js = fx.jetstream().await;
    fixture::publish_jobs(&js, subject, 0..20).await;
    fx.ledger.wait_covers(0..20, HANDLED_WITHIN).await;
    fixture::ack_floor_read(&running.health, 0, 20).await;

    lose(fx).await;
    // A client of its own: the scenario may have restarted the server.
    let js = fx.jetstream().await;
    let info = fixture::stream_exists(&js, name, HANDLED_WITHIN).await;
    assert!(
        info.state.last_sequence < 20,
        "the stream is a new one: {:?}",
        info.state
    );
    fixture::publish_jobs(&js, subject, 20..40).await;
    handles_all(&fx.ledger, 20..40, "published to the new stream").await;
    running.ready(HANDLED_WITHIN).await;
    fx.drain_and_settle(running, &js, (name, "worker"), 40)
        .await;
}

/// An owned stream deleted out of band after its consumer's floor was read: the runtime creates
/// the stream again, and the consumer reads the new stream from its start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owned_stream_deleted_and_recreated_by_the_runtime_loses_nothing() {
    let mut fx = Fixture::start().await;
    let stream = fixture::stream("OWNED", &["owned.>"]);
    new_stream_is_read_from_its_start(&mut fx, stream, "owned.jobs", async |fx| {
        let js = fx.jetstream().await;
        js.delete_stream("OWNED")
            .await
            .expect("delete the stream out of band");
    })
    .await;
}

/// A memory-storage stream does not survive a restart of its only server: the runtime creates
/// it again, and the consumer reads the new stream from its start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_stream_after_a_server_restart_loses_nothing() {
    let mut fx = Fixture::start().await;
    let stream = fixture::stream("VOLATILE", &["volatile.>"]).storage(Storage::Memory);
    new_stream_is_read_from_its_start(&mut fx, stream, "volatile.jobs", async |fx| {
        fx.server.kill();
        fx.server
            .restart()
            .await
            .expect("the server restarts on its store");
    })
    .await;
}

/// An external stream deleted and created again by its owner (here the test) while the
/// runtime consumes it: the consumer reads the new stream from its start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_stream_recreated_by_its_owner_loses_nothing() {
    let mut fx = Fixture::start().await;
    let owner = fx.jetstream().await;
    let config = jetstream::stream::Config {
        name: "EXTERNAL".to_owned(),
        subjects: vec!["external.>".to_owned()],
        ..Default::default()
    };
    owner
        .create_stream(config.clone())
        .await
        .expect("the owner creates its stream");
    let stream = fixture::stream("EXTERNAL", &["external.>"]).external();
    new_stream_is_read_from_its_start(&mut fx, stream, "external.jobs", async |_| {
        owner
            .delete_stream("EXTERNAL")
            .await
            .expect("the owner deletes its stream");
        owner
            .create_stream(config)
            .await
            .expect("the owner creates its stream again");
    })
    .await;
}

fn relay_topology(ledger: Ledger) -> Topology {
    let stream = fixture::stream("BROADCASTS", &["broadcast.>"]);
    // Handlers finish out of order (four at once): resuming after the highest sequence
    // handled could skip a lower one still running.
    let relay = fixture::relay("tests::relay_status", &stream, "broadcast.>").concurrency(4);
    Topology::new().stream(stream).consumer(
        relay,
        fixture::job_handler(ledger, Duration::from_millis(3)),
    )
}

/// Two runtimes relay broadcasts; their relay consumers are deleted on the server while
/// broadcasts are published one every 20 ms for 4 s: each relay is re-created after the last
/// broadcast it handled, and every runtime handles every broadcast.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relays_deleted_while_broadcasting_miss_nothing() {
    let fx = Fixture::start().await;
    let mut ledgers = Vec::new();
    let mut relays: Vec<Relay> = Vec::new();
    let mut instances = Vec::new();
    for _ in 0..2 {
        let ledger = Ledger::default();
        let runtime = fixture::fast(fx.builder().await)
            .topology(relay_topology(ledger.clone()))
            .build()
            .expect("valid topology");
        let relay = runtime.relay("relay_status").expect("one relay");
        instances.push(Running::spawn(runtime));
        tokio::time::timeout(Duration::from_secs(20), relay.ensure())
            .await
            .expect("the relay runs")
            .expect("the runtime runs");
        ledgers.push(ledger);
        relays.push(relay);
    }

    let js = fx.jetstream().await;
    const COUNT: u64 = 200;
    let publisher = {
        let js = js.clone();
        tokio::spawn(async move {
            for id in 0..COUNT {
                fixture::publish_jobs(&js, "broadcast.status", [id]).await;
                // The pace of the broadcasts is the scenario, not synchronisation.
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    // Delete both relays a second into the broadcasts, and again a second later.
    for round in 0..2 {
        let ids = if round == 0 { 40 } else { 90 };
        eventually(HANDLED_WITHIN, "broadcasts under way", || {
            let n = ledgers.iter().map(Ledger::len).min().unwrap_or(0);
            async move { (n as u64 >= ids).then_some(()) }
        })
        .await;
        for relay in &relays {
            fixture::delete_consumer(&js, "BROADCASTS", &relay.consumer()).await;
        }
    }
    publisher.await.expect("the publisher finishes");

    for (i, ledger) in ledgers.iter().enumerate() {
        handles_all(ledger, 0..COUNT, &format!("runtime {i}")).await;
        eprintln!(
            "runtime {i}: {} handled, handled again: {:?}",
            ledger.len(),
            ledger.duplicates()
        );
    }
    for running in instances {
        running.stop().await.expect("clean drain");
    }
}
