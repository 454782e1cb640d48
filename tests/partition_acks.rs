//! A partition's ack and its connection: a partition delivers one message at a time
//! (`max_ack_pending = 1`), so an ack lost with a connection would hold the partition until the
//! message's `ack_wait`, then have it delivered and handled again. Staged on a single server
//! through a loopback link, as `tests/kv_watch_acks.rs` stages it for a watch: the link holds
//! what the client sends while one message's handler returns, then is cut, which loses its
//! ack; the client connects again through the healed link. The ack is sent again through the
//! new connection: every message of the key is handled once, in order, and delivered once.
//! Beside it, a plain queue consumer declared with `max_ack_pending = 1` (order by serialising
//! the group), whose lost ack would hold the whole group the same way. And the same cut with a
//! handler that fails: its nak, lost, would hold the partition for the message's `ack_wait`
//! (declared far longer than the test waits) rather than the backoff's delay; the nak is sent
//! again with what is left of its delay, and the message comes back after it. Last, a handler
//! slower than half its message's `ack_wait`: its lost ack is not sent again (the server may
//! be delivering the message again by then), the message comes back to this instance after its
//! `ack_wait`, and is acknowledged without being handled a second time. And a handler that
//! refuses its message for good: the term, lost, is sent again.

mod fixture;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use fixture::{Fixture, Running, connect_in_order};
use futures::StreamExt;
use nats_topology::model::{QueueDecl, SubjectTransform};
use nats_topology::{HandlerError, Runtime, Topology};
use nats_topology_testkit::{Direction, Link, eventually};
use tokio::sync::Semaphore;

/// Far more than a reconnection takes.
const WITHIN: Duration = Duration::from_secs(30);

/// Where a handler fails: the delay its nak asks for, and the consumer's `ack_wait`, after
/// which a lost nak's message would come back (far past [`WITHIN`]).
const BACKOFF: &[Duration] = &[Duration::from_secs(5)];
const LONG_ACK_WAIT: Duration = Duration::from_secs(120);

/// A slow handler's time, past half of [`SHORT_ACK_WAIT`]: its lost ack is not sent again.
const SLOW: Duration = Duration::from_millis(2500);
const SHORT_ACK_WAIT: Duration = Duration::from_secs(4);

/// The partition count, and the key every message here has.
const PARTITIONS: u16 = 2;
const SUBJECT: &str = "orders.7.paid";

/// What the handler handled (payloads, in order), and the gate that holds the message `held`.
#[derive(Clone)]
struct Gate {
    handled: Arc<Mutex<Vec<String>>>,
    started: Arc<Mutex<bool>>,
    release: Arc<Semaphore>,
}

impl Gate {
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

/// What reads the messages: a partitioned group, or a plain queue consumer with
/// `max_ack_pending = 1`.
#[derive(Clone, Copy)]
enum Reader {
    Partitioned,
    OneAtATime,
}

/// How the handler of `held` ends the first time: it returns (an ack), it fails (a nak with
/// the backoff's delay), it returns after [`SLOW`], or it fails for good (a term).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Held {
    Handled,
    Failed,
    Slow,
    Refused,
}

