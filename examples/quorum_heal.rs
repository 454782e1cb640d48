//! A partition that cuts off the node leading a replicated stream, then heals: how long
//! writes fail on the majority side, around the cut and around the heal, and what the
//! runtime's health said meanwhile (`Health::stream_writes`).
//!
//! Each repetition starts a linked 3-node cluster (the test kit's; nats-server 2.15.1 unless
//! `NATS_SERVER_VERSION` says otherwise), declares a stream of three replicas, and runs a
//! runtime at the default settings connected to a node that is not the stream's leader. A
//! publisher on that node sends 100 messages a second (each acknowledgement waited for at
//! most 2 s). After 5 s the leader's node is cut off from the two others for 20 s; the run
//! goes on 20 s after the heal.
//!
//! ```text
//! cargo run --release --example quorum_heal -- --reps 4
//! ```

use std::sync::{Arc, Mutex};
use std::time::Duration;

use nats_topology::model::StreamDecl;
use nats_topology::{Runtime, Topology};
use nats_topology_testkit::NatsCluster;
use tokio::time::Instant;

const RATE: Duration = Duration::from_millis(10);
const BEFORE: Duration = Duration::from_secs(5);
const CUT: Duration = Duration::from_secs(20);
const AFTER: Duration = Duration::from_secs(20);

static STREAM: StreamDecl = StreamDecl::new("HEAL", &["heal.>"]).replicas(3);

#[tokio::main]
async fn main() {
    let reps = std::env::args()
        .skip_while(|a| a != "--reps")
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(4);
    println!(
        "{:>3} | {:>8} | {:>22} | {:>22} | {:>10} | health said",
        "rep", "leader", "failing after the cut", "failing after the heal", "failed"
    );
    for rep in 1..=reps {
        run(rep).await;
    }
}

async fn run(rep: u32) {
    let cluster = NatsCluster::start_linked().await.expect("a linked cluster");
    let first = async_nats::connect(cluster.url(0)).await.expect("connect");
    Runtime::builder(first.clone())
        .topology(Topology::new().stream(STREAM))
        .build()
        .expect("valid")
        .provision()
        .await
        .expect("the stream");
    let js = async_nats::jetstream::new(first);
    let info = js.get_stream("HEAL").await.expect("the stream");
    let leader = info
        .cached_info()
        .cluster
        .as_ref()
        .and_then(|c| c.leader.clone())
        .expect("a leader");
    let leader = NatsCluster::node_index(&leader).expect("one of ours");
    let other = (leader + 1) % 3;

    // The runtime and the publisher on a node of the majority side, listing every node.
    let mut urls = vec![cluster.url(other)];
    urls.extend((0..3).filter(|&i| i != other).map(|i| cluster.url(i)));
    let addrs: Vec<async_nats::ServerAddr> = urls.iter().map(|u| u.parse().unwrap()).collect();
    let client = nats_topology::connect_options()
        .retain_servers_order()
        .connect(addrs)
        .await
        .expect("connect");
    let runtime = Runtime::builder(client.clone())
        .topology(Topology::new().stream(STREAM))
        .build()
        .expect("valid");
    let health = runtime.health();
    let stop = tokio_util_stop();
    let run = tokio::spawn(runtime.run_until(stop.1));

    let start = Instant::now();
    // What health said of the stream, as it changed: (since start, what).
    let said: Arc<Mutex<Vec<(Duration, String)>>> = Arc::default();
    let watching = {
        let (health, said) = (health.clone(), said.clone());
        tokio::spawn(async move {
            let mut last = String::new();
            loop {
                let now = health
                    .stream_writes()
                    .into_iter()
                    .find(|s| s.stream == "HEAL")
                    .map(|s| s.writes.to_string())
                    .unwrap_or_default();
                if now != last {
                    said.lock().unwrap().push((start.elapsed(), now.clone()));
                    last = now;
                }
                tokio::select! {
                    _ = health.changed() => {}
                    _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                }
            }
        })
    };

    // The publisher: (sent since start, acknowledged).
    let results: Arc<Mutex<Vec<(Duration, bool)>>> = Arc::default();
    let publishing = {
        let (js, results) = (async_nats::jetstream::new(client.clone()), results.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(RATE);
            let mut n = 0u64;
            loop {
                tick.tick().await;
                n += 1;
                let (js, results) = (js.clone(), results.clone());
                tokio::spawn(async move {
                    let sent = start.elapsed();
                    let acked = tokio::time::timeout(Duration::from_secs(2), async {
                        js.publish(format!("heal.{n}"), "x".into()).await?.await
                    })
                    .await;
                    let ok = matches!(acked, Ok(Ok(_)));
                    results.lock().unwrap().push((sent, ok));
                });
            }
        })
    };

    // The load's pace and the partition's length are the scenario, not synchronisation.
    tokio::time::sleep(BEFORE).await;
    cluster.isolate(leader);
    let cut = start.elapsed();
    tokio::time::sleep(CUT).await;
    cluster.heal();
    let healed = start.elapsed();
    tokio::time::sleep(AFTER).await;
    publishing.abort();
    // The last acknowledgements come within their 2 s.
    tokio::time::sleep(Duration::from_secs(3)).await;
    watching.abort();
    let _ = stop.0.send(());
    let _ = run.await;

    let results = results.lock().unwrap().clone();
    let failed = results.iter().filter(|(_, ok)| !ok).count();
    let failing = |from: Duration, to: Duration| -> Duration {
        // From the first failed send in [from, to) to the last one, plus its wait.
        let window: Vec<Duration> = results
            .iter()
            .filter(|(at, ok)| !ok && *at >= from && *at < to)
            .map(|(at, _)| *at)
            .collect();
        match (window.iter().min(), window.iter().max()) {
            (Some(a), Some(b)) => *b - *a,
            _ => Duration::ZERO,
        }
    };
    let after_cut = failing(cut, healed);
    let after_heal = failing(healed, healed + AFTER);
    let said: Vec<String> = said
        .lock()
        .unwrap()
        .iter()
        .map(|(at, what)| {
            let at = at.as_secs_f64();
            let (cut, healed) = (cut.as_secs_f64(), healed.as_secs_f64());
            let when = if at < cut {
                format!("{at:.1}s")
            } else if at < healed {
                format!("cut+{:.1}s", at - cut)
            } else {
                format!("heal+{:.1}s", at - healed)
            };
            format!("{when}: {what}")
        })
        .collect();
    println!(
        "{rep:>3} | {:>8} | {:>22} | {:>22} | {failed:>10} | {}",
        format!("node{leader}"),
        format!("{after_cut:.1?}"),
        format!("{after_heal:.1?}"),
        said.join("; ")
    );
}

/// A stop signal for `run_until`.
fn tokio_util_stop() -> (
    tokio::sync::oneshot::Sender<()>,
    impl std::future::Future<Output = ()>,
) {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    (tx, async move {
        let _ = rx.await;
    })
}
