//! Dispatch on a real server: poison payloads dead-lettered with their reason, handlers slower
//! than `ack_wait` kept alive by progress acks, never more fetched than can be started (or than
//! one pull batch, when it is larger), and a panicking handler counted as a failure.

mod fixture;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fixture::{Fixture, Job, Running};
use nats_topology::model::QueueDecl;
use nats_topology::{Context, HandlerError, Topology, queue_consumer, stream};
use nats_topology_testkit::eventually;

// The poison test goes through the macros, so that decoding is the generated code's.
#[stream(name = "POISON", subjects = ["poison.jobs"])]
struct Poison;

#[stream(name = "POISON_DEAD", subjects = ["poison.dead"])]
struct PoisonDead;

#[queue_consumer(
    stream = Poison,
    group = "eater",
    subject = "poison.jobs",
    dead_letter = "poison.dead",
    max_deliver = 3,
    ack_wait = "10s",
    concurrency = 4
)]
async fn eat(job: Job, cx: Context) -> Result<(), HandlerError> {
    fixture::record(job, &cx)
}

/// Bytes from a xorshift generator (no dependency needed for noise).
fn noise(len: usize) -> Vec<u8> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Invalid JSON, JSON of the wrong type and 512 KiB of random bytes, between good jobs: each
/// poison is dead-lettered once (payload kept, reason and origin in headers) and terminated at
/// its first delivery; every good job is handled once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poison_payloads_are_dead_lettered_with_their_reason() {
    let fx = Fixture::start().await;
    let ledger = &fx.ledger;
    let running = Running::start(fixture::fast(fx.builder().await).state(ledger.clone())).await;

    let poisons: Vec<(&str, Vec<u8>)> = vec![
        ("invalid json", b"{\"id\": 1".to_vec()),
        ("not json at all", b"hello".to_vec()),
        ("wrong type", br#"{"id": "seven"}"#.to_vec()),
        ("wrong shape", b"[1, 2, 3]".to_vec()),
        ("512 KiB of random bytes", noise(512 * 1024)),
    ];
    let js = fx.jetstream().await;
    let mut good = 0u64;
    for (_, payload) in &poisons {
        fixture::publish_jobs(&js, "poison.jobs", [good, good + 1]).await;
        good += 2;
        js.publish("poison.jobs", payload.clone().into())
            .await
            .unwrap()
            .await
            .expect("the stream takes the poison");
    }
    fixture::publish_jobs(&js, "poison.jobs", [good, good + 1]).await;
    good += 2;

    let poisoned = poisons.len() as u64;
    eventually(Duration::from_secs(20), "every message settled", || {
        let status = running.health.consumers()[0].clone();
        async move { (status.handled == good && status.dead_lettered == poisoned).then_some(()) }
    })
    .await;
    let status = running.health.consumers()[0].clone();
    assert_eq!(status.failed, poisoned, "{status}");
    assert_eq!(
        status.retried, 0,
        "decode failures are never retried: {status}"
    );
    assert!(ledger.covers(0..good), "every good job handled");
    assert_eq!(ledger.len() as u64, good, "each good job handled once");

    let dead = js.get_stream("POISON_DEAD").await.unwrap();
    assert_eq!(dead.get_info().await.unwrap().state.messages, poisoned);
    let origin = js.get_stream("POISON").await.unwrap();
    // Dead letters arrive in the order the handlers finished (concurrency 4): match them to
    // the poisons by payload.
    let mut unmatched: Vec<&(&str, Vec<u8>)> = poisons.iter().collect();
    for sequence in 1..=poisoned {
        let letter = dead.get_raw_message(sequence).await.expect("a dead letter");
        let position = unmatched
            .iter()
            .position(|(_, payload)| letter.payload[..] == payload[..])
            .expect("each dead letter carries one poison's payload, once");
        let (what, _) = unmatched.remove(position);
        let header = |name: &str| {
            letter
                .headers
                .get(name)
                .unwrap_or_else(|| panic!("header {name} on the dead letter of {what}"))
                .as_str()
                .to_owned()
        };
        assert_eq!(header("Nats-Topology-Subject"), "poison.jobs", "{what}");
        assert_eq!(header("Nats-Topology-Stream"), "POISON", "{what}");
        assert_eq!(header("Nats-Topology-Consumer"), "eater", "{what}");
        assert_eq!(
            header("Nats-Topology-Delivered"),
            "1",
            "terminated at once ({what})"
        );
        let error = header("Nats-Topology-Error");
        assert!(
            error.starts_with("cannot decode the payload as") && error.contains("Job"),
            "the reason names the decode failure ({what}): {error}"
        );
        let original = origin
            .get_raw_message(header("Nats-Topology-Sequence").parse().unwrap())
            .await
            .unwrap();
        assert!(
            original.payload == letter.payload,
            "the sequence header points at the original ({what})"
        );
    }
    assert!(unmatched.is_empty());
    let info = fixture::settled(&js, "POISON", "eater", Duration::from_secs(5)).await;
    assert_eq!(
        info.delivered.consumer_sequence, info.delivered.stream_sequence,
        "every message delivered once: {info:?}"
    );
    running.stop().await.expect("clean drain");
}

