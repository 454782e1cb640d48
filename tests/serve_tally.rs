//! One tally per served endpoint and core subscription: health, the metrics and `$SRV.STATS`
//! read the same record of each request or message, so they agree on every outcome (answered,
//! refused, panicked, sent without a reply subject, answered 503 by a drain out of time).
//!
//! The recorder is the process's global one (`fixture::recorder`), installed before each
//! runtime starts; each test has its own service and subject, hence its own series.

mod fixture;

use std::time::Duration;

use async_nats::service::Stats;
use fixture::recorder::values;
use fixture::{Fixture, Running};
use futures::StreamExt;
use metrics::{Key, Label};
use nats_topology::model::{EndpointDecl, ServiceDecl, SubscriptionDecl};
use nats_topology::telemetry::names;
use nats_topology::{HandlerError, ServiceError, Topology};
use nats_topology_testkit::eventually;

static TALLIED: ServiceDecl = ServiceDecl::new("tallied", "1.0.0");

fn endpoint_key(name: &'static str, code: Option<u16>) -> Key {
    let mut labels = vec![
        Label::new("service", "tallied"),
        Label::new("endpoint", "get"),
    ];
    if let Some(code) = code {
        labels.push(Label::new("code", code.to_string()));
    }
    Key::from_parts(name, labels)
}

/// The endpoint's metrics: requests, errors by code (404, 500, 503), duration samples.
fn endpoint_metrics() -> (u64, [u64; 3], usize) {
    let errors = [404, 500, 503]
        .map(|code| values().counter(&endpoint_key(names::REQUEST_ERRORS, Some(code))));
    (
        values().counter(&endpoint_key(names::REQUESTS, None)),
        errors,
        values()
            .samples(&endpoint_key(names::REQUEST_DURATION, None))
            .len(),
    )
}

/// Five answered, two refused (404), one panic (500), one sent without a reply subject; then
/// two left running by a drain out of time (503). Health, metrics and `$SRV.STATS` count the
/// same, and `$SRV.STATS` shows the last error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_metrics_and_stats_count_the_same_answers() {
    values();
    let fx = Fixture::start().await;
    let topology = Topology::new().endpoint(
        EndpointDecl::new("tests::tallied_get", &TALLIED, "get", "tallied.get").concurrency(4),
        |request| {
            let payload = request.payload().clone();
            Box::pin(async move {
                match &payload[..] {
                    b"missing" => Err(ServiceError::new(404, "no such member")),
                    b"boom" => panic!("the member table is gone"),
                    b"wait" => std::future::pending().await,
                    _ => Ok(payload),
                }
            })
        },
    );
    let builder = fixture::fast(fx.builder().await)
        .grace_period(Duration::from_millis(300))
        .topology(topology);
    let running = Running::start(builder).await;
    let client = fx.connect().await;
    for payload in ["a", "b", "c", "d", "e", "missing", "missing", "boom"] {
        client
            .request("tallied.get", payload.into())
            .await
            .expect("answered");
    }
    client
        .publish("tallied.get", "no reply".into())
        .await
        .expect("published");
    let health = running.health.clone();
    eventually(Duration::from_secs(10), "nine requests counted", || {
        let requests = health.endpoints()[0].requests;
        async move { (requests == 9).then_some(()) }
    })
    .await;

    let status = &health.endpoints()[0];
    assert_eq!((status.requests, status.errors), (9, 3));
    assert_eq!(endpoint_metrics(), (9, [2, 1, 0], 9));
    let stats = client
        .request("$SRV.STATS.tallied", "".into())
        .await
        .expect("STATS answered");
    let stats: Stats = serde_json::from_slice(&stats.payload).expect("a stats response");
    let get = &stats.endpoints[0];
    assert_eq!((get.requests, get.errors), (9, 3));
    let last = get.last_error.as_ref().expect("the last error");
    assert_eq!(last.code, 500);
    assert!(last.status.contains("the member table is gone"), "{last:?}");
    assert!(get.processing_time >= get.average_processing_time);

    // Two requests whose handler never answers: the drain answers them with 503.
    let inbox = client.new_inbox();
    let mut replies = client
        .subscribe(format!("{inbox}.*"))
        .await
        .expect("subscribe");
    for i in 0..2 {
        client
            .publish_with_reply("tallied.get", format!("{inbox}.{i}"), "wait".into())
            .await
            .expect("published");
    }
    // Sent after them on the same connection: the PING's answer proves they reached the
    // replica.
    client
        .request("$SRV.PING.tallied", "".into())
        .await
        .expect("PING answered");
    running.stop().await.expect("clean drain");
    for _ in 0..2 {
        let reply = tokio::time::timeout(Duration::from_secs(10), replies.next())
            .await
            .expect("answered")
            .expect("the subscription is open");
        let headers = reply.headers.expect("error headers");
        assert_eq!(
            headers.get("Nats-Service-Error-Code").map(|v| v.as_str()),
            Some("503")
        );
    }
    let status = &health.endpoints()[0];
    assert_eq!((status.requests, status.errors), (11, 5));
    assert_eq!(endpoint_metrics(), (11, [2, 1, 2], 11));
}

/// A core subscription's handled and failed messages (an error, a panic) are the same in
/// health and the metrics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_and_metrics_count_the_same_messages() {
    values();
    let fx = Fixture::start().await;
    let topology = Topology::new().subscription(
        SubscriptionDecl::each_instance("tests::tallied_sub", "tallied.sub"),
        |request| {
            let payload = request.payload().clone();
            Box::pin(async move {
                match &payload[..] {
                    b"bad" => Err(HandlerError::new("not a key")),
                    b"boom" => panic!("the cache is gone"),
                    _ => Ok(()),
                }
            })
        },
    );
    let running = fx.run(topology).await;
    let client = fx.connect().await;
    for payload in ["a", "b", "bad", "c", "boom", "d"] {
        client
            .publish("tallied.sub", payload.into())
            .await
            .expect("published");
    }
    let health = running.health.clone();
    eventually(Duration::from_secs(10), "six messages counted", || {
        let status = &health.subscriptions()[0];
        let counted = status.handled + status.failed;
        async move { (counted == 6).then_some(()) }
    })
    .await;
    let status = &health.subscriptions()[0];
    assert_eq!((status.handled, status.failed), (4, 2));
    let key = |name| Key::from_parts(name, vec![Label::new("subject", "tallied.sub")]);
    assert_eq!(
        (
            values().counter(&key(names::SUBSCRIPTION_HANDLED)),
            values().counter(&key(names::SUBSCRIPTION_FAILED))
        ),
        (4, 2)
    );
    running.stop().await.expect("clean drain");
}
