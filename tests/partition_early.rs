//! A partition runs its next message as soon as the one before it is handled, when their keys
//! differ, rather than a round trip later when the server delivers it (docs/PARTITIONS.md,
//! "Running ahead"). Staged on a single server through a loopback link, one partition:
//!
//! - the link holds what the client sends while `held`'s handler returns, so its ack cannot
//!   reach the server and the server delivers nothing more; the next message, of another key,
//!   is handled all the same. The link is then cut: the ack is sent again on the new
//!   connection, the next message's delivery follows it and is acknowledged without running
//!   the handler again. Every message is handled once, in order, and delivered once;
//! - the same with a next message of `held`'s own key: it waits for its delivery (an ack lost
//!   for good would bring `held` back after it), so it runs only once the link is cut;
//! - in both, a third message, of a third key, waits for the delivery of the second: one
//!   message at a time runs before its delivery;
//! - the same with a next message whose handler outlasts half the `ack_wait` while the link
//!   stalls: it is stopped (the session may have lost the partition), runs again when
//!   delivered, and the order holds;
//! - a long run of messages over a few keys: each handled once, in stream order, most of
//!   them early, and each delivered once;
//! - the same under the group's generated permissions without
//!   `$JS.API.STREAM.MSG.GET.<stream>`: every message waits for its delivery, all handled
//!   once, in order.

mod fixture;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use fixture::{Fixture, Running, connect_in_order};
use futures::StreamExt;
use nats_topology::model::QueueDecl;
use nats_topology::{HandlerError, Runtime, Topology};
use nats_topology_testkit::{Direction, Link, eventually};
use tokio::sync::Semaphore;

/// Far more than a reconnection takes.
const WITHIN: Duration = Duration::from_secs(30);

const STREAM: &str = "EARLY_ORDERS";

/// What the handler handled (payloads, in order), and the gates that hold the message `held`,
/// and `next` the first time it runs.
#[derive(Clone)]
struct Gate {
    handled: Arc<Mutex<Vec<String>>>,
    /// `before` waits for this gate (until `held` and `next` are stored, so that the
    /// delivery of `held` says a message follows it).
    before_started: Arc<Mutex<bool>>,
    release_before: Arc<Semaphore>,
    started: Arc<Mutex<bool>>,
    release: Arc<Semaphore>,
    /// `next`'s first run waits for this gate (when `slow_next`).
    slow_next: bool,
    next_started: Arc<Mutex<bool>>,
    release_next: Arc<Semaphore>,
}

/// Records `next, stopped` if dropped before it is defused: the handler's future dropped.
struct Stopped(Option<Arc<Mutex<Vec<String>>>>);

impl Drop for Stopped {
    fn drop(&mut self) {
        if let Some(handled) = self.0.take() {
            handled.lock().unwrap().push("next, stopped".to_owned());
        }
    }
}

impl Gate {
    fn new(slow_next: bool) -> Gate {
        Gate {
            handled: Arc::default(),
            before_started: Arc::default(),
            release_before: Arc::new(Semaphore::new(0)),
            started: Arc::default(),
            release: Arc::new(Semaphore::new(0)),
            slow_next,
            next_started: Arc::default(),
            release_next: Arc::new(Semaphore::new(0)),
        }
    }

    fn handled(&self) -> Vec<String> {
        self.handled.lock().unwrap().clone()
    }

    async fn handles(&self, payload: &str) {
        eventually(WITHIN, &format!("`{payload}` handled"), || {
            let done = self.handled().iter().any(|p| p == payload);
            async move { done.then_some(()) }
        })
        .await;
    }
}

/// One partition of `orders.*.paid`, keyed by the member (the `*`), whose handler records
/// each payload and holds `held` until the gate opens.
fn topology(gate: &Gate, ack_wait: Duration) -> Topology {
    let queue = QueueDecl::new("billing").ack_wait(ack_wait);
    let (stream, consumer) = fixture::one_partition(STREAM, "tests::early_orders", queue);
    let gate = gate.clone();
    Topology::new()
        .stream(stream)
        .consumer(consumer, move |incoming| {
            let gate = gate.clone();
            Box::pin(async move {
                let payload = String::from_utf8_lossy(incoming.payload()).into_owned();
                if payload == "before" {
                    *gate.before_started.lock().unwrap() = true;
                    gate.release_before.acquire().await.expect("open").forget();
                }
                let first = payload == "held"
                    && !std::mem::replace(&mut *gate.started.lock().unwrap(), true);
                if first {
                    gate.release.acquire().await.expect("open").forget();
                }
                let next_first = gate.slow_next
                    && payload == "next"
                    && !std::mem::replace(&mut *gate.next_started.lock().unwrap(), true);
                if next_first {
                    let mut stopped = Stopped(Some(gate.handled.clone()));
                    gate.release_next.acquire().await.expect("open").forget();
                    stopped.0 = None;
                }
                gate.handled.lock().unwrap().push(payload);
                Ok::<(), HandlerError>(())
            })
        })
}

