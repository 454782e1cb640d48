//! `#[broadcast(ordered)]` against a real server: each instance rebuilds a read model from
//! the whole stream, one message at a time in stream order, each message once; `replaying`
//! (not ready) with how far behind while it catches up, `running` after. An instance
//! restarted mid-replay rebuilds exactly the stream's contents; a relay consumer deleted
//! mid-replay, or a handler that fails on one message, restarts the replay after the last
//! message handled and it ends with the same contents.
//!
//! Every test compares the whole model with what the stream holds, never log lines.

mod fixture;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream;
use fixture::{Fixture, Running};
use nats_topology::{
    ConsumerState, Context, HandlerError, Health, Relay, Runtime, State, broadcast, stream,
};
use nats_topology_testkit::{Cut, Direction, Link, eventually};
use serde::{Deserialize, Serialize};

/// Messages in the stream: enough that a replay is well under way when a fault is staged.
const MESSAGES: u64 = 3_000;

/// How long a test waits for a replay to reach a point: far more than it takes, short enough
/// that a replay stuck before a lost message fails quickly.
const WITHIN: Duration = Duration::from_secs(20);

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
struct Entry {
    n: u64,
}

#[stream(name = "LEDGER", subjects = ["ledger.>"])]
pub struct Ledger;

/// One instance's read model: each entry with the stream sequence it came from, in the order
/// handled; the handler handles entries only up to `open` (a gate the test moves), and fails
/// once on the entry `fail_once` names.
#[derive(Clone, Default)]
struct Model {
    entries: Arc<Mutex<Vec<(u64, Entry)>>>,
    open: Arc<tokio::sync::watch::Sender<u64>>,
    fail_once: Arc<AtomicU64>,
}

impl Model {
    fn opened_to(limit: u64) -> Model {
        let model = Model::default();
        model.open.send_replace(limit);
        model
    }
    fn len(&self) -> u64 {
        self.entries.lock().unwrap().len() as u64
    }
    fn entries(&self) -> Vec<(u64, Entry)> {
        self.entries.lock().unwrap().clone()
    }
    fn open_to(&self, limit: u64) {
        self.open.send_replace(limit);
    }
}

#[broadcast(stream = Ledger, subject = "ledger.>", ordered)]
async fn balances(entry: Entry, cx: Context, model: State<Model>) -> Result<(), HandlerError> {
    let mut open = model.open.subscribe();
    let next = model.len() + 1;
    open.wait_for(|limit| next <= *limit)
        .await
        .expect("the model outlives its handlers");
    if model.fail_once.load(Ordering::Relaxed) == entry.n {
        model.fail_once.store(0, Ordering::Relaxed);
        return Err(HandlerError::new("the read model's store is away"));
    }
    model
        .entries
        .lock()
        .unwrap()
        .push((cx.stream_sequence(), entry));
    Ok(())
}

/// The stream's whole contents as a complete model holds them: entry `n` at sequence `n`.
fn contents() -> Vec<(u64, Entry)> {
    (1..=MESSAGES).map(|n| (n, Entry { n })).collect()
}

/// Publishes entries 1 to `MESSAGES` on ten subjects, in order.
async fn fill(js: &jetstream::Context) {
    let mut acks = Vec::new();
    for n in 1..=MESSAGES {
        let payload = serde_json::to_vec(&Entry { n }).unwrap();
        acks.push(
            js.publish(format!("ledger.account{}", n % 10), payload.into())
                .await
                .expect("published"),
        );
    }
    for ack in acks {
        ack.await.expect("stored");
    }
}

/// An instance recording into `model`.
async fn runtime(fx: &Fixture, model: &Model) -> Runtime {
    runtime_on(fx.connect().await, model)
}

/// An instance recording into `model`, on `client`.
fn runtime_on(client: async_nats::Client, model: &Model) -> Runtime {
    fixture::fast(Runtime::builder(client))
        .state(model.clone())
        .build()
        .expect("every state given")
}

/// `runtime` started, with its relay.
fn start(runtime: Runtime) -> (Running, Relay) {
    let relay = runtime.relay("balances").expect("the ordered relay");
    (Running::spawn(runtime), relay)
}

/// An instance recording into `model`, started on a stream filled first.
async fn filled_then_started(fx: &Fixture, model: &Model) -> (Running, Relay) {
    filled_then_run(fx, runtime(fx, model).await).await
}

