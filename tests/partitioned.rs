//! Partitioned queue consumers on real servers (nats-server 2.11 or newer): the messages of
//! one key handled one at a time in stream order, different keys in parallel, across
//! replicas that join, drain and die mid-load.
//!
//! Every handler records its key, the message's sequence within its key, its replica and
//! when it started and ended; the checks read every key: sequences never go back (strictly
//! increasing, but for the one message a killed replica had in flight, handled again), none
//! missing, and no two handlings of one key overlap in time.
//!
//! The process faults (SIGKILL, SIGTERM) run replicas as processes of this test binary,
//! re-invoked to run only [`replica_process`] with [`REPLICA_URL`] set; they report on stdout
//! one line per handling: `nt-replica: H <key> <seq> <start_us> <end_us>`, and `READY`,
//! `DRAINED`.

mod fixture;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fixture::{Broker, Fixture, Running};
use nats_topology::model::{QueueDecl, SubjectTransform};
use nats_topology::{HandlerError, Topology};
use serde::{Deserialize, Serialize};

/// Partitions of the group.
const PARTITIONS: u16 = 8;

/// Keys the test publishes for.
const KEYS: u32 = 40;

/// Simulated work per message.
const WORK: Duration = Duration::from_millis(2);

/// One message: the `seq`-th (from 1) of `key`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct Order {
    key: u32,
    seq: u64,
}

/// One handling, as a replica recorded it (microseconds since the epoch: processes compare).
#[derive(Debug, Clone, Copy)]
struct Handling {
    key: u32,
    seq: u64,
    replica: usize,
    start: u128,
    end: u128,
}

fn micros() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after the epoch")
        .as_micros()
}

/// Where handlings are recorded (in-process replicas share one).
#[derive(Clone, Default)]
struct Journal(Arc<Mutex<Vec<Handling>>>);

impl Journal {
    fn push(&self, handling: Handling) {
        self.0.lock().unwrap().push(handling);
    }

    fn all(&self) -> Vec<Handling> {
        self.0.lock().unwrap().clone()
    }

    /// How many distinct messages were handled.
    fn distinct(&self) -> usize {
        let all = self.all();
        let mut seen: Vec<(u32, u64)> = all.iter().map(|h| (h.key, h.seq)).collect();
        seen.sort_unstable();
        seen.dedup();
        seen.len()
    }

    async fn wait_distinct(&self, n: usize, timeout: Duration, what: &str) {
        nats_topology_testkit::eventually(timeout, what, || {
            let done = self.distinct() >= n;
            async move { done.then_some(()) }
        })
        .await;
    }
}

/// The stream: each stored subject starts with the partition of its key.
fn orders_stream(name: &str) -> nats_topology::model::StreamDecl {
    fixture::stream(name, &["orders.*.paid"]).subject_transform(SubjectTransform::new(
        "orders.*.paid",
        fixture::leak(format!(
            "{{{{partition({PARTITIONS},1)}}}}.orders.{{{{wildcard(1)}}}}.paid"
        )),
    ))
}

/// A replica's topology: the partitioned group `billing`, recording into `journal` as
/// `replica`; a handler fails the first delivery of each key's `fail_seq`-th message.
fn replica_topology(
    stream: &str,
    journal: Journal,
    replica: usize,
    fail_seq: Option<u64>,
) -> Topology {
    let stream = orders_stream(stream);
    let consumer = fixture::queue(
        "tests::billing",
        &stream,
        "orders.*.paid",
        QueueDecl::new("billing")
            .partitioned(PARTITIONS, &[1])
            .ack_wait(Duration::from_secs(5)),
    );
    Topology::new()
        .stream(stream)
        .consumer(consumer, move |incoming| {
            let journal = journal.clone();
            Box::pin(async move {
                let order: Order = serde_json::from_slice(incoming.payload())
                    .map_err(|e| HandlerError::permanent(format!("not an order: {e}")))?;
                if fail_seq == Some(order.seq) && incoming.context().delivered() == 1 {
                    return Err(HandlerError::new("the first try of this one fails"));
                }
                let start = micros();
                tokio::time::sleep(WORK).await;
                journal.push(Handling {
                    key: order.key,
                    seq: order.seq,
                    replica,
                    start,
                    end: micros(),
                });
                Ok::<(), HandlerError>(())
            })
        })
}

