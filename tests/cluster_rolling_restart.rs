//! A rolling restart of the cluster, as an upgrade of the NATS servers does it: each node in
//! turn stopped gracefully (SIGTERM: it tells its peers it is shutting down, and they count it
//! offline at once) and started again on its store, while two instances run a queue consumer
//! and a broadcast relay on an R3 stream and jobs and news keep being published. The abrupt
//! family (SIGKILL) is `tests/leader_election.rs`, `tests/failover.rs` and
//! `tests/kv_watch_cluster.rs`.

mod fixture;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use fixture::{Fixture, Ledger, Running, fast, job_handler, publish_job_until_acked};
use nats_topology::model::QueueDecl;
use nats_topology::{ConsumerState, Runtime, Topology};

/// How long every job and every piece of news may take to be handled once publishing stops.
const HANDLED_WITHIN: Duration = Duration::from_secs(60);

/// News ids start here, so that a piece of news and a job never share a message id (the
/// stream would drop the second as a duplicate).
const NEWS: u64 = 1_000_000;

/// Every job handled by one instance or the other, every piece of news by both, none of the
/// news twice by one instance; neither runtime stops, and both end with every consumer
/// `running` and drain cleanly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_of_the_cluster_loses_nothing_and_stops_no_runtime() {
    let mut fx = Fixture::cluster().await;
    let stream = fixture::stream("ROLL", &["roll.>"]).replicas(3);
    let queue = fixture::queue(
        "tests::roll_jobs",
        &stream,
        "roll.jobs",
        QueueDecl::new("workers"),
    )
    .concurrency(4);
    let relay = fixture::relay("tests::roll_news", &stream, "roll.news");
    let urls = fx.server.urls();
    let order = |first: usize| -> Vec<String> {
        (0..urls.len())
            .map(|i| urls[(first + i) % urls.len()].clone())
            .collect()
    };

    let mut instances = Vec::new();
    for i in 0..2 {
        let (jobs, news) = (Ledger::default(), Ledger::default());
        let topology = Topology::new()
            .stream(stream)
            .consumer(queue, job_handler(jobs.clone(), Duration::from_millis(2)))
            .consumer(relay, job_handler(news.clone(), Duration::ZERO));
        let client = fixture::connect_in_order(&order(i)).await;
        let running = Running::start(fast(Runtime::builder(client)).topology(topology)).await;
        instances.push((running, jobs, news));
    }

    // Load: a job and a piece of news every 5 ms (each publish acknowledged, sent again with
    // its message id while no leader answers), until told to stop.
    let js = async_nats::jetstream::new(fixture::connect_in_order(&order(2)).await);
    let stop = Arc::new(AtomicBool::new(false));
    let publisher = tokio::spawn({
        let (js, stop) = (js.clone(), stop.clone());
        async move {
            let mut next = 0u64;
            while !stop.load(Ordering::Relaxed) {
                publish_job_until_acked(&js, "roll.jobs", next).await;
                publish_job_until_acked(&js, "roll.news", NEWS + next).await;
                next += 1;
                // The pace of the load is the scenario, not synchronisation.
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            next
        }
    });

    let handled = |instances: &[(Running, Ledger, Ledger)]| -> usize {
        instances.iter().map(|(_, jobs, _)| jobs.len()).sum()
    };
    for node in 0..fx.server.len() {
        // Each restart under load: some jobs handled since the last one.
        let before = handled(&instances);
        nats_topology_testkit::eventually(
            HANDLED_WITHIN,
            &format!("jobs handled before node {node} restarts"),
            || {
                let now = handled(&instances);
                async move { (now >= before + 50).then_some(()) }
            },
        )
        .await;
        fx.server
            .restart(node)
            .await
            .unwrap_or_else(|e| panic!("node {node} restarts gracefully: {e}"));
        // As an upgrade waits for a node's health before the next: the stream current on
        // every node again.
        nats_topology_testkit::eventually(
            HANDLED_WITHIN,
            &format!("the stream current on every node after node {node} restarted"),
            || {
                let js = js.clone();
                async move {
                    let mut stream = js.get_stream("ROLL").await.ok()?;
                    let cluster = stream.info().await.ok()?.cluster.clone()?;
                    (cluster.leader.is_some()
                        && cluster.replicas.len() == 2
                        && cluster.replicas.iter().all(|r| r.current && !r.offline))
                    .then_some(())
                }
            },
        )
        .await;
        for (i, (running, _, _)) in instances.iter().enumerate() {
            assert!(
                !running.is_finished(),
                "instance {i}'s runtime stopped while node {node} restarted"
            );
        }
    }
    stop.store(true, Ordering::Relaxed);
    let published = publisher.await.expect("the publisher finishes");
    assert!(published > 0);

    let (ledgers_jobs, news): (Vec<Ledger>, Vec<Ledger>) = instances
        .iter()
        .map(|(_, jobs, news)| (jobs.clone(), news.clone()))
        .unzip();
    nats_topology_testkit::eventually(HANDLED_WITHIN, "every job handled", || {
        let all = fixture::union(&ledgers_jobs);
        async move { (0..published).all(|id| all.contains(&id)).then_some(()) }
    })
    .await;
    for (i, news) in news.iter().enumerate() {
        let deadline = tokio::time::Instant::now() + HANDLED_WITHIN;
        loop {
            let seen = news.unique();
            let missing: Vec<u64> = (NEWS..NEWS + published)
                .filter(|id| !seen.contains(id))
                .collect();
            if missing.is_empty() {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "instance {i} never handled news {missing:?} within {HANDLED_WITHIN:?}; its \
                 consumers: {:?}",
                instances[i].0.health.consumers()
            );
            // Polling the ledger until the deadline: a wait on a condition.
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(
            news.duplicates().is_empty(),
            "instance {i} handled news twice: {:?}",
            news.duplicates()
        );
    }
    let duplicated_jobs: usize = ledgers_jobs.iter().map(|l| l.duplicates().len()).sum();
    eprintln!(
        "{published} jobs and {published} news published through 3 graceful restarts; jobs \
         handled more than once by one instance: {duplicated_jobs}"
    );
    for (i, (running, _, _)) in instances.into_iter().enumerate() {
        for consumer in running.health.consumers() {
            assert_eq!(
                consumer.state,
                ConsumerState::Running,
                "instance {i}: {consumer}"
            );
        }
        running
            .stop()
            .await
            .unwrap_or_else(|e| panic!("instance {i} drains cleanly: {e}"));
    }
}
