//! `#[kv_watch]` on a three-node cluster: an instance whose node is killed and restarted while
//! changes are written reconnects, its watch is re-created after the last revision it handled,
//! and it handles every revision of the R3 bucket, in order, as the instance that kept its
//! node does.
//!
//! A file of its own: its R3 bucket cannot be provisioned on the single servers of
//! `tests/kv_watch.rs`.

mod fixture;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use fixture::{Fixture, Running};
use nats_topology::bucket::KvEntry;
use nats_topology::{HandlerError, Relay, Runtime, State, kv_bucket, kv_watch};
use nats_topology_testkit::eventually;

const HANDLED_WITHIN: Duration = Duration::from_secs(60);

/// Replicated on every node, with enough history that no revision written here is removed.
#[kv_bucket(name = "CLUSTER_STATUS", value = u64, replicas = 3, history = 64)]
struct ClusterStatus;

/// The revisions one instance handled, in the order it handled them.
#[derive(Default, Clone)]
struct Revisions(Arc<Mutex<Vec<u64>>>);

impl Revisions {
    fn all(&self) -> Vec<u64> {
        self.0.lock().unwrap().clone()
    }
    fn last(&self) -> u64 {
        self.0.lock().unwrap().last().copied().unwrap_or(0)
    }
}

#[kv_watch(bucket = ClusterStatus, keys = "member.>")]
async fn on_cluster_status(
    entry: KvEntry<u64>,
    State(revisions): State<Revisions>,
) -> Result<(), HandlerError> {
    revisions.0.lock().unwrap().push(entry.revision);
    Ok(())
}

async fn run_watching(runtime: Runtime) -> (Running, Relay) {
    let relay = runtime.relay("on_cluster_status").expect("the watch");
    let running = Running::spawn(runtime);
    tokio::time::timeout(HANDLED_WITHIN, relay.ensure())
        .await
        .expect("the watch runs")
        .expect("the runtime runs");
    (running, relay)
}

/// Instance A is connected to node 0, instance B to node 1; a writer on node 2 puts 300
/// values (retrying a put that fails while the cluster elects a leader). Node 0 is killed a
/// third of the way in and restarted: A reconnects, and both instances handle every revision
/// in the stream, in order, none skipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_whose_node_restarts_skips_no_revision() {
    let mut fx = Fixture::cluster().await;
    let urls = fx.server.urls();
    let order = |first: usize| -> Vec<String> {
        (0..urls.len())
            .map(|i| urls[(first + i) % urls.len()].clone())
            .collect()
    };
    let (a, b) = (Revisions::default(), Revisions::default());
    let client_a = fixture::connect_in_order(&order(0)).await;
    let client_b = fixture::connect_in_order(&order(1)).await;
    let (running_a, _relay_a) = run_watching(
        fixture::fast(Runtime::builder(client_a))
            .state(a.clone())
            .build()
            .expect("valid"),
    )
    .await;
    let (running_b, _relay_b) = run_watching(
        fixture::fast(Runtime::builder(client_b))
            .state(b.clone())
            .build()
            .expect("valid"),
    )
    .await;

    let writer_client = fixture::connect_in_order(&order(2)).await;
    let js = async_nats::jetstream::new(writer_client);
    let store = js
        .get_key_value("CLUSTER_STATUS")
        .await
        .expect("the bucket");
    const COUNT: u64 = 300;
    let writer = tokio::spawn(async move {
        for i in 0..COUNT {
            let key = format!("member.{}", i % 10);
            let value = serde_json::to_vec(&i).unwrap();
            // A put that fails (no leader while node 0 is down) is tried again: if the first
            // one was stored after all, the bucket has one revision more, which the watches
            // must handle too.
            eventually(HANDLED_WITHIN, "a put to be stored", || {
                let (store, key, value) = (store.clone(), key.clone(), value.clone());
                async move { store.put(key, value.into()).await.ok() }
            })
            .await;
            // The pace of the writes is the scenario, not synchronisation.
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });

    eventually(HANDLED_WITHIN, "changes under way", || {
        let n = a.all().len();
        async move { (n >= 100).then_some(()) }
    })
    .await;
    fx.server.kill(0);
    fx.server
        .restart(0)
        .await
        .expect("node 0 restarts on its store");
    writer.await.expect("the writer finishes");

    let js = fx.jetstream().await;
    let mut stream = js.get_stream("KV_CLUSTER_STATUS").await.expect("stream");
    let state = stream.info().await.expect("stream info").state.clone();
    assert_eq!(
        (state.first_sequence, state.messages),
        (1, state.last_sequence),
        "no revision removed from the bucket: {state:?}"
    );
    let every: Vec<u64> = (1..=state.last_sequence).collect();
    assert!(every.len() as u64 >= COUNT);
    for (revisions, who) in [(&a, "instance A (its node restarted)"), (&b, "instance B")] {
        eventually(HANDLED_WITHIN, who, || {
            let last = revisions.last();
            async move { (last >= state.last_sequence).then_some(()) }
        })
        .await;
        let handled = revisions.all();
        let skipped: Vec<u64> = every
            .iter()
            .copied()
            .filter(|r| !handled.contains(r))
            .collect();
        assert!(skipped.is_empty(), "{who}: revisions skipped: {skipped:?}");
        assert_eq!(handled, every, "{who}: every revision once, in order");
    }
    let status = running_a
        .health
        .consumers()
        .into_iter()
        .find(|c| c.handler.ends_with("::on_cluster_status"))
        .expect("the watch's health");
    eprintln!("instance A: {status}");
    for running in [running_a, running_b] {
        running.stop().await.expect("clean drain");
    }
}

