//! The rare settles go through the consumer's acks like every other: the progress acks that
//! hold a message while its dead letter cannot be published yet are confirmed requests with
//! `ack = "confirmed"` and plain publishes otherwise, and the term after them is confirmed in
//! time; a drain returns the messages of handlers it stopped with a nak only on a consumer
//! that takes acks (an ordered replay takes none, and keeps its own place).
//!
//! What the runtime sends is read on the wire: a core subscription on `$JS.ACK.>` sees every
//! ack, nak, term and progress ack, with the reply subject a confirmed one carries.

mod fixture;

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::stream;
use fixture::{Fixture, Running};
use futures::{FutureExt, StreamExt};
use nats_topology::model::{AckMode, BroadcastDecl, ConsumerDecl, QueueDecl, StreamRef};
use nats_topology::{HandlerError, RetryPolicy, Topology};
use nats_topology_testkit::eventually;
use tokio::sync::Mutex;

/// One settle seen on the wire.
#[derive(Debug, Clone)]
struct Settle {
    stream: String,
    consumer: String,
    /// `+ACK`, `-NAK`, `+TERM`, `+WPI`.
    kind: String,
    /// Sent as a request (a confirmed one).
    confirmed: bool,
}

/// Reads `$JS.ACK.<stream>.<consumer>.…` (and the form with a domain and account hash).
fn settle(message: &async_nats::Message) -> Option<Settle> {
    let tokens: Vec<&str> = message.subject.split('.').collect();
    let (stream, consumer) = match tokens.len() {
        9 => (tokens[2], tokens[3]),
        n if n >= 11 => (tokens[4], tokens[5]),
        _ => return None,
    };
    let kind = String::from_utf8_lossy(&message.payload);
    Some(Settle {
        stream: stream.to_owned(),
        consumer: consumer.to_owned(),
        kind: kind.split_whitespace().next().unwrap_or("+ACK").to_owned(),
        confirmed: message.reply.is_some(),
    })
}

/// Every settle of a core subscription on `$JS.ACK.>` seen so far.
#[derive(Clone)]
struct Wire {
    client: async_nats::Client,
    seen: Arc<Mutex<(async_nats::Subscriber, Vec<Settle>)>>,
}

impl Wire {
    async fn watch(fx: &Fixture, subject: &str) -> Wire {
        let client = fx.connect().await;
        let sub = client.subscribe(subject.to_owned()).await.unwrap();
        client.flush().await.unwrap();
        Wire {
            client,
            seen: Arc::new(Mutex::new((sub, Vec::new()))),
        }
    }

    /// What has arrived so far.
    async fn seen(&self) -> Vec<Settle> {
        let mut guard = self.seen.lock().await;
        let (sub, seen) = &mut *guard;
        while let Some(Some(message)) = sub.next().now_or_never() {
            seen.extend(settle(&message));
        }
        seen.clone()
    }

    /// What has arrived once every publish routed to it before this call has (a round trip
    /// on its connection comes after them).
    async fn settled(&self) -> Vec<Settle> {
        self.client.flush().await.expect("flush");
        self.seen().await
    }