/// What a handler saw: per job id, the delivery count of each attempt.
#[derive(Clone, Default)]
struct Attempts(Arc<Mutex<BTreeMap<u64, Vec<u64>>>>);

impl Attempts {
    fn record(&self, id: u64, delivered: u64) {
        self.0
            .lock()
            .unwrap()
            .entry(id)
            .or_default()
            .push(delivered);
    }

    fn snapshot(&self) -> BTreeMap<u64, Vec<u64>> {
        self.0.lock().unwrap().clone()
    }
}

/// A topology of one queue consumer whose handler works `work(id)` and records its attempts.
fn slow_topology(
    name: &str,
    queue: QueueDecl,
    concurrency: u32,
    attempts: Attempts,
    work: fn(u64) -> Duration,
) -> Topology {
    let stream = fixture::stream(name, &[&format!("{}.>", name.to_lowercase())]);
    let subject = format!("{}.jobs", name.to_lowercase());
    let consumer = fixture::queue("tests::slow", &stream, &subject, queue).concurrency(concurrency);
    Topology::new()
        .stream(stream)
        .consumer(consumer, move |incoming| {
            let attempts = attempts.clone();
            Box::pin(async move {
                let id = fixture::job_id(&incoming)?;
                // Simulated work longer than ack_wait: the behaviour under test.
                tokio::time::sleep(work(id)).await;
                attempts.record(id, incoming.context().delivered());
                Ok(())
            })
        })
}

/// A handler that runs 5 s on a consumer with a 2 s ack_wait: progress acks keep the message
/// from being redelivered; it is delivered once and handled once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handler_slower_than_ack_wait_is_not_redelivered() {
    let fx = Fixture::start().await;
    let attempts = Attempts::default();
    let queue = QueueDecl::new("slow").ack_wait(Duration::from_secs(2));
    let running = fx
        .run(slow_topology("SLOW", queue, 1, attempts.clone(), |_| {
            Duration::from_secs(5)
        }))
        .await;

    let js = fx.jetstream().await;
    fixture::publish_jobs(&js, "slow.jobs", [7]).await;
    eventually(Duration::from_secs(20), "the job handled", || {
        let n = attempts.snapshot().len();
        async move { (n == 1).then_some(()) }
    })
    .await;
    let info = fixture::settled(&js, "SLOW", "slow", Duration::from_secs(5)).await;
    assert_eq!(
        attempts.snapshot(),
        BTreeMap::from([(7, vec![1])]),
        "one attempt, delivery 1"
    );
    assert_eq!(
        info.delivered.consumer_sequence, 1,
        "delivered once: {info:?}"
    );
    running.stop().await.expect("clean drain");
    assert_eq!(attempts.snapshot().len(), 1);
}

/// Concurrency 2, ack_wait 2 s, handlers of 3 s and one of 6 s: a message must not wait in a
/// client buffer while both handlers are busy (its ack_wait would run out and the server would
/// deliver it again). Every job is delivered once and handled once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_more_fetched_than_can_be_started() {
    let fx = Fixture::start().await;
    let attempts = Attempts::default();
    let queue = QueueDecl::new("busy").ack_wait(Duration::from_secs(2));
    let running = fx
        .run(slow_topology("BUSY", queue, 2, attempts.clone(), |id| {
            Duration::from_secs(if id == 0 { 6 } else { 3 })
        }))
        .await;

    let js = fx.jetstream().await;
    fixture::publish_jobs(&js, "busy.jobs", 0..5).await;
    eventually(Duration::from_secs(30), "every job handled", || {
        let n = attempts.snapshot().len();
        async move { (n == 5).then_some(()) }
    })
    .await;
    let info = fixture::settled(&js, "BUSY", "busy", Duration::from_secs(10)).await;
    running.stop().await.expect("clean drain");
    let expected: BTreeMap<u64, Vec<u64>> = (0..5).map(|id| (id, vec![1])).collect();
    assert_eq!(
        attempts.snapshot(),
        expected,
        "each job handled once, at its first delivery"
    );
    assert_eq!(
        info.delivered.consumer_sequence, 5,
        "each job delivered once: {info:?}"
    );
}

const BACKOFF: &[Duration] = &[Duration::from_millis(50)];

