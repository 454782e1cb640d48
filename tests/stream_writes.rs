//! A stream that takes no writes is visible: a handler consumes from a stream of one replica
//! on the node the runtime is connected to and publishes its output to a stream of three
//! replicas; a partition that cuts every node off from the others (or, beside it, the two
//! other nodes killed) leaves the output stream without a quorum. The runtime's health says so (naming the stream, the state and what an
//! operator does) within the watch's bound while staying ready (the replica is healthy, the
//! stream is not), the handler's publish fails with an error that names the stream and its
//! state, and after the heal the stream takes writes again and the message is handled. Beside
//! it: on a single server (no cluster), every stream takes writes and nothing is said.

mod fixture;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream;
use fixture::{Fixture, Running};
use nats_topology::model::{QueueDecl, StreamDecl};
use nats_topology::{HandlerError, Health, RetryPolicy, Runtime, Topology, Writes};
use nats_topology_testkit::eventually;
use tokio::time::Instant;

/// The watch reads every two heartbeats (10 s at the defaults); a read waits a heartbeat for
/// its answer; the server takes a few seconds to see that a leader lost its followers.
const SEEN_WITHIN: Duration = Duration::from_secs(40);

fn writes_of(health: &Health, stream: &str) -> Option<Writes> {
    health
        .stream_writes()
        .into_iter()
        .find(|s| s.stream == stream)
        .map(|s| s.writes)
}

/// A handler that publishes each job to `out.<id>`, recording what it handled and the errors
/// its publishes got.
fn relay_topology(
    input: StreamDecl,
    output: StreamDecl,
    handled: Arc<Mutex<Vec<u64>>>,
    errors: Arc<Mutex<Vec<String>>>,
) -> Topology {
    let consumer = fixture::queue("tests::copy", &input, "in.jobs", QueueDecl::new("copiers"));
    Topology::new()
        .stream(input)
        .stream(output)
        .consumer(consumer, move |incoming| {
            let (handled, errors) = (handled.clone(), errors.clone());
            Box::pin(async move {
                let id = fixture::job_id(&incoming)?;
                let published = incoming.context().publish(format!("out.{id}"), &id).await;
                if let Err(error) = published {
                    errors.lock().unwrap().push(error.to_string());
                    return Err(error);
                }
                handled.lock().unwrap().push(id);
                Ok::<(), HandlerError>(())
            })
        })
}