/// `runtime` started on a stream filled first.
async fn filled_then_run(fx: &Fixture, runtime: Runtime) -> (Running, Relay) {
    runtime
        .provision()
        .await
        .expect("the stream is provisioned");
    fill(&fx.jetstream().await).await;
    start(runtime)
}

/// Waits until `model` holds `n` entries.
async fn holds(model: &Model, n: u64, what: &str) {
    eventually(WITHIN, what, || {
        let len = model.len();
        async move { (len >= n).then_some(()) }
    })
    .await;
}

/// The relay's state in `health`.
fn relay_state(health: &Health) -> ConsumerState {
    health
        .consumers()
        .into_iter()
        .find(|c| c.handler.ends_with("::balances"))
        .expect("the relay's status")
        .state
}

/// Fails naming the first difference between a model and the stream's contents.
fn assert_complete(model: &Model, who: &str) {
    let entries = model.entries();
    let expected = contents();
    if let Some(i) = (0..entries.len().min(expected.len())).find(|&i| entries[i] != expected[i]) {
        panic!(
            "{who}: entry {i} is {:?} where the stream holds {:?} (a message skipped, repeated \
             or out of order)",
            entries[i], expected[i]
        );
    }
    assert_eq!(
        entries.len(),
        expected.len(),
        "{who}: the model holds every message of the stream, once"
    );
}

/// An instance stopped a third of the way through its replay, and its successor (a new
/// instance: a new relay, an empty model) rebuilt exactly the stream's contents; while it
/// replayed, it said so with how far behind it was, and was not ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_restarted_mid_replay_rebuilds_exactly_the_streams_contents() {
    let fx = Fixture::start().await;
    let js = fx.jetstream().await;
    let first = Model::opened_to(1_000);
    let (running, _) = filled_then_started(&fx, &first).await;
    holds(&first, 1_000, "the first instance replays a third").await;
    // Held after its 1000th message (the gate): 2000 behind once that message is settled.
    let held = ConsumerState::Replaying {
        behind: MESSAGES - 1_000,
    };
    eventually(WITHIN, "replaying, 2000 behind", || {
        let state = relay_state(&running.health);
        let held = held.clone();
        async move { (state == held).then_some(()) }
    })
    .await;
    assert!(!running.health.ready(), "not ready while it replays");
    first.open_to(u64::MAX);
    running.stop().await.expect("a clean drain mid-replay");

    let second = Model::opened_to(u64::MAX);
    let (running, relay) = start(runtime(&fx, &second).await);
    holds(
        &second,
        MESSAGES,
        "the restarted instance replays the stream",
    )
    .await;
    assert_complete(&second, "the restarted instance");
    eventually(WITHIN, "the relay runs once caught up", || {
        let state = relay_state(&running.health);
        async move { (state == ConsumerState::Running).then_some(()) }
    })
    .await;
    fixture::wait_ready(&running.health, WITHIN).await;
    assert!(relay.is_running());

    // Caught up, it goes on with what is published next, in order.
    js.publish("ledger.account1", br#"{"n":3001}"#.as_slice().into())
        .await
        .unwrap()
        .await
        .unwrap();
    holds(&second, MESSAGES + 1, "the next message").await;
    assert_eq!(
        second.entries().last(),
        Some(&(MESSAGES + 1, Entry { n: MESSAGES + 1 }))
    );
    running.stop().await.expect("a clean drain");
}

/// The relay's consumer deleted on the server a third of the way through the replay: the
/// replay restarts after the last message handled and ends with the stream's contents, none
/// twice; and a handler that fails once, two thirds in, is given that message again before
/// any later one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_consumer_or_a_failed_message_restarts_the_replay_after_the_last_handled() {
    let fx = Fixture::start().await;
    let js = fx.jetstream().await;
    let model = Model::opened_to(1_000);
    model.fail_once.store(2_000, Ordering::Relaxed);
    let (running, relay) = filled_then_started(&fx, &model).await;
    holds(&model, 1_000, "a third replayed").await;
    let consumer = relay.consumer();
    fixture::delete_consumer(&js, "LEDGER", &consumer).await;
    model.open_to(u64::MAX);
    holds(&model, MESSAGES, "the replay ends").await;
    assert_complete(&model, "after a lost consumer and a failed message");
    assert_eq!(
        model.fail_once.load(Ordering::Relaxed),
        0,
        "the handler failed once, on entry 2000"
    );
    let status = running
        .health
        .consumers()
        .into_iter()
        .find(|c| c.consumer == consumer)
        .expect("the relay's status");
    assert!(
        status.restarts >= 2,
        "restarted for the lost consumer and for the failure: {status}"
    );
    assert_eq!(status.failed, 1, "{status}");
    fixture::wait_ready(&running.health, WITHIN).await;
    running.stop().await.expect("a clean drain");
}