/// How many deliveries the partition made.
async fn deliveries(js: &async_nats::jetstream::Context) -> u64 {
    let stream = js.get_stream(STREAM).await.expect("the stream");
    let mut consumers = stream.consumers();
    let mut deliveries = 0;
    while let Some(info) = consumers.next().await {
        deliveries += info
            .expect("a partition's info")
            .delivered
            .consumer_sequence;
    }
    deliveries
}

/// The consumer's `ack_wait` where `next` outlasts half of it: shorter than the partition's
/// pin (3 s), so that half of it is when an early run is stopped, and when the ack of `held`
/// is too old to be sent again.
const SHORT_ACK_WAIT: Duration = Duration::from_secs(2);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_message_of_another_key_runs_while_the_ack_before_it_is_held() {
    held_ack("orders.8.paid", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_message_of_the_same_key_waits_for_its_delivery() {
    held_ack("orders.7.paid", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_run_early_and_not_delivered_within_half_the_ack_wait_is_stopped() {
    held_ack("orders.8.paid", true).await;
}

/// The first three scenarios of the module documentation: `held` is `orders.7.paid`, `next`
/// is published to `next_subject`; with `slow_next`, its first run waits until it is stopped.
async fn held_ack(next_subject: &'static str, slow_next: bool) {
    let other_key = next_subject != "orders.7.paid";
    let fx = Fixture::start().await;
    let link = Link::start(fx.server.port()).await.expect("a link");
    let client = connect_in_order(&[link.url()]).await;
    let gate = Gate::new(slow_next);
    let ack_wait = match slow_next {
        true => SHORT_ACK_WAIT,
        false => Duration::from_secs(30),
    };
    let builder = fixture::fast(Runtime::builder(client.clone()))
        .partitions_early(true)
        .topology(topology(&gate, ack_wait));
    let run = Running::start(builder).await;
    let js = fx.jetstream().await;
    let publish = |subject, payload| fixture::stored(&js, subject, payload);
    publish("orders.7.paid", "before").await;
    eventually(WITHIN, "the handler of `before` started", || {
        let started = *gate.before_started.lock().unwrap();
        async move { started.then_some(()) }
    })
    .await;
    publish("orders.7.paid", "held").await;
    publish(next_subject, "next").await;
    // Of a third key: it waits for the delivery of `next`, whatever `next` did.
    publish("orders.9.paid", "third").await;
    gate.release_before.add_permits(1);
    eventually(WITHIN, "the handler of `held` started", || {
        let started = *gate.started.lock().unwrap();
        async move { started.then_some(()) }
    })
    .await;
    link.stall_one_way(Direction::Forward);
    gate.release.add_permits(1);
    gate.handles("held").await;
    if slow_next {
        // Half the ack_wait after the delivery of `held`, with the link still stalled.
        gate.handles("next, stopped").await;
        gate.release_next.add_permits(1);
    } else if other_key {
        // Its delivery cannot have come: the ack of `held` is held in the link.
        gate.handles("next").await;
    }
    fixture::written_out(&client).await;
    let before_the_cut = gate.handled();
    fixture::cut_with_what_it_holds(&link, &client).await;
    publish("orders.7.paid", "after").await;
    gate.handles("after").await;
    let deliveries = deliveries(&js).await;
    let status = run.health.consumers();
    let early: u64 = status.iter().map(|c| c.early).sum();
    let handled: u64 = status.iter().map(|c| c.handled).sum();
    let restarts: u64 = status.iter().map(|c| c.restarts).sum();
    run.stop().await.expect("a clean drain");
    if slow_next {
        assert_eq!(
            gate.handled(),
            ["before", "held", "next, stopped", "next", "third", "after"],
            "`next` stopped before its delivery, then handled once delivered, in order"
        );
        assert_eq!(
            deliveries, 6,
            "`held` delivered again after its ack_wait (the ack in the cut link too old to send again), acknowledged without being handled"
        );
        assert_eq!(restarts, 0, "no session lost");
        return;
    }
    // One message ran early while the ack of `held` was held, at most: `next` if its key
    // differs, never `third` before the delivery of `next`.
    let expected: &[&str] = match other_key {
        true => &["before", "held", "next"],
        false => &["before", "held"],
    };
    assert_eq!(before_the_cut, expected, "handled while the link stalled");
    assert_eq!(
        gate.handled(),
        ["before", "held", "next", "third", "after"],
        "each once, in order"
    );
    assert_eq!(
        deliveries, 5,
        "one delivery per message: the ack of `held` was sent again, that of `next` sent on its delivery"
    );
    assert_eq!(handled, 5, "health counts each handled message once");
    if other_key {
        assert!(early >= 1, "`next` ran before its delivery: {status:?}");
    }
    assert_eq!(restarts, 0, "no session lost");
}

/// Messages over `KEYS` keys, round-robin (each next message of another key).
const KEYS: u64 = 5;
const MESSAGES: u64 = 300;

/// A partition of many messages over a few keys, handled with a 2 ms handler; each payload is
/// its number.
fn run_topology(handled: Arc<Mutex<Vec<u64>>>) -> Topology {
    let queue = QueueDecl::new("billing");
    let (stream, consumer) = fixture::one_partition(STREAM, "tests::early_orders", queue);
    Topology::new()
        .stream(stream)
        .consumer(consumer, move |incoming| {
            let handled = handled.clone();
            Box::pin(async move {
                let n: u64 = String::from_utf8_lossy(incoming.payload())
                    .parse()
                    .map_err(|_| HandlerError::permanent("not a number"))?;
                // A handler that waits: the next message is read while it runs.
                tokio::time::sleep(Duration::from_millis(2)).await;
                handled.lock().unwrap().push(n);
                Ok::<(), HandlerError>(())
            })
        })
}

async fn publish_run(js: &async_nats::jetstream::Context) {
    for n in 0..MESSAGES {
        let subject = format!("orders.{}.paid", n % KEYS);
        js.publish(subject, n.to_string().into())
            .await
            .expect("a publish")
            .await
            .expect("stored");
    }
}

/// Publishes the run to `run`, and checks that each message was handled once, in stream
/// order, and delivered once; returns how many ran before their delivery, and the permission
/// denials health reported.
async fn handled_once_each(
    run: Running,
    js: &async_nats::jetstream::Context,
    handled: &Mutex<Vec<u64>>,
) -> (u64, Vec<nats_topology::PermissionDenial>) {
    publish_run(js).await;
    eventually(WITHIN, "every message handled", || {
        let done = handled.lock().unwrap().len() as u64 >= MESSAGES;
        async move { done.then_some(()) }
    })
    .await;
    let early: u64 = run.health.consumers().iter().map(|c| c.early).sum();
    let denials = run.health.denials();
    let deliveries = deliveries(js).await;
    run.stop().await.expect("a clean drain");
    assert_eq!(
        *handled.lock().unwrap(),
        (0..MESSAGES).collect::<Vec<_>>(),
        "each once, in stream order"
    );
    assert_eq!(deliveries, MESSAGES, "each delivered once");
    (early, denials)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_of_messages_is_handled_once_each_in_stream_order_most_of_them_early() {
    let fx = Fixture::start().await;
    let handled = Arc::new(Mutex::new(Vec::new()));
    let client = fx.connect().await;
    let builder = fixture::fast(Runtime::builder(client))
        .partitions_early(true)
        .topology(run_topology(handled.clone()));
    let run = Running::start(builder).await;
    let js = fx.jetstream().await;
    let (early, denials) = handled_once_each(run, &js, &handled).await;
    assert!(denials.is_empty(), "nothing denied: {denials:?}");
    // The publishes race the handlers: at first each message is read as soon as it is stored.
    assert!(
        early >= MESSAGES / 4,
        "most messages ran before their delivery: {early} of {MESSAGES}"
    );
}

/// The group's generated permissions, less the read of the stream's messages: each message
/// waits for its delivery, and every one is still handled once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_grant_to_read_ahead_every_message_waits_for_its_delivery() {
    use nats_topology::export::{self, Role, Verb};
    const SERVICE: &str = "billing";
    let handled = Arc::new(Mutex::new(Vec::new()));
    let topology = run_topology(handled.clone());
    let role = Role::owner(SERVICE);
    let permissions = export::permissions(&topology, &role);
    let read = format!("$JS.API.STREAM.MSG.GET.{STREAM}");
    assert!(
        permissions.allows(Verb::Publish, &read),
        "the read ahead is granted:\n{}",
        permissions.permissions_map()
    );
    let without = fixture::without_grant(&permissions, &read);
    assert!(!without.allows(Verb::Publish, &read));
    let server = nats_topology_testkit::NatsServer::builder()
        .config(fixture::users_config(&[(SERVICE, "pw", &without)]))
        .probe_user("admin", "admin")
        .start()
        .await
        .expect("nats-server starts");
    let client = fixture::client_of(&server.url(), SERVICE, "pw", role.inbox_prefix()).await;
    let run = Running::start(
        fixture::fast(Runtime::builder(client))
            .partitions_early(true)
            .topology(topology),
    )
    .await;
    let js = async_nats::jetstream::new(fixture::admin_of(&server.url()).await);
    let (early, denials) = handled_once_each(run, &js, &handled).await;
    assert_eq!(early, 0, "nothing ran before its delivery");
    // Health names the denial (the service is not ready until it is granted), and the
    // session stopped reading once the server reported it.
    let [denial] = denials.as_slice() else {
        panic!("one denial, of the read: {denials:?}");
    };
    assert_eq!(denial.subject, read);
    assert!(
        denial.count <= 5,
        "the session stops reading once it is refused: {} refusals",
        denial.count
    );
}
