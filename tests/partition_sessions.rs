//! A partition's session lost while a handler runs, staged on a single server by deleting the
//! partition's consumer under it. The handler goes on (a lost session leaves its handlers to
//! finish); the consumer, created again at its ack floor, delivers that message again to the
//! next session, then the messages after it. The next session runs nothing of the key beside
//! the handler still running: the delivery of that message waits for it, and is acknowledged
//! without running the handler again; the key's next message follows, in order. The same with
//! running ahead (`RuntimeBuilder::partitions_early`) off and on. (With one partition, the
//! replica's one seat stays with the earlier session's handler, so the key rule that keeps
//! running ahead off such a key is not what holds in the second: the seat is.)
//!
//! And the drain beside it: the runtime stopped while that delivery waits and the handler runs
//! for six times the `ack_wait`, a pull request of the partition's next holder waiting. The
//! drain waits for the handler, the delivery kept alive meanwhile (the handler's progress acks
//! reach the consumer created again, which takes them by stream sequence; the drain sends its
//! own for what waits), then acknowledges it: the next holder is given the message after it,
//! never that one while it runs here.
//!
//! Across replicas, the same holds because the server delivers a partition one message at a
//! time to the replica it pins; within one replica, sessions follow one another while handlers
//! outlive them, and the server's view of the consumer may have moved on meanwhile (a consumer
//! created again, a new leader that never heard of a delivery).

mod fixture;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use fixture::{Fixture, Running};
use nats_topology::model::QueueDecl;
use nats_topology::{HandlerError, Runtime, Topology};
use nats_topology_testkit::eventually;
use tokio::sync::Semaphore;

/// Far more than a consumer's re-creation takes.
const WITHIN: Duration = Duration::from_secs(30);

const STREAM: &str = "SESSION_ORDERS";

/// The partition's only consumer.
const CONSUMER: &str = "billing-p0";

/// Each handler's start and end, in order (`(payload, "start" | "end")`), and the gate that
/// holds the first run of `first`, or how long it works instead.
#[derive(Clone)]
struct Journal {
    events: Arc<Mutex<Vec<(String, &'static str)>>>,
    release: Arc<Semaphore>,
    first_works: Option<Duration>,
}

impl Journal {
    fn new(first_works: Option<Duration>) -> Journal {
        Journal {
            events: Arc::default(),
            release: Arc::new(Semaphore::new(0)),
            first_works,
        }
    }

    fn events(&self) -> Vec<(String, &'static str)> {
        self.events.lock().unwrap().clone()
    }

    fn push(&self, payload: &str, what: &'static str) {
        self.events.lock().unwrap().push((payload.to_owned(), what));
    }

    async fn seen(&self, payload: &str, what: &'static str) {
        eventually(WITHIN, &format!("`{payload}` {what}"), || {
            let seen = self
                .events()
                .iter()
                .any(|(p, w)| p == payload && *w == what);
            async move { seen.then_some(()) }
        })
        .await;
    }