/// Deliveries lost on the way: the link from the server stalls while the replay reads on (the
/// server delivers into it), then is cut, and those deliveries are gone. The next delivery
/// after the reconnection is out of sequence: the replay restarts at once after the last
/// message handled, rather than handling later messages first (the replay takes no acks: the
/// server never delivers the lost ones again); it ends with the stream's contents.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_lost_with_a_cut_link_restart_the_replay_at_once_in_order() {
    let fx = Fixture::start().await;
    let js = fx.jetstream().await;
    let link = Link::start(fx.server.port()).await.expect("a link");
    let client = fixture::connect_in_order(&[link.url()]).await;
    let model = Model::opened_to(1_000);
    let (running, relay) = filled_then_run(&fx, runtime_on(client, &model)).await;
    holds(&model, 1_000, "a third replayed").await;

    let delivered = |js: jetstream::Context, consumer: String| async move {
        js.get_stream("LEDGER")
            .await
            .ok()?
            .consumer_info(&consumer)
            .await
            .ok()
            .map(|info| info.delivered.consumer_sequence)
    };
    // The gate holds the replay: what the server has delivered so far has reached the
    // instance, and no more is asked for until it moves on.
    let before = delivered(js.clone(), relay.consumer())
        .await
        .expect("the relay's info");
    link.stall_one_way(Direction::Back);
    model.open_to(u64::MAX);
    // The instance handles what it holds, and asks for more (its requests still reach the
    // server), which the server delivers into the stalled link.
    eventually(WITHIN, "deliveries into the stalled link", || {
        let next = delivered(js.clone(), relay.consumer());
        async move { next.await.filter(|&d| d > before + 10).map(|_| ()) }
    })
    .await;
    let handled_before_cut = model.len();
    let accepted = link.accepted();
    link.cut(Cut::Reset);
    // Healed only once the client connects again: the old connection, and what the stall
    // held in it, is gone.
    eventually(WITHIN, "the client to connect again", || {
        let again = link.accepted() > accepted;
        async move { again.then_some(()) }
    })
    .await;
    link.heal();

    holds(&model, MESSAGES, "the replay ends after the cut").await;
    assert!(handled_before_cut < MESSAGES, "the cut came mid-replay");
    assert_complete(&model, "after deliveries lost with a cut link");
    let status = running
        .health
        .consumers()
        .into_iter()
        .find(|c| c.consumer == relay.consumer())
        .expect("the relay's status");
    assert!(status.restarts >= 1, "restarted after the gap: {status}");
    fixture::wait_ready(&running.health, WITHIN).await;
    running.stop().await.expect("a clean drain");
}

/// The stream deleted and created again after the replay caught up: the relay replays the new
/// stream from its first message (its sequences start again at 1, which tells a read model to
/// start over), each message once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_created_again_is_replayed_from_its_first_message() {
    let fx = Fixture::start().await;
    let js = fx.jetstream().await;
    let model = Model::opened_to(u64::MAX);
    let (running, _) = filled_then_started(&fx, &model).await;
    holds(&model, MESSAGES, "the first stream replayed").await;

    js.delete_stream("LEDGER")
        .await
        .expect("the stream deleted");
    eventually(WITHIN, "the stream created again by the runtime", || {
        let js = js.clone();
        async move { js.get_stream("LEDGER").await.ok() }
    })
    .await;
    for n in 1..=5u64 {
        let payload = serde_json::to_vec(&Entry { n: 10_000 + n }).unwrap();
        js.publish("ledger.account1", payload.into())
            .await
            .expect("published")
            .await
            .expect("stored in the new stream");
    }
    holds(&model, MESSAGES + 5, "the new stream replayed").await;
    let entries = model.entries();
    assert_eq!(entries[..MESSAGES as usize], contents()[..]);
    let again: Vec<(u64, Entry)> = (1..=5).map(|n| (n, Entry { n: 10_000 + n })).collect();
    assert_eq!(
        entries[MESSAGES as usize..],
        again[..],
        "the new stream, from 1"
    );
    fixture::wait_ready(&running.health, WITHIN).await;
    running.stop().await.expect("a clean drain");
}