/// How the output stream loses its quorum.
#[derive(Debug, Clone, Copy)]
enum Fault {
    /// Every node cut off from the others (the network).
    Partition,
    /// The two other nodes killed (their processes), then started again.
    Kill,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_cut_off_from_its_quorum_is_seen_and_named_by_a_failed_publish() {
    no_writes(Fault::Partition).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_whose_other_nodes_are_killed_is_seen_and_named_by_a_failed_publish() {
    no_writes(Fault::Kill).await;
}

async fn no_writes(fault: Fault) {
    let mut fx = Fixture::linked_cluster().await;
    let cluster = &mut fx.server;
    // The input: one replica, so it stays with its node through the partition.
    let input = fixture::stream("SW_IN", &["in.>"]).replicas(1);
    let output = fixture::stream("SW_OUT", &["out.>"]).replicas(3);
    let js = jetstream::new(connect(cluster).await);
    nats_topology::Runtime::builder(connect(cluster).await)
        .topology(Topology::new().stream(input))
        .build()
        .expect("valid")
        .provision()
        .await
        .expect("the input stream created");
    let info = js
        .get_stream("SW_IN")
        .await
        .expect("the input stream")
        .cached_info()
        .clone();
    let leader = info.cluster.and_then(|c| c.leader).expect("a leader");
    let node = nats_topology_testkit::NatsCluster::node_index(&leader).expect("a node of ours");

    // The runtime on that node alone: it cannot move, and its input stays.
    let client = fixture::connect_in_order(&[cluster.url(node)]).await;
    let node_js = async_nats::jetstream::new(client.clone());
    let (handled, errors) = (Arc::default(), Arc::default());
    let running = Running::start(
        Runtime::builder(client)
            .topology(relay_topology(
                input,
                output,
                Arc::clone(&handled),
                Arc::clone(&errors),
            ))
            .publish_retry(RetryPolicy {
                base: Duration::from_millis(100),
                cap: Duration::from_secs(1),
                deadline: Duration::from_secs(4),
                ..RetryPolicy::default()
            }),
    )
    .await;
    fixture::publish_jobs(&node_js, "in.jobs", [1]).await;
    eventually(Duration::from_secs(10), "job 1 copied", || {
        let done = handled.lock().unwrap().contains(&1);
        async move { done.then_some(()) }
    })
    .await;
    eventually(Duration::from_secs(15), "both streams read", || {
        let read = [
            writes_of(&running.health, "SW_IN"),
            writes_of(&running.health, "SW_OUT"),
        ];
        async move { read.iter().all(|w| w == &Some(Writes::Taken)).then_some(()) }
    })
    .await;

    match fault {
        // Every node cut off from the others: no replicated group has a quorum.
        Fault::Partition => {
            for i in 0..cluster.len() {
                cluster.isolate(i);
            }
        }
        Fault::Kill => {
            for i in (0..cluster.len()).filter(|&i| i != node) {
                cluster.kill(i);
            }
        }
    }
    let cut = Instant::now();
    let state = eventually(
        SEEN_WITHIN,
        "the output stream seen taking no writes",
        || {
            let writes = writes_of(&running.health, "SW_OUT");
            async move { writes.filter(|w| !w.taken()) }
        },
    )
    .await;
    let seen_after = cut.elapsed();
    println!("{fault:?}: SW_OUT seen as `{state}` after {seen_after:?}");
    let shown = running.health.to_string();
    assert!(
        shown.contains("stream SW_OUT: NO"),
        "health names the stream and its state: {shown}"
    );
    assert!(running.health.ready(), "still ready: {shown}");
    assert_eq!(
        writes_of(&running.health, "SW_IN"),
        Some(Writes::Taken),
        "the input, on the runtime's own node, takes writes: {shown}"
    );

    // A handler's publish there fails, and says why.
    fixture::publish_jobs(&node_js, "in.jobs", [2]).await;
    let error = eventually(Duration::from_secs(30), "a publish failed", || {
        let first = errors.lock().unwrap().first().cloned();
        async move { first }
    })
    .await;
    println!("the handler's publish failed: {error}");
    assert!(
        error.contains("stream SW_OUT: NO") && error.contains("writes"),
        "the error names the stream and its state: {error}"
    );

    let healed = Instant::now();
    match fault {
        Fault::Partition => cluster.heal(),
        Fault::Kill => {
            for i in (0..cluster.len()).filter(|&i| i != node) {
                cluster.restart(i).await.expect("the node starts again");
            }
        }
    }
    eventually(SEEN_WITHIN, "the output stream takes writes again", || {
        let writes = writes_of(&running.health, "SW_OUT");
        async move { (writes == Some(Writes::Taken)).then_some(()) }
    })
    .await;
    let back_after = healed.elapsed();
    eventually(
        Duration::from_secs(60),
        "job 2 copied after the heal",
        || {
            let done = handled.lock().unwrap().contains(&2);
            async move { done.then_some(()) }
        },
    )
    .await;
    println!(
        "{fault:?} ended: SW_OUT seen taking writes again after {back_after:?}; job 2 copied \
         after {:?}",
        healed.elapsed()
    );
    running.stop().await.expect("a clean drain");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_stream_of_a_single_server_takes_writes() {
    let fx = Fixture::start().await;
    let (handled, errors) = (Arc::default(), Arc::default());
    let running = Running::start(fx.builder().await.topology(relay_topology(
        fixture::stream("ONE_IN", &["in.>"]),
        fixture::stream("ONE_OUT", &["out.>"]),
        Arc::clone(&handled),
        errors,
    )))
    .await;
    eventually(Duration::from_secs(15), "both streams read", || {
        let all = running.health.stream_writes();
        async move { (all.len() == 2).then_some(all) }
    })
    .await;
    for stream in running.health.stream_writes() {
        assert_eq!(stream.writes, Writes::Taken, "{stream}");
    }
    assert!(
        !running.health.to_string().contains("NO"),
        "{}",
        running.health
    );
    running.stop().await.expect("a clean drain");
}

/// A client of the cluster's own (not through the fixture, which the test holds mutably).
async fn connect(cluster: &nats_topology_testkit::NatsCluster) -> async_nats::Client {
    async_nats::connect(cluster.server_addrs())
        .await
        .expect("connect")
}
