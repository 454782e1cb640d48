//! Broadcast relays on a real server: every instance receives every message; a relay deleted
//! on the server comes back (through `Relay::ensure`, or by itself) and receives again.

mod fixture;

use std::ops::Range;
use std::time::Duration;

use fixture::{Fixture, Ledger, Running};
use nats_topology::model::StreamDecl;
use nats_topology::{Relay, RetryPolicy, Topology};
use nats_topology_testkit::eventually;

fn relay_topology(stream: StreamDecl, ledger: Ledger) -> Topology {
    let relay = fixture::relay("tests::relay_status", &stream, "status.>");
    Topology::new()
        .stream(stream)
        .consumer(relay, fixture::job_handler(ledger, Duration::ZERO))
}

async fn wait_running(relay: &Relay) {
    eventually(Duration::from_secs(20), "the relay to run", || {
        let running = relay.is_running();
        async move { running.then_some(()) }
    })
    .await;
}

/// Waits until every instance has received `new`, then checks that each received every
/// message so far (`0..new.end`) once, in order.
async fn every_instance_receives(ledgers: &[Ledger], new: Range<u64>, what: &str) {
    eventually(Duration::from_secs(20), what, || {
        let done = ledgers.iter().all(|l| l.covers(new.clone()));
        async move { done.then_some(()) }
    })
    .await;
    for (i, ledger) in ledgers.iter().enumerate() {
        assert_eq!(
            ledger.ids(),
            (0..new.end).collect::<Vec<_>>(),
            "instance {i}: each once, in order"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_instance_receives_every_broadcast_and_a_deleted_relay_comes_back() {
    let fx = Fixture::start().await;
    let stream = fixture::stream("STATUS", &["status.>"]);
    let mut ledgers = Vec::new();
    let mut relays = Vec::new();
    let mut instances = Vec::new();
    for i in 0..3 {
        let ledger = Ledger::default();
        let mut builder = fixture::fast(fx.builder().await);
        if i == 0 {
            // After a loss, this supervisor would wait up to a minute (full jitter over
            // [0, 60 s]) before re-creating its relay: only ensure() brings it back in time.
            builder = builder.retry(RetryPolicy {
                base: Duration::from_secs(60),
                cap: Duration::from_secs(60),
                ..fixture::fast_retry()
            });
        }
        let runtime = builder
            .topology(relay_topology(stream, ledger.clone()))
            .build()
            .expect("valid topology");
        let relay = runtime
            .relay("relay_status")
            .expect("one relay named relay_status");
        instances.push(Running::spawn(runtime));
        wait_running(&relay).await;
        relay
            .ensure()
            .await
            .expect("a running relay is ensured at once");
        ledgers.push(ledger);
        relays.push(relay);
    }
    let js = fx.jetstream().await;
    let names: Vec<String> = relays.iter().map(Relay::consumer).collect();
    assert_eq!(
        fixture::consumer_names(&js, "STATUS").await,
        names.iter().cloned().collect(),
        "one relay per instance, each with its own name"
    );

    fixture::publish_jobs(&js, "status.member", 0..20).await;
    every_instance_receives(&ledgers, 0..20, "every instance receives every message").await;

    // Delete the first instance's relay on the server; ensure() brings it back.
    let created = fixture::consumer_info(&js, "STATUS", &names[0])
        .await
        .expect("the relay exists")
        .created;
    js.get_stream("STATUS")
        .await
        .unwrap()
        .delete_consumer(&names[0])
        .await
        .expect("delete the relay out of band");
    // The supervisor notices the loss (the open pull request ends with "Consumer Deleted").
    eventually(Duration::from_secs(20), "the relay seen as lost", || {
        let running = relays[0].is_running();
        async move { (!running).then_some(()) }
    })
    .await;
    // ensure() wakes the supervisor out of its backoff and returns once the relay runs again.
    tokio::time::timeout(Duration::from_secs(10), relays[0].ensure())
        .await
        .expect("ensure() returns once the relay runs again")
        .expect("the runtime runs");
    assert!(relays[0].is_running());
    eventually(Duration::from_secs(20), "the relay re-created", || async {
        let info = fixture::consumer_info(&js, "STATUS", &names[0]).await?;
        (info.created != created).then_some(())
    })
    .await;
    relays[0].ensure().await.expect("the runtime runs");
    assert!(relays[0].is_running());

    fixture::publish_jobs(&js, "status.member", 20..40).await;
    every_instance_receives(&ledgers, 20..40, "every instance receives the new messages").await;

    for running in instances {
        running.stop().await.expect("clean drain");
    }
    assert!(
        fixture::consumer_names(&js, "STATUS").await.is_empty(),
        "relays are deleted on drain"
    );
    for relay in &relays {
        assert!(!relay.is_running());
        assert!(
            relay.ensure().await.is_err(),
            "a stopped runtime's relay cannot be ensured"
        );
    }
}

/// On an R3 stream of a 3-node cluster, three instances, each connected to a different node,
/// are ready only once their relays take pull requests: every broadcast published right after
/// they are ready reaches each of them, and no relay had to be created again (the neighbour of
/// `queue_cluster`'s checks: there, a consumer just created refused its first pull requests).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relays_on_a_cluster_are_ready_only_once_they_receive() {
    let fx = Fixture::cluster().await;
    let stream = fixture::stream("STATUS_R3", &["status3.>"]).replicas(3);
    let relay = fixture::relay("tests::relay_status3", &stream, "status3.>");
    let mut ledgers = Vec::new();
    let mut instances = Vec::new();
    for node in 0..fx.server.len() {
        let ledger = Ledger::default();
        let client = async_nats::connect(fx.server.url(node))
            .await
            .expect("connect to one node");
        let topology = Topology::new()
            .stream(stream)
            .consumer(relay, fixture::job_handler(ledger.clone(), Duration::ZERO));
        instances.push(Running::spawn(
            fixture::fast(nats_topology::Runtime::builder(client))
                .topology(topology)
                .build()
                .expect("valid topology"),
        ));
        ledgers.push(ledger);
    }
    for running in &instances {
        running.ready(Duration::from_secs(30)).await;
    }

    let js = fx.jetstream().await;
    fixture::publish_jobs(&js, "status3.member", 0..50).await;
    every_instance_receives(&ledgers, 0..50, "every instance receives every message").await;
    fixture::assert_restarts(&instances, 0);
    for running in instances {
        running.stop().await.expect("clean drain");
    }
}
