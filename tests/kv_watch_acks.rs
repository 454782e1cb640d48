//! A watch's ack and its connection: the watch handles one revision at a time
//! (`max_ack_pending = 1`), so an ack lost with a connection would hold every later revision
//! until the lost one's `ack_wait`, while the consumer's heartbeats said all was well. Staged on
//! a single server through a loopback link: the link stalls (what the client sends waits in it)
//! around the ack of one revision, then is cut, which loses what it holds; the client connects
//! again through the healed link.
//!
//! - the handler returned before the cut: its ack is lost with the connection; the watch sends
//!   it again through the new connection, so the server never delivers that revision again;
//! - right beside it, the handler still running at the cut: its ack goes through the new
//!   connection.
//!
//! Either way every revision is handled once, in order, no revision is delivered twice, the
//! consumer is kept (no restart) and the watch says `running` again.
//!
//! Beside them, the consumer lost rather than the connection (deleted while the handler runs):
//! the revision, delivered again by the consumer created again, is still handled once.

mod fixture;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use fixture::{Fixture, Running, connect_in_order};
use futures::StreamExt;
use nats_topology::bucket::KvEntry;
use nats_topology::{ConsumerState, HandlerError, Runtime, State, kv_bucket, kv_watch};
use nats_topology_testkit::{Direction, Link, eventually};
use tokio::sync::Semaphore;

/// Far more than a re-creation takes.
const WITHIN: Duration = Duration::from_secs(30);

#[kv_bucket(name = "WATCHED_ACKS", value = u64, history = 8)]
struct WatchedAcks;

/// What the watch handled, and the gate that holds the handler of `k.held`.
#[derive(Clone)]
struct Gate {
    handled: Arc<Mutex<Vec<(String, u64)>>>,
    started: Arc<Mutex<bool>>,
    release: Arc<Semaphore>,
}

impl Gate {
    fn new() -> Gate {
        Gate {
            handled: Arc::default(),
            started: Arc::default(),
            release: Arc::new(Semaphore::new(0)),
        }
    }

    fn keys(&self) -> Vec<String> {
        let handled = self.handled.lock().unwrap();
        handled.iter().map(|(key, _)| key.clone()).collect()
    }

    async fn handles(&self, key: &str) {
        eventually(WITHIN, &format!("`{key}` handled"), || {
            let done = self.keys().iter().any(|k| k == key);
            async move { done.then_some(()) }
        })
        .await;
    }
}

#[kv_watch(bucket = WatchedAcks, keys = "k.>")]
async fn on_change(entry: KvEntry<u64>, gate: State<Gate>) -> Result<(), HandlerError> {
    if entry.key == "k.held" {
        *gate.started.lock().unwrap() = true;
        gate.release.acquire().await.expect("open").forget();
    }
    gate.handled
        .lock()
        .unwrap()
        .push((entry.key, entry.revision));
    Ok(())
}

/// When the link is cut, relative to the held revision's handler.
#[derive(Clone, Copy, PartialEq)]
enum CutWhile {
    /// It returned, and its ack was written to the stalled link.
    Acked,
    /// It still runs; it returns once the client is connected again.
    Running,
}

/// What the scenario saw.
struct Seen {
    /// The keys handled, in order.
    keys: Vec<String>,
    /// The watch's sessions lost and started again.
    restarts: u64,
    /// Deliveries the watch's consumer made (its info's last delivered consumer sequence):
    /// one per revision, unless one was delivered again.
    deliveries: u64,
}

/// The watch running on `client`: `k.before` put and handled, then `k.held` put and its
/// handler started (held by the gate). Returns the watch, the gate, and how to put a value.
async fn holding_k_held(
    fx: &Fixture,
    client: &async_nats::Client,
) -> (Running, Gate, async_nats::jetstream::Context, Put) {
    let gate = Gate::new();
    let builder = fixture::fast(Runtime::builder(client.clone())).state(gate.clone());
    let run = Running::start(builder).await;
    let js = fx.jetstream().await;
    let store = eventually(WITHIN, "the bucket", || {
        let js = js.clone();
        async move { js.get_key_value("WATCHED_ACKS").await.ok() }
    })
    .await;
    let put = Put(store);
    put.put("k.before", 1).await;
    gate.handles("k.before").await;
    put.put("k.held", 2).await;
    eventually(WITHIN, "the handler of `k.held` started", || {
        let started = *gate.started.lock().unwrap();
        async move { started.then_some(()) }
    })
    .await;
    (run, gate, js, put)
}