/// A handler that panics is a failure, not a crash: the message is retried (with the declared
/// backoff), then dead-lettered at the last delivery; the consumer keeps handling other jobs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn panicking_handler_is_a_failure_not_a_crash() {
    let fx = Fixture::start().await;
    let ledger = &fx.ledger;
    let stream = fixture::stream("PANICS", &["panics.jobs", "panics.dead"]);
    let queue = QueueDecl::new("fragile")
        .max_deliver(2)
        .backoff(BACKOFF)
        .dead_letter("panics.dead");
    let consumer = fixture::queue("tests::fragile", &stream, "panics.jobs", queue).concurrency(2);
    let recorded = ledger.clone();
    let topology = Topology::new()
        .stream(stream)
        .consumer(consumer, move |incoming| {
            let ledger = recorded.clone();
            Box::pin(async move {
                let id = fixture::job_id(&incoming)?;
                if id == 13 {
                    panic!("unlucky job {id}");
                }
                ledger.record(id);
                Ok(())
            })
        });
    let running = fx.run(topology).await;

    let js = fx.jetstream().await;
    fixture::publish_jobs(&js, "panics.jobs", 10..20).await;
    eventually(Duration::from_secs(20), "every job settled", || {
        let status = running.health.consumers()[0].clone();
        async move { (status.handled == 9 && status.dead_lettered == 1).then_some(status) }
    })
    .await;
    let status = running.health.consumers()[0].clone();
    assert_eq!((status.failed, status.retried), (2, 1), "{status}");
    assert!(
        running.health.ready(),
        "the consumer still runs: {}",
        running.health
    );
    let expected: Vec<u64> = (10..20).filter(|id| *id != 13).collect();
    assert_eq!(ledger.unique().into_iter().collect::<Vec<_>>(), expected);
    assert_eq!(ledger.len(), 9);
    let letter = js
        .get_stream("PANICS")
        .await
        .unwrap()
        .get_last_raw_message_by_subject("panics.dead")
        .await
        .expect("a dead letter");
    let error = letter
        .headers
        .get("Nats-Topology-Error")
        .unwrap()
        .as_str()
        .to_owned();
    assert!(
        error.contains("panicked") && error.contains("unlucky job 13"),
        "{error}"
    );
    assert_eq!(
        letter
            .headers
            .get("Nats-Topology-Delivered")
            .unwrap()
            .as_str(),
        "2"
    );
    fixture::settled(&js, "PANICS", "fragile", Duration::from_secs(5)).await;
    running.stop().await.expect("clean drain");
}

/// Concurrency 4, a pull batch of 7, handlers held until released: the instance holds and asks
/// for one batch, no more. The server shows exactly one batch delivered and unacknowledged (4
/// running, 3 waiting) and no pull request open, so it can send nothing more; released, every
/// job is handled once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_larger_than_the_concurrency_holds_one_batch_no_more() {
    let fx = Fixture::start().await;
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let started = Arc::new(AtomicU64::new(0));
    let stream = fixture::stream("AHEAD", &["ahead.jobs"]);
    let queue = QueueDecl::new("ahead");
    let consumer = fixture::queue("tests::ahead", &stream, "ahead.jobs", queue).concurrency(4);
    let (ledger, held, counted) = (fx.ledger.clone(), gate.clone(), started.clone());
    let topology = Topology::new()
        .stream(stream)
        .consumer(consumer, move |incoming| {
            let (ledger, gate, started) = (ledger.clone(), held.clone(), counted.clone());
            Box::pin(async move {
                let id = fixture::job_id(&incoming)?;
                started.fetch_add(1, Ordering::SeqCst);
                gate.acquire().await.expect("the gate stays open").forget();
                ledger.record(id);
                Ok(())
            })
        });
    let builder = fixture::fast(fx.builder().await).topology(topology);
    let running = Running::start(builder.pull_batch(7)).await;

    let js = fx.jetstream().await;
    fixture::publish_jobs(&js, "ahead.jobs", 0..20).await;
    let info = eventually(
        Duration::from_secs(10),
        "one batch held, no pull request open",
        || async {
            let info = fixture::consumer_info(&js, "AHEAD", "ahead").await?;
            (info.num_ack_pending == 7 && info.num_waiting == 0).then_some(info)
        },
    )
    .await;
    assert_eq!(
        info.num_pending, 13,
        "the rest stays on the server: {info:?}"
    );
    eventually(
        Duration::from_secs(10),
        "concurrency handlers started",
        || {
            let n = started.load(Ordering::SeqCst);
            async move { (n == 4).then_some(()) }
        },
    )
    .await;

    gate.add_permits(20);
    fx.ledger
        .wait_len(20, Duration::from_secs(20), "every job handled")
        .await;
    fixture::settled(&js, "AHEAD", "ahead", Duration::from_secs(5)).await;
    running.stop().await.expect("clean drain");
    fx.ledger.assert_handled_once(20);
}
