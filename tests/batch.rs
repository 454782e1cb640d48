//! Batch handlers on a real server: 1,000 messages in batches of up to 50, each handled once;
//! a poison message (and an undecodable one) in a batch dead-lettered alone while the rest of
//! its batch is acknowledged; a drain in the middle of a batch finishes it and loses nothing;
//! a batch that runs past `ack_wait` is kept alive, not delivered again.

mod fixture;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use fixture::{Fixture, Job, Ledger, Running};
use nats_topology::model::{BatchDecl, QueueDecl};
use nats_topology::{
    Batch, BatchError, Failures, HandlerError, State, Topology, queue_consumer, stream,
};
use nats_topology_testkit::eventually;

/// The size of every batch a handler got, in order.
#[derive(Clone, Default)]
struct Sizes(Arc<Mutex<Vec<usize>>>);

impl Sizes {
    fn push(&self, size: usize) {
        self.0.lock().unwrap().push(size);
    }

    fn all(&self) -> Vec<usize> {
        self.0.lock().unwrap().clone()
    }
}

// Declared through the macros, so that the generated glue (decoding each message, the state
// argument, the registration) is what runs.
#[stream(name = "BATCHES", subjects = ["batches.>"])]
struct Batches;

#[stream(name = "BATCHES_DEAD", subjects = ["dead.batches"])]
struct BatchesDead;

/// Fails job 7 permanently (dead-lettered alone); handles the others.
#[queue_consumer(
    stream = Batches,
    group = "batcher",
    subject = "batches.jobs",
    batch = 50,
    batch_wait = "200ms",
    dead_letter = "dead.batches",
    max_deliver = 3
)]
async fn handle_batch(
    jobs: Batch<Job>,
    ledger: State<Ledger>,
    sizes: State<Sizes>,
) -> Result<(), BatchError> {
    sizes.push(jobs.len());
    let mut failures = Failures::new();
    for item in &jobs {
        if item.value().id == 7 {
            failures.fail(item.index(), HandlerError::permanent("job 7 is poison"));
        } else {
            ledger.record(item.value().id);
        }
    }
    failures.into_result()
}

/// 1,000 jobs published before the runtime starts, plus one payload that is not a job: every
/// job but 7 handled once, in batches of at most 50 that are mostly full; job 7 and the
/// undecodable payload are each dead-lettered once, and nothing else is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_jobs_in_batches_of_fifty_with_poison_dead_lettered_alone() {
    let fx = Fixture::start().await;
    let js = fx.jetstream().await;
    // The streams exist before the jobs are published: a first runtime provisions them.
    let sizes = Sizes::default();
    let provisioner = Running::start(
        fixture::fast(fx.builder().await)
            .state(fx.ledger.clone())
            .state(sizes.clone()),
    )
    .await;
    provisioner.stop().await.expect("a clean drain");
    assert!(sizes.all().is_empty(), "nothing published yet");

    fixture::publish_jobs(&js, "batches.jobs", 0..500).await;
    js.publish("batches.jobs", "not a job".into())
        .await
        .unwrap()
        .await
        .expect("the stream takes the poison");
    fixture::publish_jobs(&js, "batches.jobs", 500..1000).await;

    let running = Running::start(
        fixture::fast(fx.builder().await)
            .state(fx.ledger.clone())
            .state(sizes.clone()),
    )
    .await;
    fx.ledger
        .wait_len(999, Duration::from_secs(60), "every job but 7 handled")
        .await;
    let dead = js.get_stream("BATCHES_DEAD").await.unwrap();
    eventually(Duration::from_secs(30), "two dead letters", || {
        let dead = dead.clone();
        async move {
            let stored = dead.clone().get_info().await.ok()?.state.messages;
            (stored == 2).then_some(())
        }
    })
    .await;
    let status = running.health.consumers()[0].clone();
    running.stop().await.expect("a clean drain");
    assert_eq!(status.dead_lettered, 2, "{status}");
    assert_eq!(status.retried, 0, "nothing retried: {status}");

    let mut payloads = Vec::new();
    for sequence in 1..=2 {
        let letter = dead.get_raw_message(sequence).await.expect("a dead letter");
        payloads.push(String::from_utf8_lossy(&letter.payload).into_owned());
    }
    payloads.sort();
    assert_eq!(payloads, ["not a job".to_owned(), r#"{"id":7}"#.to_owned()]);
    fx.ledger.assert_handled_once(999);
    assert!(!fx.ledger.covers([7]), "job 7 was never recorded");
    let sizes = sizes.all();
    let handled: usize = sizes.iter().sum();
    assert_eq!(
        handled, 1000,
        "each job in one batch once (the undecodable payload in none)"
    );
    assert!(
        sizes.iter().all(|n| (1..=50).contains(n)),
        "batches of 1 to 50: {sizes:?}"
    );
    // A backlog of 1,000 fills batches: far fewer calls than messages.
    assert!(
        sizes.len() <= 40,
        "1,000 backlogged jobs in at most 40 batches (a mean above 25): {} batches {sizes:?}",
        sizes.len()
    );
    eprintln!("{} batches: {sizes:?}", sizes.len());
    fixture::settled(&js, "BATCHES", "batcher", Duration::from_secs(10)).await;
}

/// A topology of one batch consumer whose handler works `work` per batch, then records every
/// job and the batch's size, and the most deliveries any message had. `concurrency`: as
/// declared (`None`: the batch size).
fn slow_batches(
    stream: &str,
    (queue, concurrency): (QueueDecl, Option<u32>),
    work: Duration,
    (ledger, sizes, delivered): (Ledger, Sizes, Arc<Mutex<u64>>),
) -> Topology {
    let decl = fixture::stream(stream, &[&format!("{}.>", stream.to_lowercase())]);
    let consumer = fixture::queue(
        &format!("tests::{stream}"),
        &decl,
        &format!("{}.jobs", stream.to_lowercase()),
        queue,
    );
    let consumer = match concurrency {
        Some(n) => consumer.concurrency(n),
        None => consumer,
    };
    Topology::new()
        .stream(decl)
        .batch_consumer(consumer, move |mut input| {
            let (ledger, sizes, delivered) = (ledger.clone(), sizes.clone(), delivered.clone());
            Box::pin(async move {
                let batch: Batch<Job> = input.decode_json();
                sizes.push(batch.len());
                tokio::time::sleep(work).await;
                for item in &batch {
                    let mut most = delivered.lock().unwrap();
                    *most = (*most).max(item.context().delivered());
                    ledger.record(item.value().id);
                }
                input.finish(Ok(()))
            })
        })
}

/// A drain while a batch runs: the batch in hand finishes and is acknowledged, what was not
/// started goes back to the server, and a second runtime handles the rest: every job once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_in_the_middle_of_a_batch_loses_nothing() {
    let fx = Fixture::start().await;
    let js = fx.jetstream().await;
    let sizes = Sizes::default();
    let delivered = Arc::new(Mutex::new(0));
    let queue = QueueDecl::new("drainer")
        .ack_wait(Duration::from_secs(30))
        .batch(BatchDecl::new(20).wait(Duration::from_millis(100)));
    let topology = || {
        slow_batches(
            "MIDBATCH",
            (queue, None),
            Duration::from_millis(500),
            (fx.ledger.clone(), sizes.clone(), delivered.clone()),
        )
    };
    let first = fx.run(topology()).await;
    fixture::publish_jobs(&js, "midbatch.jobs", 0..200).await;
    // A batch is running: its size is recorded before its work.
    eventually(Duration::from_secs(30), "a batch running", || {
        let started = !sizes.all().is_empty();
        async move { started.then_some(()) }
    })
    .await;
    first.stop().await.expect("a clean drain");
    let after_drain = fx.ledger.len();
    let first_batches: usize = sizes.all().iter().sum();
    assert_eq!(
        after_drain, first_batches,
        "every batch the drained runtime started was finished"
    );
    assert!(after_drain < 200, "the drain came in the middle");

    let second = fx.run(topology()).await;
    fx.ledger
        .wait_len(200, Duration::from_secs(60), "every job handled")
        .await;
    fx.drain_and_settle(second, &js, ("MIDBATCH", "drainer"), 200)
        .await;
    eprintln!(
        "{after_drain} jobs handled before the drain, in batches {:?}",
        sizes.all()
    );
}