/// Publishes `per_key` messages for each key, round-robin over the keys, `pause` between
/// rounds; returns how many.
async fn publish(js: &async_nats::jetstream::Context, rounds: std::ops::Range<u64>, pause: Duration) {
    for seq in rounds {
        for key in 0..KEYS {
            let order = Order { key, seq };
            js.publish(
                format!("orders.{key}.paid"),
                serde_json::to_vec(&order).unwrap().into(),
            )
            .await
            .expect("publish")
            .await
            .expect("the stream stores it");
        }
        if !pause.is_zero() {
            tokio::time::sleep(pause).await;
        }
    }
}

/// The checks on every key: each handled `1..=rounds` in order (`repeats`: handlings that
/// may repeat the message before them, a killed replica's in-flight message), and no two
/// handlings of a key overlapping in time.
fn assert_in_order(journal: &[Handling], rounds: u64, repeats_allowed: bool) {
    let mut by_key: BTreeMap<u32, Vec<Handling>> = BTreeMap::new();
    for h in journal {
        by_key.entry(h.key).or_default().push(*h);
    }
    assert_eq!(by_key.len(), KEYS as usize, "every key handled");
    for (key, mut handlings) in by_key {
        handlings.sort_by_key(|h| h.start);
        let mut expected = 1;
        for pair in handlings.windows(2) {
            assert!(
                pair[1].start >= pair[0].end,
                "key {key}: seq {} (replica {}) started before seq {} (replica {}) ended: {} µs of overlap",
                pair[1].seq,
                pair[1].replica,
                pair[0].seq,
                pair[0].replica,
                pair[0].end - pair[1].start
            );
        }
        for h in &handlings {
            if h.seq + 1 == expected && repeats_allowed {
                continue; // the message before, again
            }
            assert_eq!(
                h.seq, expected,
                "key {key}: handled out of order or one is missing: {:?}",
                handlings.iter().map(|h| (h.seq, h.replica)).collect::<Vec<_>>()
            );
            expected += 1;
        }
        assert_eq!(expected, rounds + 1, "key {key}: every message handled");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_share_the_partitions_and_order_per_key_holds_through_a_join_and_a_drain() {
    const ROUNDS: u64 = 30;
    let fx = Fixture::cluster().await;
    let journal = Journal::default();
    let run = |replica: usize| {
        let topology = replica_topology("ORDERS", journal.clone(), replica, Some(7));
        let fx = &fx;
        async move { fx.run(topology).await }
    };
    let first = run(0).await;
    let second = run(1).await;
    let js = fx.jetstream().await;
    // Both replicas hold a share.
    let shares = |running: &Running| {
        running
            .health
            .consumers()
            .iter()
            .filter(|c| c.state.to_string() == "running" || c.state.to_string() == "standby")
            .count()
    };
    assert_eq!(shares(&first), usize::from(PARTITIONS));
    let publisher = {
        let js = js.clone();
        tokio::spawn(async move { publish(&js, 1..ROUNDS + 1, Duration::from_millis(50)).await })
    };
    journal
        .wait_distinct(KEYS as usize * 5, Duration::from_secs(30), "the first rounds handled")
        .await;
    // A third replica joins mid-load, then the first drains mid-load.
    let third = run(2).await;
    journal
        .wait_distinct(KEYS as usize * 12, Duration::from_secs(30), "rounds after the join")
        .await;
    first.stop().await.expect("the first replica drains");
    publisher.await.expect("the publisher ends");
    journal
        .wait_distinct(
            KEYS as usize * ROUNDS as usize,
            Duration::from_secs(60),
            "every message handled",
        )
        .await;
    let all = journal.all();
    assert_in_order(&all, ROUNDS, false);
    let by_replica = |r: usize| all.iter().filter(|h| h.replica == r).count();
    assert!(
        (0..3).all(|r| by_replica(r) > 0),
        "every replica handled a share: {:?}",
        (0..3).map(by_replica).collect::<Vec<_>>()
    );
    Running::stop_all(vec![second, third])
        .await
        .into_iter()
        .for_each(|r| r.expect("clean drain"));
    let _ = fx.server.addrs();
}