    /// Waits until `done` holds of what has arrived.
    async fn wait(&self, what: &str, done: impl Fn(&[Settle]) -> bool) {
        eventually(Duration::from_secs(10), what, || {
            let wire = self.clone();
            let done = &done;
            async move { done(&wire.seen().await).then_some(()) }
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_held_for_its_stream_is_held_through_the_consumers_acks() {
    let fx = Fixture::start().await;
    let js = fx.jetstream().await;
    let wire = Wire::watch(&fx, "$JS.ACK.SETTLE_DL.>").await;

    let decl = fixture::stream("SETTLE_DL", &["settle_dl.>"]);
    let poisoned = |group: &'static str, subject: &str, dead_letter: &'static str, ack| {
        fixture::queue(
            "tests::poisoned",
            &decl,
            subject,
            QueueDecl::new(group)
                .max_deliver(1)
                .dead_letter(dead_letter)
                .ack(ack),
        )
    };
    let poison = |_| Box::pin(async { Err::<(), _>(HandlerError::permanent("poison")) }) as _;
    let topology = Topology::new()
        .stream(decl)
        .consumer(
            poisoned(
                "confirmed",
                "settle_dl.confirmed",
                "settle_dead.confirmed",
                AckMode::Confirmed,
            ),
            poison,
        )
        .consumer(
            poisoned(
                "plain",
                "settle_dl.plain",
                "settle_dead.plain",
                AckMode::FireAndForget,
            ),
            poison,
        );
    // No stream captures the dead letters yet: each publish fails at once and is retried.
    let retry = RetryPolicy {
        base: Duration::from_millis(50),
        cap: Duration::from_millis(100),
        deadline: Duration::from_secs(60),
        request_timeout: Duration::from_secs(2),
    };
    let running = Running::start(
        fixture::fast(fx.builder().await)
            .topology(topology)
            .dead_letter_retry(retry, 1_000),
    )
    .await;
    fixture::publish_jobs(&js, "settle_dl.confirmed", [1]).await;
    fixture::publish_jobs(&js, "settle_dl.plain", [2]).await;

    let has = |seen: &[Settle], consumer: &str, kind: &str| {
        seen.iter()
            .any(|s| s.consumer == consumer && s.kind == kind)
    };
    wire.wait(
        "both messages held with progress acks while their dead letter waits",
        |seen| has(seen, "confirmed", "+WPI") && has(seen, "plain", "+WPI"),
    )
    .await;
    js.create_stream(stream::Config {
        name: "SETTLE_DEAD".to_owned(),
        subjects: vec!["settle_dead.>".to_owned()],
        ..Default::default()
    })
    .await
    .unwrap();
    wire.wait("both terminated after their dead letter", |seen| {
        has(seen, "confirmed", "+TERM") && has(seen, "plain", "+TERM")
    })
    .await;
    running.stop().await.expect("clean drain");
    let seen = wire.settled().await;

    for s in seen.iter().filter(|s| s.stream == "SETTLE_DL") {
        match (s.consumer.as_str(), s.kind.as_str()) {
            ("confirmed", "+WPI" | "+TERM") => assert!(s.confirmed, "confirmed: {s:?}"),
            ("plain", "+WPI" | "+TERM") => assert!(!s.confirmed, "fire-and-forget: {s:?}"),
            _ => panic!("only progress acks and one term: {s:?} in {seen:?}"),
        }
    }
    let dead = js
        .get_stream("SETTLE_DEAD")
        .await
        .unwrap()
        .info()
        .await
        .unwrap()
        .state
        .messages;
    assert_eq!(dead, 2, "each dead letter published once");
    for group in ["confirmed", "plain"] {
        let info = fixture::settled(&js, "SETTLE_DL", group, Duration::from_secs(5)).await;
        assert_eq!(info.num_redelivered, 0, "held, never redelivered: {info:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_returns_stopped_messages_only_to_consumers_that_take_acks() {
    let fx = Fixture::start().await;
    let js = fx.jetstream().await;
    let wire = Wire::watch(&fx, "$JS.ACK.>").await;

    let work = fixture::stream("SETTLE_Q", &["settle_q.>"]);
    let model = fixture::stream("SETTLE_R", &["settle_r.>"]);
    let queue = fixture::queue(
        "tests::stuck_queue",
        &work,
        "settle_q.jobs",
        QueueDecl::new("stuck").ack_wait(Duration::from_secs(30)),
    );
    let replay = ConsumerDecl::broadcast(
        "tests::stuck_replay",
        StreamRef::Named("SETTLE_R"),
        BroadcastDecl::new().ordered(),
    )
    .subjects(&["settle_r.events"]);
    // Handlers that would take a minute; a one-second grace period.
    let stuck = || fixture::job_handler(fx.ledger.clone(), Duration::from_secs(60));
    let topology = Topology::new()
        .stream(work)
        .stream(model)
        .consumer(queue, stuck())
        .consumer(replay, stuck());
    let running = Running::start(
        fixture::fast(fx.builder().await)
            .topology(topology)
            .grace_period(Duration::from_secs(1)),
    )
    .await;
    fixture::publish_jobs(&js, "settle_q.jobs", [1]).await;
    fixture::publish_jobs(&js, "settle_r.events", [2]).await;
    eventually(Duration::from_secs(10), "both handlers running", || async {
        let queue = fixture::consumer_info(&js, "SETTLE_Q", "stuck").await?;
        let mut model = js.get_stream("SETTLE_R").await.ok()?;
        let replays = model.info().await.ok()?.state.consumer_count;
        let mut names = model.consumer_names();
        let name = names.next().await?.ok()?;
        let replay = model.consumer_info(name).await.ok()?;
        (queue.num_ack_pending == 1 && replays == 1 && replay.delivered.stream_sequence == 1)
            .then_some(())
    })
    .await;
    running
        .stop()
        .await
        .expect("the drain returns after the grace period");
    let seen = wire.settled().await;
    assert_eq!(fx.ledger.len(), 0, "no stuck handler finished");
    let naks: Vec<&Settle> = seen.iter().filter(|s| s.kind == "-NAK").collect();
    assert_eq!(naks.len(), 1, "{seen:?}");
    assert_eq!(
        (naks[0].stream.as_str(), naks[0].consumer.as_str()),
        ("SETTLE_Q", "stuck")
    );
    assert!(
        !seen.iter().any(|s| s.stream == "SETTLE_R"),
        "an ordered replay takes no acks, and is sent none: {seen:?}"
    );
}
