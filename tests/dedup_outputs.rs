//! Deduplicated outputs: `Context::publish` sends a `Nats-Msg-Id` derived from the message
//! being handled, so a handler that publishes and is then redelivered (here: it fails its
//! first delivery after publishing, and is naked) leaves one copy of each output in the target
//! stream; distinct outputs of one call are all kept; `without_dedup()` keeps every copy; and
//! a broadcast relay's output is kept once per instance (each relay is its own consumer).

mod fixture;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream;
use fixture::{Fixture, Ledger, Running, fast, job_id, publish_jobs, stream_exists};
use nats_topology::model::{ConsumerDecl, QueueDecl, StreamDecl, StreamRef};
use nats_topology::{Context, HandlerError, Topology};

static INPUT: StreamDecl = StreamDecl::new("DEDUP_INPUT", &["dedup.input.>"]);
static RESULTS: StreamDecl = StreamDecl::new("DEDUP_RESULTS", &["dedup.results.>"]);
const INPUT_SUBJECT: &str = "dedup.input.jobs";
const N: u64 = 20;

/// What each output of the test handlers says: which input, which output of the call.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq, Eq, PartialOrd, Ord)]
struct Output {
    id: u64,
    kind: String,
}

/// How one handler call publishes its outputs.
#[derive(Clone, Copy)]
enum Publishing {
    /// `cx.publish` once.
    Once,
    /// `cx.publish` twice: two distinct outputs.
    Twice,
    /// `cx.publisher(..).without_dedup()` once.
    WithoutDedup,
    /// One output on the first delivery, two on the redelivery (`cx.publish` each).
    MoreOnRedelivery,
}

/// For every delivery: (input id, delivery number, whether the stream called each publish a
/// duplicate).
type Acks = Arc<Mutex<Vec<(u64, u64, Vec<bool>)>>>;

async fn publish_outputs(
    cx: &Context,
    id: u64,
    publishing: Publishing,
) -> Result<Vec<bool>, HandlerError> {
    let subject = format!("dedup.results.{id}");
    let output = |kind: &str| Output {
        id,
        kind: kind.to_owned(),
    };
    let mut duplicates = Vec::new();
    match publishing {
        Publishing::Once => duplicates.push(cx.publish(subject, &output("a")).await?.duplicate),
        Publishing::Twice => {
            duplicates.push(cx.publish(subject.clone(), &output("a")).await?.duplicate);
            // The second through the builder, with a header of its own: still deduplicated.
            let ack = cx
                .publisher(subject)
                .header("Output-Kind", "b")
                .json(&output("b"))
                .await?;
            duplicates.push(ack.duplicate);
        }
        Publishing::MoreOnRedelivery => {
            duplicates.push(cx.publish(subject.clone(), &output("a")).await?.duplicate);
            if cx.delivered() > 1 {
                duplicates.push(cx.publish(subject, &output("b")).await?.duplicate);
            }
        }
        Publishing::WithoutDedup => {
            let ack = cx
                .publisher(subject)
                .without_dedup()
                .json(&output("a"))
                .await?;
            duplicates.push(ack.duplicate);
        }
    }
    Ok(duplicates)
}

/// A queue consumer whose handler publishes its outputs, then fails its first delivery (a
/// transient error: naked, redelivered after 50 ms) and succeeds on the second.
fn topology(publishing: Publishing, ledger: Ledger, acks: Acks) -> Topology {
    const BACKOFF: &[Duration] = &[Duration::from_millis(50)];
    let decl = ConsumerDecl::queue(
        "dedup_outputs::publish_then_fail_once",
        StreamRef::Declared(&INPUT),
        QueueDecl::new("dedup").backoff(BACKOFF),
    )
    .subjects(&[INPUT_SUBJECT])
    .concurrency(4);
    Topology::new()
        .stream(INPUT)
        .stream(RESULTS)
        .consumer(decl, move |incoming| {
            let (ledger, acks) = (ledger.clone(), acks.clone());
            Box::pin(async move {
                let id = job_id(&incoming)?;
                let cx = incoming.context();
                let duplicates = publish_outputs(cx, id, publishing).await?;
                acks.lock().unwrap().push((id, cx.delivered(), duplicates));
                if cx.delivered() == 1 {
                    return Err(HandlerError::new(
                        "the first delivery fails after publishing",
                    ));
                }
                ledger.record(id);
                Ok(())
            })
        })
}

/// Every message of the results stream, decoded, with how many times each appears.
async fn stored_outputs(js: &jetstream::Context) -> BTreeMap<Output, usize> {
    let stream = js
        .get_stream(RESULTS.name)
        .await
        .expect("the results stream");
    let messages = stream.get_info().await.unwrap().state.messages;
    let mut outputs = BTreeMap::new();
    for sequence in 1..=messages {
        let message = stream.get_raw_message(sequence).await.expect("stored");
        let output: Output = serde_json::from_slice(&message.payload).unwrap();
        *outputs.entry(output).or_insert(0) += 1;
    }
    outputs
}