/// How node 0 is lost.
#[derive(Debug, Clone, Copy)]
enum Lost {
    /// SIGKILL: its peers keep counting it online for a while.
    Killed,
    /// SIGTERM, as a rolling restart of the cluster does: its peers count it offline at once.
    Stopped,
}

/// A relay's consumer has one replica: the watch's consumer sits on node 0 (made there before
/// the instance starts, under the instance's own relay name), node 0 is lost and stays down,
/// and the instance (connected to node 1) starts: its create binds the consumer on the lost
/// node, which answers nobody, or is refused as offline; the watch deletes it and creates it
/// again on a live node, and handles a change put after the loss, without waiting for node 0.
async fn a_watch_whose_consumer_is_on_a_lost_node_runs_on_a_live_one(lost: Lost) {
    let mut fx = Fixture::cluster().await;
    let urls = fx.server.urls();
    let client = fixture::connect_in_order(&[urls[1].clone(), urls[2].clone()]).await;
    let revisions = Revisions::default();
    let runtime = fixture::fast(Runtime::builder(client.clone()))
        .state(revisions.clone())
        .build()
        .expect("valid");
    runtime
        .provision()
        .await
        .expect("the bucket is provisioned");
    let name = runtime
        .relay("on_cluster_status")
        .expect("the watch")
        .consumer();
    let js = async_nats::jetstream::new(client);
    let stream = js
        .get_stream("KV_CLUSTER_STATUS")
        .await
        .expect("the bucket's stream");
    // The server places a one-replica consumer on a random node of its stream: made again
    // until it is on node 0.
    eventually(
        HANDLED_WITHIN,
        "the relay's consumer placed on node 0",
        || {
            let (stream, name) = (stream.clone(), name.clone());
            async move {
                let _ = stream.delete_consumer(&name).await;
                let mut consumer = stream
                    .create_consumer(async_nats::jetstream::consumer::pull::Config {
                        durable_name: Some(name.clone()),
                        filter_subject: "$KV.CLUSTER_STATUS.member.>".into(),
                        num_replicas: 1,
                        ..Default::default()
                    })
                    .await
                    .ok()?;
                let info = consumer.info().await.ok()?;
                let leader = info.cluster.as_ref()?.leader.clone()?;
                (leader == "node0").then_some(())
            }
        },
    )
    .await;
    match lost {
        Lost::Killed => fx.server.kill(0),
        Lost::Stopped => fx.server.stop(0).await,
    }

    let running = Running::spawn(runtime);
    let store = eventually(HANDLED_WITHIN, "the bucket without node 0", || {
        let js = js.clone();
        async move { js.get_key_value("CLUSTER_STATUS").await.ok() }
    })
    .await;
    let put = eventually(HANDLED_WITHIN, "a put stored without node 0", || {
        let store = store.clone();
        async move { store.put("member.after", b"1".to_vec().into()).await.ok() }
    })
    .await;
    eventually(
        Duration::from_secs(30),
        &format!("the watch ({lost:?} node 0) handles revision {put} while node 0 is down"),
        || {
            let last = revisions.last();
            async move { (last >= put).then_some(()) }
        },
    )
    .await;
    let status = running
        .health
        .consumers()
        .into_iter()
        .find(|c| c.handler.ends_with("::on_cluster_status"))
        .expect("the watch's health");
    assert_eq!(
        status.state,
        nats_topology::ConsumerState::Running,
        "{status}"
    );
    running.stop().await.expect("clean drain");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_whose_consumer_is_on_a_killed_node_runs_on_a_live_one() {
    a_watch_whose_consumer_is_on_a_lost_node_runs_on_a_live_one(Lost::Killed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_whose_consumer_is_on_a_stopped_node_runs_on_a_live_one() {
    a_watch_whose_consumer_is_on_a_lost_node_runs_on_a_live_one(Lost::Stopped).await;
}