/// Batches whose handler runs three times `ack_wait`: progress acks keep every message of the
/// batch, nothing is delivered twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_running_past_ack_wait_is_not_delivered_again() {
    let fx = Fixture::start().await;
    let js = fx.jetstream().await;
    let sizes = Sizes::default();
    let delivered = Arc::new(Mutex::new(0));
    let queue = QueueDecl::new("slow")
        .ack_wait(Duration::from_secs(1))
        .batch(BatchDecl::new(10).wait(Duration::from_millis(200)));
    let running = fx
        .run(slow_batches(
            "SLOWBATCH",
            (queue, None),
            Duration::from_secs(3),
            (fx.ledger.clone(), sizes.clone(), delivered.clone()),
        ))
        .await;
    fixture::publish_jobs(&js, "slowbatch.jobs", 0..20).await;
    fx.ledger
        .wait_len(20, Duration::from_secs(60), "every job handled")
        .await;
    fx.drain_and_settle(running, &js, ("SLOWBATCH", "slow"), 20)
        .await;
    assert_eq!(
        *delivered.lock().unwrap(),
        1,
        "no message was delivered twice"
    );
    let info = fixture::consumer_info(&js, "SLOWBATCH", "slow")
        .await
        .expect("the consumer");
    assert_eq!(info.num_redelivered, 0, "the server redelivered nothing");
}

/// Several batches at once (concurrency 100, batches of 20) over a backlog: no batch holds
/// more than 20 messages, however many the dispatch has in hand, and every job is handled once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_batches_at_once_each_hold_at_most_the_batch_size() {
    let fx = Fixture::start().await;
    let js = fx.jetstream().await;
    let sizes = Sizes::default();
    let delivered = Arc::new(Mutex::new(0));
    let queue = QueueDecl::new("wide").batch(BatchDecl::new(20).wait(Duration::from_millis(100)));
    let topology = || {
        slow_batches(
            "WIDE",
            (queue, Some(100)),
            Duration::from_millis(20),
            (fx.ledger.clone(), sizes.clone(), delivered.clone()),
        )
    };
    // A first runtime provisions the stream and the consumer; the backlog is published while
    // none runs, so that the next one has 100 messages in hand at once.
    let provisioner = fx.run(topology()).await;
    provisioner.stop().await.expect("a clean drain");
    fixture::publish_jobs(&js, "wide.jobs", 0..1000).await;
    let running = fx.run(topology()).await;
    fx.ledger
        .wait_len(1000, Duration::from_secs(60), "every job handled")
        .await;
    fx.drain_and_settle(running, &js, ("WIDE", "wide"), 1000)
        .await;
    let sizes = sizes.all();
    assert!(
        sizes.iter().all(|n| (1..=20).contains(n)),
        "batches of 1 to 20 with 100 messages in hand: {sizes:?}"
    );
    assert_eq!(sizes.iter().sum::<usize>(), 1000, "each job in one batch");
    eprintln!("{} batches: {sizes:?}", sizes.len());
}