fn topology(gate: &Gate, reader: Reader, held: Held) -> Topology {
    let stream = fixture::stream("HELD_PARTITION_ACKS", &["orders.*.paid"]);
    let (stream, queue) = match reader {
        Reader::Partitioned => (
            stream.subject_transform(SubjectTransform::new(
                "orders.*.paid",
                fixture::leak(format!(
                    "{{{{partition({PARTITIONS},1)}}}}.orders.{{{{wildcard(1)}}}}.paid"
                )),
            )),
            QueueDecl::new("billing").partitioned(PARTITIONS, &[1]),
        ),
        Reader::OneAtATime => (stream, QueueDecl::new("billing").max_ack_pending(1)),
    };
    let queue = match held {
        Held::Handled => queue,
        Held::Failed | Held::Refused => queue.ack_wait(LONG_ACK_WAIT).backoff(BACKOFF),
        Held::Slow => queue.ack_wait(SHORT_ACK_WAIT),
    };
    let consumer = fixture::queue(
        "tests::held_partition_acks",
        &stream,
        "orders.*.paid",
        queue,
    );
    let gate = gate.clone();
    Topology::new()
        .stream(stream)
        .consumer(consumer, move |incoming| {
            let gate = gate.clone();
            Box::pin(async move {
                let payload = String::from_utf8_lossy(incoming.payload()).into_owned();
                // Held the first time only: a second delivery is handled at once (and counted).
                let first = payload == "held"
                    && !std::mem::replace(&mut *gate.started.lock().unwrap(), true);
                if first {
                    gate.release.acquire().await.expect("open").forget();
                    match held {
                        Held::Handled => {}
                        Held::Failed => {
                            gate.handled.lock().unwrap().push("held, failed".to_owned());
                            return Err(HandlerError::new("the dependency failed"));
                        }
                        // The work of a slow handler: what the scenario is about.
                        Held::Slow => tokio::time::sleep(SLOW).await,
                        Held::Refused => {
                            gate.handled
                                .lock()
                                .unwrap()
                                .push("held, refused".to_owned());
                            return Err(HandlerError::permanent("not an order"));
                        }
                    }
                }
                gate.handled.lock().unwrap().push(payload);
                Ok::<(), HandlerError>(())
            })
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitions_ack_lost_with_the_connection_is_sent_again() {
    lost_with_the_connection(Reader::Partitioned, Held::Handled).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_at_a_time_queue_consumers_ack_lost_with_the_connection_is_sent_again() {
    lost_with_the_connection(Reader::OneAtATime, Held::Handled).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitions_nak_lost_with_the_connection_is_sent_again() {
    lost_with_the_connection(Reader::Partitioned, Held::Failed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_at_a_time_queue_consumers_nak_lost_with_the_connection_is_sent_again() {
    lost_with_the_connection(Reader::OneAtATime, Held::Failed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitions_term_lost_with_the_connection_is_sent_again() {
    lost_with_the_connection(Reader::Partitioned, Held::Refused).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitions_message_delivered_again_after_its_ack_was_lost_is_not_handled_twice() {
    lost_with_the_connection(Reader::Partitioned, Held::Slow).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_consumers_message_delivered_again_after_its_ack_was_lost_is_not_handled_twice() {
    lost_with_the_connection(Reader::OneAtATime, Held::Slow).await;
}

/// The scenario of the module documentation, read by `reader`, the handler of `held` ending
/// as `held` says.
async fn lost_with_the_connection(reader: Reader, held: Held) {
    let fx = Fixture::start().await;
    let link = Link::start(fx.server.port()).await.expect("a link");
    let client = connect_in_order(&[link.url()]).await;
    let gate = Gate {
        handled: Arc::default(),
        started: Arc::default(),
        release: Arc::new(Semaphore::new(0)),
    };
    let builder =
        fixture::fast(Runtime::builder(client.clone())).topology(topology(&gate, reader, held));
    let run = Running::start(builder).await;
    let js = fx.jetstream().await;
    let publish = |payload: &'static str| {
        let js = js.clone();
        async move {
            js.publish(SUBJECT, payload.into())
                .await
                .expect("a publish")
                .await
                .expect("stored")
        }
    };
    publish("before").await;
    gate.handles("before").await;

    publish("held").await;
    eventually(WITHIN, "the handler of `held` started", || {
        let started = *gate.started.lock().unwrap();
        async move { started.then_some(()) }
    })
    .await;
    link.stall_one_way(Direction::Forward);
    gate.release.add_permits(1);
    // Its ack, or its nak, is on its way into the stalled link.
    eventually(WITHIN, "`held` settled or naked", || {
        let consumers = run.health.consumers();
        let settled = match held {
            Held::Handled | Held::Slow => consumers.iter().map(|c| c.handled).sum::<u64>() >= 2,
            Held::Failed => consumers.iter().map(|c| c.retried).sum::<u64>() >= 1,
            Held::Refused => consumers.iter().map(|c| c.dead_lettered).sum::<u64>() >= 1,
        };
        async move { settled.then_some(()) }
    })
    .await;
    fixture::written_out(&client).await;
    fixture::cut_with_what_it_holds(&link, &client).await;

    publish("after").await;
    // A nak that stayed lost would have `held` back only after its ack_wait, past this wait.
    gate.handles("after").await;
    let mut deliveries = 0;
    let stream = js
        .get_stream("HELD_PARTITION_ACKS")
        .await
        .expect("the stream");
    let mut consumers = stream.consumers();
    while let Some(info) = consumers.next().await {
        deliveries += info
            .expect("a partition's info")
            .delivered
            .consumer_sequence;
    }
    let restarts: u64 = run.health.consumers().iter().map(|c| c.restarts).sum();
    run.stop().await.expect("a clean drain");
    match held {
        Held::Handled => {
            assert_eq!(
                gate.handled(),
                ["before", "held", "after"],
                "each once, in order"
            );
            assert_eq!(
                deliveries, 3,
                "one delivery per message, none delivered again: the ack of `held` reached the server"
            );
        }
        Held::Refused => {
            assert_eq!(
                gate.handled(),
                ["before", "held, refused", "after"],
                "`held` refused once, not delivered again"
            );
            assert_eq!(
                deliveries, 3,
                "one delivery per message: the term of `held` reached the server"
            );
        }
        Held::Slow => {
            assert_eq!(
                gate.handled(),
                ["before", "held", "after"],
                "each handled once, in order: `held` delivered again was acknowledged, not handled"
            );
            assert_eq!(
                deliveries, 4,
                "`held` delivered again after its ack_wait (its ack lost, not sent again)"
            );
        }
        Held::Failed => {
            assert_eq!(
                gate.handled(),
                ["before", "held, failed", "held", "after"],
                "`held` handled again after its failure, before `after`"
            );
            assert_eq!(
                deliveries, 4,
                "`held` delivered twice (its failure, then its retry), the others once"
            );
        }
    }
    assert_eq!(restarts, 0, "no partition's session lost");
}
