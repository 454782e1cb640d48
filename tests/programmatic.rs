//! The runtime driven by a hand-built [`Topology`] (no macros), against a real server:
//! provisioning, ack on `Ok`, redelivery on `Err`, dead-lettering of permanent failures.

mod fixture;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fixture::{Fixture, Running};
use nats_topology::model::{ConsumerDecl, QueueDecl, StreamDecl, StreamRef};
use nats_topology::{HandlerError, Topology};
use nats_topology_testkit::eventually;

static ORDERS: StreamDecl = StreamDecl::new("PROG_ORDERS", &["prog.orders.>", "prog.dead"]);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acks_retries_and_dead_letters() {
    let fx = Fixture::start().await;

    // Attempts per payload; "flaky" fails twice then succeeds, "poison" fails permanently.
    let attempts: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    let seen = attempts.clone();
    const QUEUE: QueueDecl = QueueDecl {
        max_deliver: Some(5),
        backoff: &[Duration::from_millis(50)],
        dead_letter: Some("prog.dead"),
        ..QueueDecl::new("billing")
    };
    let topology = Topology::new().stream(ORDERS).consumer(
        ConsumerDecl::queue("tests::on_order", StreamRef::Declared(&ORDERS), QUEUE)
            .subjects(&["prog.orders.created"])
            .concurrency(4),
        move |incoming| {
            let seen = seen.clone();
            Box::pin(async move {
                let body = String::from_utf8_lossy(incoming.payload()).into_owned();
                let n = {
                    let mut map = seen.lock().unwrap();
                    let n = map.entry(body.clone()).or_default();
                    *n += 1;
                    *n
                };
                match body.as_str() {
                    "flaky" if n < 3 => Err(HandlerError::new(format!("attempt {n} fails"))),
                    "poison" => Err(HandlerError::permanent("cannot ever work")),
                    _ => Ok(()),
                }
            })
        },
    );
    // The runtime's default settings (no fast retries or heartbeats).
    let running = Running::start(fx.builder().await.topology(topology)).await;
    let health = &running.health;

    let js = fx.jetstream().await;
    for body in ["ok", "flaky", "poison"] {
        js.publish("prog.orders.created", body.into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    eventually(Duration::from_secs(20), "every message settled", || {
        let status = health.consumers()[0].clone();
        async move { (status.handled == 2 && status.dead_lettered == 1).then_some(()) }
    })
    .await;
    let status = health.consumers()[0].clone();
    assert_eq!(status.retried, 2, "flaky was redelivered twice: {status}");
    assert_eq!(
        status.failed, 3,
        "two flaky failures and one poison: {status}"
    );
    assert_eq!(attempts.lock().unwrap()["flaky"], 3);
    assert_eq!(
        attempts.lock().unwrap()["poison"],
        1,
        "permanent failures are not retried"
    );

    // The dead letter carries the payload and the reason.
    let stream = js.get_stream("PROG_ORDERS").await.unwrap();
    let dead = stream
        .get_last_raw_message_by_subject("prog.dead")
        .await
        .unwrap();
    assert_eq!(&dead.payload[..], b"poison");
    let headers = dead.headers;
    assert_eq!(
        headers.get("Nats-Topology-Error").unwrap().as_str(),
        "cannot ever work"
    );
    assert_eq!(
        headers.get("Nats-Topology-Subject").unwrap().as_str(),
        "prog.orders.created"
    );

    running.stop().await.expect("clean drain");
    let info = js
        .get_stream("PROG_ORDERS")
        .await
        .unwrap()
        .consumer_info("billing")
        .await
        .unwrap()
        .clone();
    assert_eq!(info.num_ack_pending, 0, "nothing left unacknowledged");
    assert_eq!(info.num_pending, 0, "nothing left undelivered");
}