/// Runs `publishing` over `N` inputs until each succeeded (on its second delivery); returns
/// the stored outputs and the publish acks.
async fn run(publishing: Publishing) -> (BTreeMap<Output, usize>, Vec<(u64, u64, Vec<bool>)>) {
    let fx = Fixture::start().await;
    let acks = Acks::default();
    let running = fx
        .run(topology(publishing, fx.ledger.clone(), acks.clone()))
        .await;
    let js = fx.jetstream().await;
    // The results stream is ensured beside the consumer: wait for it, so that no first
    // publish fails for want of it.
    stream_exists(&js, RESULTS.name, Duration::from_secs(20)).await;
    publish_jobs(&js, INPUT_SUBJECT, 0..N).await;
    fx.ledger.wait_covers(0..N, Duration::from_secs(30)).await;
    running.stop().await.expect("a clean drain");
    fx.ledger.assert_handled_once(N as usize);
    let acks = acks.lock().unwrap().clone();
    (stored_outputs(&js).await, acks)
}

fn outputs(kinds: &[&str], copies: usize) -> BTreeMap<Output, usize> {
    (0..N)
        .flat_map(|id| {
            kinds.iter().map(move |kind| {
                (
                    Output {
                        id,
                        kind: (*kind).to_owned(),
                    },
                    copies,
                )
            })
        })
        .collect()
}

/// The publish acks: a first delivery's publishes are stored, a redelivery's are duplicates.
fn assert_duplicates(
    acks: &[(u64, u64, Vec<bool>)],
    per_call: usize,
    redelivery_is_duplicate: bool,
) {
    assert_eq!(
        acks.len(),
        2 * N as usize,
        "two deliveries per input: {acks:?}"
    );
    for (id, delivered, duplicates) in acks {
        assert_eq!(duplicates.len(), per_call, "input {id}");
        let expected = *delivered > 1 && redelivery_is_duplicate;
        assert!(
            duplicates.iter().all(|d| *d == expected),
            "input {id}, delivery {delivered}: duplicate flags {duplicates:?}, expected all {expected}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redelivered_handler_publishes_its_result_once() {
    let (stored, acks) = run(Publishing::Once).await;
    assert_eq!(stored, outputs(&["a"], 1), "one result per input");
    assert_duplicates(&acks, 1, true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_outputs_of_one_call_are_both_kept_once() {
    let (stored, acks) = run(Publishing::Twice).await;
    assert_eq!(stored, outputs(&["a", "b"], 1), "both outputs, each once");
    assert_duplicates(&acks, 2, true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_dedup_every_delivery_publishes_again() {
    let (stored, acks) = run(Publishing::WithoutDedup).await;
    assert_eq!(stored, outputs(&["a"], 2), "one copy per delivery");
    assert_duplicates(&acks, 1, false);
}

static STATUS: StreamDecl = StreamDecl::new("DEDUP_STATUS", &["dedup.status.>"]);

/// Each instance's relay handles every message and publishes what its instance knows: the
/// ids differ per instance (each relay is its own consumer), so every instance's output is
/// kept, and none is silently dropped as another instance's duplicate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relays_on_two_instances_each_keep_their_output() {
    let fx = Fixture::start().await;
    let mut runs = Vec::new();
    for instance in ["one", "two"] {
        let decl = fixture::relay("dedup_outputs::relay", &STATUS, "dedup.status.jobs");
        let topology =
            Topology::new()
                .stream(STATUS)
                .stream(RESULTS)
                .consumer(decl, move |incoming| {
                    Box::pin(async move {
                        let id = job_id(&incoming)?;
                        let output = Output {
                            id,
                            kind: instance.to_owned(),
                        };
                        incoming
                            .context()
                            .publish(format!("dedup.results.{id}"), &output)
                            .await?;
                        Ok(())
                    })
                });
        let runtime = fast(fx.builder().await)
            .topology(topology)
            .build()
            .expect("a valid topology");
        let relay = runtime.relay("relay").expect("the relay");
        let running = Running::spawn(runtime);
        tokio::time::timeout(Duration::from_secs(20), relay.ensure())
            .await
            .expect("the relay runs in time")
            .expect("the runtime runs");
        runs.push(running);
    }
    let js = fx.jetstream().await;
    stream_exists(&js, RESULTS.name, Duration::from_secs(20)).await;
    publish_jobs(&js, "dedup.status.jobs", 0..N).await;
    let expected = outputs(&["one", "two"], 1);
    nats_topology_testkit::eventually(Duration::from_secs(30), "both instances' outputs", || {
        let js = js.clone();
        async move {
            let count = js
                .get_stream(RESULTS.name)
                .await
                .ok()?
                .get_info()
                .await
                .ok()?
                .state
                .messages;
            (count >= 2 * N).then_some(())
        }
    })
    .await;
    for outcome in Running::stop_all(runs).await {
        outcome.expect("a clean drain");
    }
    assert_eq!(stored_outputs(&js).await, expected);
}

/// Ids are positional: a redelivery that publishes more than the first delivery has its first
/// outputs dropped as duplicates and the extra one stored (once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redelivery_that_publishes_more_keeps_each_output_once() {
    let (stored, acks) = run(Publishing::MoreOnRedelivery).await;
    assert_eq!(stored, outputs(&["a", "b"], 1));
    assert_eq!(
        acks.len(),
        2 * N as usize,
        "two deliveries per input: {acks:?}"
    );
    for (id, delivered, duplicates) in &acks {
        let expected = if *delivered == 1 {
            vec![false]
        } else {
            vec![true, false]
        };
        assert_eq!(duplicates, &expected, "input {id}, delivery {delivered}");
    }
}