    /// What was recorded of the messages of `payloads`.
    fn of(&self, payloads: &[&str]) -> Vec<(String, &'static str)> {
        let events = self.events();
        events
            .into_iter()
            .filter(|(p, _)| payloads.contains(&p.as_str()))
            .collect()
    }
}

/// One partition of `orders.*.paid`, keyed by the member (the `*`), whose handler records each
/// start and end and holds the first run of `first` until the gate opens (or works as long as
/// the journal says).
fn topology(journal: &Journal, ack_wait: Duration) -> Topology {
    let queue = QueueDecl::new("billing").ack_wait(ack_wait);
    let (stream, consumer) = fixture::one_partition(STREAM, "tests::session_orders", queue);
    let journal = journal.clone();
    Topology::new()
        .stream(stream)
        .consumer(consumer, move |incoming| {
            let journal = journal.clone();
            Box::pin(async move {
                let payload = String::from_utf8_lossy(incoming.payload()).into_owned();
                let first_run =
                    payload == "first" && !journal.events().iter().any(|(p, _)| p == "first");
                journal.push(&payload, "start");
                match journal.first_works {
                    // The behaviour under test: a handler that outlasts the ack_wait.
                    Some(works) if first_run => tokio::time::sleep(works).await,
                    _ if first_run => journal.release.acquire().await.expect("open").forget(),
                    _ => {}
                }
                journal.push(&payload, "end");
                Ok::<(), HandlerError>(())
            })
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_lost_while_a_handler_runs_runs_nothing_of_its_key_beside_it() {
    session_lost(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_lost_while_a_handler_runs_runs_nothing_of_its_key_beside_it_running_ahead() {
    session_lost(true).await;
}

/// Publishes `first`, waits for its handler, publishes `other` (another key) and `second` (the
/// same key), then deletes the partition's consumer and waits for the consumer the runtime
/// creates again to deliver `first` again, to the runtime's connection.
async fn lose_the_session(
    fx: &Fixture<nats_topology_testkit::NatsServer>,
    client: &async_nats::Client,
    journal: &Journal,
) -> async_nats::jetstream::stream::Stream {
    let js = fx.jetstream().await;
    let publish = |subject, payload| fixture::stored(&js, subject, payload);
    publish("orders.7.paid", "first").await;
    journal.seen("first", "start").await;
    // Another key, then the next message of `first`'s.
    publish("orders.8.paid", "other").await;
    publish("orders.7.paid", "second").await;
    let stream = js.get_stream(STREAM).await.expect("the stream");
    stream
        .delete_consumer(CONSUMER)
        .await
        .expect("the partition's consumer deleted");
    // Created again by the runtime at its ack floor, it delivers `first` again, to the next
    // session, while the handler of the first delivery still runs.
    eventually(
        WITHIN,
        "`first` delivered again by the consumer created again",
        || {
            let stream = stream.clone();
            async move {
                let info = stream.consumer_info(CONSUMER).await.ok()?;
                (info.delivered.stream_sequence >= 1).then_some(())
            }
        },
    )
    .await;
    // It reached the runtime's connection (the server answers a ping after what it sent).
    client.flush().await.expect("a round trip");
    stream
}

async fn session_lost(early: bool) {
    let fx = Fixture::start().await;
    let client = fx.connect().await;
    let journal = Journal::new(None);
    let builder = fixture::fast(Runtime::builder(client.clone()))
        .partitions_early(early)
        .topology(topology(&journal, Duration::from_secs(30)));
    let run = Running::start(builder).await;
    let stream = lose_the_session(&fx, &client, &journal).await;
    let before_release = journal.of(&["first", "second"]);
    journal.release.add_permits(1);
    journal.seen("second", "end").await;
    journal.seen("other", "end").await;
    // `second` may have run before its delivery: every message delivered and acknowledged.
    let info = eventually(WITHIN, "every message delivered and acknowledged", || {
        let stream = stream.clone();
        async move {
            let info = stream.consumer_info(CONSUMER).await.ok()?;
            let done = info.delivered.stream_sequence == 3 && info.num_ack_pending == 0;
            done.then_some(info)
        }
    })
    .await;
    eventually(WITHIN, "health counts three messages handled", || {
        let handled: u64 = run.health.consumers().iter().map(|c| c.handled).sum();
        async move { (handled >= 3).then_some(()) }
    })
    .await;
    let status = run.health.consumers();
    let handled: u64 = status.iter().map(|c| c.handled).sum();
    let restarts: u64 = status.iter().map(|c| c.restarts).sum();
    let early_count: u64 = status.iter().map(|c| c.early).sum();
    run.stop().await.expect("a clean drain");
    assert_eq!(
        before_release,
        [("first".to_owned(), "start")],
        "nothing of `first`'s key ran beside its handler"
    );
    assert_eq!(
        journal.of(&["first", "second"]),
        [
            ("first".to_owned(), "start"),
            ("first".to_owned(), "end"),
            ("second".to_owned(), "start"),
            ("second".to_owned(), "end"),
        ],
        "the key's messages once each, in order, one at a time"
    );
    assert_eq!(
        journal.of(&["other"]),
        [("other".to_owned(), "start"), ("other".to_owned(), "end")],
        "the other key's message once"
    );
    assert_eq!(
        info.delivered.consumer_sequence, 3,
        "the consumer created again delivered `first` (acknowledged without its handler), `other` and `second` once each"
    );
    assert_eq!(info.num_ack_pending, 0, "every delivery acknowledged");
    assert!(restarts >= 1, "the session was lost: {status:?}");
    assert_eq!(
        handled, 3,
        "health counts each message handled once: {status:?}"
    );
    if !early {
        assert_eq!(early_count, 0, "nothing ran early: {status:?}");
    }
}

/// The drain's `ack_wait`: the handler of `first` outlasts it six times, and the pin's time to
/// live (3 s) with room to spare.
const SHORT_ACK_WAIT: Duration = Duration::from_secs(2);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_keeps_a_delivery_alive_while_an_earlier_sessions_handler_of_its_key_runs() {
    let fx = Fixture::start().await;
    let client = fx.connect().await;
    let journal = Journal::new(Some(SHORT_ACK_WAIT * 6));
    // Longer than the handler: the drain waits for it.
    let builder = fixture::fast(Runtime::builder(client.clone()))
        .grace_period(Duration::from_secs(30))
        .topology(topology(&journal, SHORT_ACK_WAIT));
    let run = Running::start(builder).await;
    let stream = lose_the_session(&fx, &client, &journal).await;
    // The partition's next holder, as the server sees it: a pull request of its priority group,
    // pinned once the draining runtime's pin lapses (it pulls no more).
    let next_holder = fx.connect().await;
    let pulled = tokio::spawn(pinned_pull(next_holder, Duration::from_secs(20)));
    // The drain waits for the handler while `first`'s delivery to the new session waits for
    // it; the runtime's pin lapses meanwhile (3 s after its last pull request, which expires
    // within 1.5 s), well before the handler ends.
    run.stop().await.expect("a clean drain");
    let pulled = pulled.await.expect("the pull");
    assert_eq!(
        pulled.as_deref(),
        Some("other"),
        "the next holder was given the message after `first` once `first` was acknowledged, not `first` while its handler ran"
    );
    let info = stream
        .consumer_info(CONSUMER)
        .await
        .expect("the partition's consumer");
    assert_eq!(
        journal.of(&["first"]),
        [("first".to_owned(), "start"), ("first".to_owned(), "end")],
        "`first` handled once"
    );
    assert_eq!(
        (info.delivered.consumer_sequence, info.num_redelivered),
        (2, 0),
        "`first` delivered once by the consumer created again (kept alive through the drain, not given again after its ack_wait), then `other` to the next holder"
    );
    assert_eq!(
        info.ack_floor.stream_sequence, 1,
        "`first` acknowledged without its handler once the handler of its first delivery ended"
    );
}

/// The first message the partition's consumer delivers within `expires` to one pull request of
/// its priority group (`replicas`), as another replica's: its payload.
async fn pinned_pull(client: async_nats::Client, expires: Duration) -> Option<String> {
    use futures::StreamExt;
    let inbox = client.new_inbox();
    let mut replies = client
        .subscribe(inbox.clone())
        .await
        .expect("a subscription");
    let request = serde_json::json!({
        "batch": 1,
        "expires": expires.as_nanos() as u64,
        "group": "replicas",
    });
    client
        .publish_with_reply(
            format!("$JS.API.CONSUMER.MSG.NEXT.{STREAM}.{CONSUMER}"),
            inbox,
            request.to_string().into(),
        )
        .await
        .expect("a pull request");
    client.flush().await.expect("sent");
    let deadline = tokio::time::Instant::now() + expires;
    while let Ok(Some(reply)) = tokio::time::timeout_at(deadline, replies.next()).await {
        // Status replies (a timeout, a heartbeat) carry no payload.
        if reply.status.is_none() && !reply.payload.is_empty() {
            return Some(String::from_utf8_lossy(&reply.payload).into_owned());
        }
    }
    None
}