/// Puts values into the watched bucket.
struct Put(async_nats::jetstream::kv::Store);

impl Put {
    async fn put(&self, key: &str, value: u64) {
        let value = serde_json::to_vec(&value).unwrap().into();
        self.0.put(key, value).await.expect("a put");
    }
}

/// The scenario: `k.before` handled; `k.held` held by its handler while the link stalls what
/// the client sends; the link cut (see [`CutWhile`]) and healed; `k.after` put and handled.
async fn held_ack_across_a_cut(cut_while: CutWhile) -> Seen {
    fixture::trace();
    let fx = Fixture::start().await;
    let link = Link::start(fx.server.port()).await.expect("a link");
    let client = connect_in_order(&[link.url()]).await;
    let (run, gate, js, put) = holding_k_held(&fx, &client).await;
    link.stall_one_way(Direction::Forward);
    if cut_while == CutWhile::Acked {
        gate.release.add_permits(1);
        gate.handles("k.held").await;
        eventually(WITHIN, "the ack of `k.held` settled", || {
            let settled = run.health.consumers()[0].handled >= 2;
            async move { settled.then_some(()) }
        })
        .await;
        fixture::written_out(&client).await;
    }
    fixture::cut_with_what_it_holds(&link, &client).await;
    if cut_while == CutWhile::Running {
        gate.release.add_permits(1);
        gate.handles("k.held").await;
    }
    put.put("k.after", 3).await;
    gate.handles("k.after").await;
    eventually(WITHIN, "the watch running", || {
        let running = run.health.consumers()[0].state == ConsumerState::Running;
        async move { running.then_some(()) }
    })
    .await;
    let restarts = run.health.consumers()[0].restarts;
    let mut consumers = js
        .get_stream("KV_WATCHED_ACKS")
        .await
        .expect("the bucket's stream")
        .consumers();
    let info = consumers
        .next()
        .await
        .expect("the watch's consumer")
        .expect("its info");
    run.stop().await.expect("a clean drain");
    Seen {
        keys: gate.keys(),
        restarts,
        deliveries: info.delivered.consumer_sequence,
    }
}

fn assert_seen(seen: &Seen) {
    assert_eq!(
        seen.keys,
        ["k.before", "k.held", "k.after"],
        "each once, in order"
    );
    assert_eq!(
        seen.deliveries, 3,
        "one delivery per revision, none delivered again: the ack of `k.held` reached the server"
    );
    assert_eq!(seen.restarts, 0, "the consumer kept");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ack_lost_with_the_connection_is_sent_again() {
    assert_seen(&held_ack_across_a_cut(CutWhile::Acked).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_running_through_a_reconnection_acks_through_the_new_connection() {
    assert_seen(&held_ack_across_a_cut(CutWhile::Running).await);
}

/// Beside the cut: the watch's consumer deleted while the handler of `k.held` runs. The watch
/// creates it again after the last revision it handled, `k.before`, so the new consumer
/// delivers `k.held` again to the next session while the first handler still runs; that
/// delivery waits for the handler, then is acknowledged without calling the handler again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revision_running_when_the_consumer_is_lost_is_handled_once() {
    let fx = Fixture::start().await;
    let client = fx.connect().await;
    let (run, gate, js, put) = holding_k_held(&fx, &client).await;
    let consumer = run.health.consumers()[0].consumer.clone();
    fixture::delete_consumer(&js, "KV_WATCHED_ACKS", &consumer).await;
    let stream = js.get_stream("KV_WATCHED_ACKS").await.expect("the stream");
    // The consumer created again (under the same name) delivered `k.held` again.
    eventually(WITHIN, "`k.held` delivered again", || {
        let stream = stream.clone();
        let consumer = consumer.clone();
        async move {
            let info = stream.consumer_info(&consumer).await.ok()?;
            (info.delivered.consumer_sequence >= 1).then_some(())
        }
    })
    .await;
    // It reached the watch's connection (the server answers a ping after what it sent).
    client.flush().await.expect("a round trip");
    // Two: a second run of `k.held`, were there one, would not stop here but show below.
    gate.release.add_permits(2);
    put.put("k.after", 3).await;
    gate.handles("k.after").await;
    let restarts = run.health.consumers()[0].restarts;
    run.stop().await.expect("a clean drain");
    assert_eq!(
        gate.keys(),
        ["k.before", "k.held", "k.after"],
        "each once, in order"
    );
    assert!(restarts >= 1, "the watch's session was lost");
}
