//! Services on real servers: endpoints shared by replicas in their queue group, the micro
//! protocol's `$SRV.PING` and `$SRV.STATS`, the error mapping, core subscriptions, readiness
//! proven by round trips (and lost on a stalled link), a drain that answers what it accepted,
//! and a replica killed with SIGKILL mid-request.
//!
//! The killed replica is this test binary itself, re-invoked to run only
//! [`service_worker_process`] with [`WORKER_URL`] set; it reports on stdout, one line per event:
//! `nt-svc-worker: READY`, `… START <id>`.

mod fixture;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_nats::service::{PingResponse, Stats};
use async_nats::{Client, HeaderMap, Message};
use fixture::{Fixture, Running};
use futures::StreamExt;
use nats_topology::__private::StateKey;
use nats_topology::model::{EndpointDecl, ServiceDecl, SubscriptionDecl};
use nats_topology::{HandlerError, Runtime, ServiceError, Topology};
use nats_topology_testkit::{Link, eventually};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::Semaphore;
use topology_runtime::ServingState;
use topology_runtime::service::glue::decode_request_json;

static MEMBERS: ServiceDecl = ServiceDecl::new("members", "1.2.0").description("Member lookups");

/// Set in a worker process: the server to serve on.
const WORKER_URL: &str = "NATS_TOPOLOGY_TEST_SERVICE_WORKER_URL";

/// Starts each report line of a worker process.
const MARK: &str = "nt-svc-worker: ";

/// An endpoint `members.get` whose replica named `name` answers `<name>:<payload>`.
fn echo(name: &'static str) -> Topology {
    Topology::new().endpoint(
        EndpointDecl::new("tests::get_member", &MEMBERS, "get", "members.get").concurrency(4),
        move |request| {
            let payload = request.payload().clone();
            Box::pin(async move { Ok(answer_from(name, &payload)) })
        },
    )
}

fn answer_from<B: From<Vec<u8>>>(name: &str, payload: &[u8]) -> B {
    let mut body = format!("{name}:").into_bytes();
    body.extend_from_slice(payload);
    body.into()
}

/// A runtime of the fixture's kind on a connection of its own, running and ready.
async fn replica(fx: &Fixture, topology: Topology) -> Running {
    fx.run(topology).await
}

/// Sends `n` requests to `members.get` at once (payloads `0`..`n`), each waiting at most
/// `timeout` for its answer; each is handed to the connection before this returns, so that
/// what the caller sends next (a PING) reaches the server after them.
async fn send_concurrently(
    caller: &Client,
    n: u32,
    timeout: Duration,
) -> Vec<tokio::task::JoinHandle<Result<Message, async_nats::RequestError>>> {
    let mut handles = Vec::new();
    for i in 0..n {
        let caller = caller.clone();
        let (handed, on_its_way) = tokio::sync::oneshot::channel();
        handles.push(tokio::spawn(async move {
            let mut request = Box::pin(
                caller.send_request(
                    "members.get",
                    async_nats::Request::new()
                        .payload(i.to_string().into())
                        .timeout(Some(timeout)),
                ),
            );
            // The first poll hands the request to the connection: whatever the caller sends
            // after this returns goes out after it.
            let first = futures::poll!(&mut request);
            let _ = handed.send(());
            match first {
                std::task::Poll::Ready(reply) => reply,
                std::task::Poll::Pending => request.await,
            }
        }));
        on_its_way.await.expect("the request task runs");
    }
    handles
}

/// The replica that answered `reply` (`<name>:<payload>`), and the payload.
fn answered_by(reply: &Message) -> (String, String) {
    let text = std::str::from_utf8(&reply.payload).expect("a text answer");
    let (name, payload) = text.split_once(':').expect("`<replica>:<payload>`");
    (name.to_owned(), payload.to_owned())
}

/// Every answer to a request on `subject` sent to any number of responders, until `enough`
/// answers came (or the deadline passes: then what came).
async fn gather(client: &Client, subject: &str, enough: usize) -> Vec<Message> {
    let inbox = client.new_inbox();
    let mut answers = client.subscribe(inbox.clone()).await.expect("subscribe");
    client
        .publish_with_reply(subject.to_owned(), inbox, "".into())
        .await
        .expect("publish");
    let mut gathered = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while gathered.len() < enough {
        match tokio::time::timeout_at(deadline, answers.next()).await {
            Ok(Some(answer)) => gathered.push(answer),
            _ => break,
        }
    }
    gathered
}

fn error_of(reply: &Message) -> Option<(u16, String)> {
    let headers: &HeaderMap = reply.headers.as_ref()?;
    let code = headers
        .get("Nats-Service-Error-Code")?
        .as_str()
        .parse()
        .ok()?;
    let description = headers.get("Nats-Service-Error")?.as_str().to_owned();
    Some((code, description))
}

fn state_of_endpoints(running: &Running) -> Vec<ServingState> {
    running
        .health
        .endpoints()
        .into_iter()
        .map(|e| e.state)
        .collect()
}

/// Two replicas on connections of their own share 200 requests in the endpoint's queue group:
/// each request is answered exactly once, both answer some, `$SRV.PING.members` from a plain
/// client lists both instances, and `$SRV.STATS` counts exactly what each served (as its
/// health does).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_share_requests_and_answer_the_micro_protocol() {
    let fx = Fixture::start().await;
    let (a, b) = tokio::join!(replica(&fx, echo("a")), replica(&fx, echo("b")));
    let client = fx.connect().await;

    let pings = gather(&client, "$SRV.PING.members", 2).await;
    let ids: BTreeSet<String> = pings
        .iter()
        .map(|m| {
            let pong: PingResponse = serde_json::from_slice(&m.payload).expect("a ping response");
            assert_eq!(
                (pong.name.as_str(), pong.version.as_str()),
                ("members", "1.2.0")
            );
            pong.id
        })
        .collect();
    assert_eq!(ids.len(), 2, "both instances answer $SRV.PING.members");

    let requests = futures::future::join_all((0..200).map(|i| {
        let client = client.clone();
        async move {
            let reply = client
                .request("members.get", i.to_string().into())
                .await
                .expect("every request is answered");
            (i, answered_by(&reply))
        }
    }))
    .await;
    let mut by_replica: BTreeMap<String, u64> = BTreeMap::new();
    for (i, (name, payload)) in &requests {
        assert_eq!(payload, &i.to_string(), "the answer to its own request");
        *by_replica.entry(name.clone()).or_default() += 1;
    }
    assert_eq!(by_replica.values().sum::<u64>(), 200);
    assert_eq!(
        by_replica.len(),
        2,
        "both replicas answer some: {by_replica:?}"
    );

    let stats = gather(&client, "$SRV.STATS.members", 2).await;
    assert_eq!(stats.len(), 2, "both instances answer $SRV.STATS.members");
    let mut counted = 0;
    for message in &stats {
        let stats: Stats = serde_json::from_slice(&message.payload).expect("a stats response");
        let get = stats
            .endpoints
            .iter()
            .find(|e| e.name == "get")
            .expect("the endpoint `get` in STATS");
        assert_eq!(get.queue_group, "q");
        assert_eq!(get.subject, "members.get");
        assert_eq!(get.errors, 0);
        counted += get.requests as u64;
    }
    assert_eq!(counted, 200, "$SRV.STATS counts what was served");
    let health: u64 = [&a, &b]
        .iter()
        .map(|r| r.health.endpoints()[0].requests)
        .sum();
    assert_eq!(health, 200, "health counts what was served");
    for result in Running::stop_all(vec![a, b]).await {
        result.expect("clean drain");
    }
}

static ORDERS: ServiceDecl = ServiceDecl::new("orders", "0.3.0")
    .queue_group("orders-q")
    .metadata(&[("team", "sales")]);

/// Two services in one runtime are two micro protocol instances of their own: `$SRV.PING`
/// finds both, each `$SRV.INFO` lists its own endpoints with their queue groups and metadata,
/// each request reaches its own handler, and each `$SRV.STATS` counts what its endpoints
/// answered (an error answer with its code and description as the last error).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_services_in_one_runtime_are_two_instances() {
    let fx = Fixture::start().await;
    let topology = echo("m")
        .endpoint(
            EndpointDecl::new("tests::place_order", &ORDERS, "place", "orders.place"),
            |request| {
                let payload = request.payload().clone();
                Box::pin(async move { Ok(answer_from("placed", &payload)) })
            },
        )
        .endpoint(
            EndpointDecl::new("tests::find_order", &ORDERS, "find", "orders.find")
                .group("finders")
                .metadata(&[("cache", "none")]),
            |request| {
                let payload = request.payload().clone();
                Box::pin(async move {
                    Err(ServiceError::not_found(format!(
                        "no order {}",
                        String::from_utf8_lossy(&payload)
                    )))
                })
            },
        );
    let running = replica(&fx, topology).await;
    assert_eq!(running.health.endpoints().len(), 3);
    let client = fx.connect().await;

    let pongs: BTreeMap<String, String> = gather(&client, "$SRV.PING", 2)
        .await
        .iter()
        .map(|m| {
            let pong: PingResponse = serde_json::from_slice(&m.payload).expect("a ping response");
            (pong.name, pong.id)
        })
        .collect();
    assert_eq!(
        pongs.keys().map(String::as_str).collect::<Vec<_>>(),
        ["members", "orders"]
    );
    assert_ne!(pongs["members"], pongs["orders"], "an id each");

    let info = client
        .request("$SRV.INFO.orders", "".into())
        .await
        .expect("orders answers INFO");
    let info: async_nats::service::Info = serde_json::from_slice(&info.payload).expect("info");
    assert_eq!(
        (info.version.as_str(), info.id.as_str()),
        ("0.3.0", pongs["orders"].as_str())
    );
    assert_eq!(info.metadata.get("team").map(String::as_str), Some("sales"));
    let endpoints: BTreeMap<&str, (&str, &str, Option<&str>)> = info
        .endpoints
        .iter()
        .map(|e| {
            let cache = e.metadata.get("cache").map(String::as_str);
            (
                e.name.as_str(),
                (e.subject.as_str(), e.queue_group.as_str(), cache),
            )
        })
        .collect();
    assert_eq!(
        endpoints,
        BTreeMap::from([
            ("find", ("orders.find", "finders", Some("none"))),
            ("place", ("orders.place", "orders-q", None)),
        ])
    );

    for i in 0..5 {
        let placed = client
            .request("orders.place", i.to_string().into())
            .await
            .expect("answered");
        assert_eq!(answered_by(&placed), ("placed".to_owned(), i.to_string()));
        let member = client
            .request("members.get", i.to_string().into())
            .await
            .expect("answered");
        assert_eq!(answered_by(&member), ("m".to_owned(), i.to_string()));
    }
    let missing = client
        .request("orders.find", "42".into())
        .await
        .expect("answered");
    assert_eq!(error_of(&missing), Some((404, "no order 42".to_owned())));

    let stats = client
        .request("$SRV.STATS.orders", "".into())
        .await
        .expect("orders answers STATS");
    let stats: Stats = serde_json::from_slice(&stats.payload).expect("stats");
    // Per endpoint: requests, errors, and the last error's code and description.
    type Counted<'a> = (usize, usize, Option<(usize, &'a str)>);
    let counted: BTreeMap<&str, Counted> = stats
        .endpoints
        .iter()
        .map(|e| {
            let last = e.last_error.as_ref().map(|l| (l.code, l.status.as_str()));
            (e.name.as_str(), (e.requests, e.errors, last))
        })
        .collect();
    assert_eq!(
        counted,
        BTreeMap::from([
            ("find", (1, 1, Some((404, "no order 42")))),
            ("place", (5, 0, None)),
        ])
    );
    let members = client
        .request("$SRV.STATS.members", "".into())
        .await
        .expect("members answers STATS");
    let members: Stats = serde_json::from_slice(&members.payload).expect("stats");
    assert_eq!(members.endpoints.len(), 1);
    assert_eq!(members.endpoints[0].requests, 5);
    running.stop().await.expect("clean drain");
}

#[derive(serde::Deserialize)]
#[allow(dead_code)]
struct Lookup {
    id: u64,
}

/// A handler's `ServiceError` (code and description in the micro protocol's headers), a
/// panic (500), a payload that does not decode (400, naming the type) and a handler past the
/// endpoint's timeout (504); each counted as an error in health and `$SRV.STATS`, and the
/// replica keeps answering.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_panics_decode_failures_and_timeouts_are_answered_with_their_codes() {
    let fx = Fixture::start().await;
    let topology = Topology::new()
        .endpoint(
            EndpointDecl::new("tests::refuse", &MEMBERS, "refuse", "members.refuse"),
            |_| Box::pin(async { Err(ServiceError::new(409, "member 7 is locked\r\nby 3")) }),
        )
        .endpoint(
            EndpointDecl::new("tests::crash", &MEMBERS, "crash", "members.crash"),
            |_| Box::pin(async { panic!("the member table is gone") }),
        )
        .endpoint(
            EndpointDecl::new("tests::lookup", &MEMBERS, "lookup", "members.lookup"),
            |request| {
                let decoded = decode_request_json::<Lookup>(&request);
                Box::pin(async move { decoded.map(|l| l.id.to_string().into()) })
            },
        )
        .endpoint(
            EndpointDecl::new("tests::slow", &MEMBERS, "slow", "members.slow")
                .timeout(Duration::from_millis(200)),
            |_| {
                Box::pin(async {
                    tokio::time::sleep(Duration::from_secs(30)).await;
                    Ok(Default::default())
                })
            },
        );
    let running = replica(&fx, topology).await;
    let client = fx.connect().await;
    let ask = |subject: &'static str, payload: &'static str| {
        let client = client.clone();
        async move {
            client
                .request(subject, payload.into())
                .await
                .expect("answered")
        }
    };

    let refused = ask("members.refuse", "").await;
    assert_eq!(
        error_of(&refused),
        Some((409, "member 7 is locked  by 3".to_owned())),
        "the handler's code and description, on one header line"
    );
    assert!(refused.payload.is_empty());

    let (code, description) = error_of(&ask("members.crash", "").await).expect("an error");
    assert_eq!(code, 500);
    assert!(
        description.contains("the member table is gone"),
        "{description}"
    );

    let (code, description) =
        error_of(&ask("members.lookup", "{\"id\": \"x\"}").await).expect("an error");
    assert_eq!(code, 400);
    assert!(
        description.contains("cannot decode the request as") && description.contains("Lookup"),
        "the reason names the type: {description}"
    );
    let decoded = ask("members.lookup", "{\"id\": 7}").await;
    assert_eq!(
        (error_of(&decoded), &decoded.payload[..]),
        (None, &b"7"[..])
    );

    let (code, description) = error_of(&ask("members.slow", "").await).expect("an error");
    assert_eq!(code, 504);
    assert!(description.contains("timeout"), "{description}");

    // Still answering after the panic.
    assert_eq!(
        error_of(&ask("members.crash", "").await).map(|e| e.0),
        Some(500)
    );

    let health = running.health.endpoints();
    let errors: BTreeMap<&str, (u64, u64)> = health
        .iter()
        .map(|e| (e.endpoint.as_str(), (e.requests, e.errors)))
        .collect();
    assert_eq!(
        errors,
        BTreeMap::from([
            ("crash", (2, 2)),
            ("lookup", (2, 1)),
            ("refuse", (1, 1)),
            ("slow", (1, 1)),
        ])
    );
    let stats = gather(&client, "$SRV.STATS.members", 1).await;
    let stats: Stats = serde_json::from_slice(&stats[0].payload).expect("stats");
    let counted: BTreeMap<&str, (usize, usize)> = stats
        .endpoints
        .iter()
        .map(|e| (e.name.as_str(), (e.requests, e.errors)))
        .collect();
    assert_eq!(
        counted,
        BTreeMap::from([
            ("crash", (2, 2)),
            ("lookup", (2, 1)),
            ("refuse", (1, 1)),
            ("slow", (1, 1)),
        ])
    );
    running.stop().await.expect("clean drain");
}

/// A subscription to `each` reaches every replica; one in a queue group reaches one of them
/// per message. A handler's error is counted as failed, and answers nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_instance_subscriptions_reach_both_replicas_and_group_ones_one() {
    let fx = Fixture::start().await;
    let each = [Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0))];
    let group = [Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0))];
    let topology = |i: usize| {
        let (each, group) = (each[i].clone(), group[i].clone());
        Topology::new()
            .subscription(
                SubscriptionDecl::each_instance("tests::invalidate", "cache.invalidate"),
                move |request| {
                    let each = each.clone();
                    Box::pin(async move {
                        if request.payload().as_ref() == b"bad" {
                            return Err(HandlerError::new("not a key"));
                        }
                        each.fetch_add(1, Ordering::SeqCst);
                        Ok(())
                    })
                },
            )
            .subscription(
                SubscriptionDecl::group("tests::work", "work.items", "workers").concurrency(4),
                move |_| {
                    let group = group.clone();
                    Box::pin(async move {
                        group.fetch_add(1, Ordering::SeqCst);
                        Ok(())
                    })
                },
            )
    };
    let (a, b) = tokio::join!(replica(&fx, topology(0)), replica(&fx, topology(1)));
    let client = fx.connect().await;
    for i in 0..10 {
        client
            .publish("cache.invalidate", format!("k{i}").into())
            .await
            .unwrap();
    }
    client
        .publish("cache.invalidate", "bad".into())
        .await
        .unwrap();
    for i in 0..40 {
        client
            .publish("work.items", i.to_string().into())
            .await
            .unwrap();
    }
    let (runs, counts) = (&[&a, &b], (&each, &group));
    eventually(Duration::from_secs(10), "every message handled", || {
        let done = runs.iter().all(|r| {
            let subscriptions = r.health.subscriptions();
            subscriptions[0].handled + subscriptions[0].failed == 11
        }) && counts
            .1
            .iter()
            .map(|c| c.load(Ordering::SeqCst))
            .sum::<u64>()
            == 40;
        async move { done.then_some(()) }
    })
    .await;
    for (i, r) in runs.iter().enumerate() {
        let subscriptions = r.health.subscriptions();
        let invalidate = &subscriptions[0];
        assert_eq!(invalidate.subject, "cache.invalidate");
        assert_eq!(invalidate.queue_group, None);
        assert_eq!(
            (invalidate.handled, invalidate.failed),
            (10, 1),
            "replica {i}"
        );
        assert_eq!(
            counts.0[i].load(Ordering::SeqCst),
            10,
            "replica {i} got every message"
        );
        assert_eq!(subscriptions[1].queue_group.as_deref(), Some("workers"));
    }
    for result in Running::stop_all(vec![a, b]).await {
        result.expect("clean drain");
    }
    // Drained: nothing more arrives, and each group message was handled once.
    assert_eq!(
        group.iter().map(|c| c.load(Ordering::SeqCst)).sum::<u64>(),
        40,
        "each group message handled by one replica"
    );
}

/// Readiness is proven by a round trip through the server, never assumed: a replica whose
/// link stalls before it subscribes is not ready (its subscriptions never reach the server);
/// healed, it is ready, and ready means answering at once. A stall while running turns the
/// endpoint `stalled` and the runtime not ready within a few heartbeats; healed, ready again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_is_a_round_trip_and_a_stalled_link_makes_an_endpoint_not_ready() {
    let fx = Fixture::start().await;
    let link = Link::start(fx.server.port()).await.expect("a link");
    let client = async_nats::connect(link.url())
        .await
        .expect("connect through the link");
    let runtime = fixture::fast(Runtime::builder(client))
        .topology(echo("linked"))
        .build()
        .expect("valid");
    link.stall();
    let running = Running::spawn(runtime);
    eventually(Duration::from_secs(10), "the endpoint stalled", || {
        let stalled = matches!(
            state_of_endpoints(&running)[..],
            [ServingState::Stalled { .. }]
        );
        async move { stalled.then_some(()) }
    })
    .await;
    assert!(
        !running.health.ready(),
        "not ready before a round trip: {}",
        running.health
    );
    link.heal();
    running.ready(Duration::from_secs(10)).await;
    let caller = fx.connect().await;
    let reply = caller
        .send_request(
            "members.get",
            async_nats::Request::new()
                .payload("first".into())
                .timeout(Some(Duration::from_secs(2))),
        )
        .await
        .expect("ready means answering");
    assert_eq!(
        answered_by(&reply),
        ("linked".to_owned(), "first".to_owned())
    );

    link.stall();
    let stalled_at = tokio::time::Instant::now();
    eventually(
        Duration::from_secs(5),
        "not ready on a stalled link",
        || {
            let ready = running.health.ready();
            async move { (!ready).then_some(()) }
        },
    )
    .await;
    // Heartbeat 500 ms: noticed within about two probe intervals (plus scheduling).
    assert!(
        stalled_at.elapsed() < Duration::from_millis(1_600),
        "noticed after {:?}",
        stalled_at.elapsed()
    );
    match &state_of_endpoints(&running)[..] {
        [ServingState::Stalled { cause, .. }] => {
            assert!(cause.contains("$SRV.PING.members."), "{cause}")
        }
        other => panic!("stalled, not {other:?}"),
    }
    assert!(
        running
            .health
            .to_string()
            .contains("endpoint members/get on members.get")
    );
    link.heal();
    running.ready(Duration::from_secs(10)).await;
    let reply = caller
        .request("members.get", "again".into())
        .await
        .expect("answered");
    assert_eq!(answered_by(&reply).1, "again");
    running.stop().await.expect("clean drain");
}

/// A drain answers every request it accepted: replica `a` holds two requests in its handlers
/// and four in its buffer when shutdown starts; it unsubscribes (a new request goes to `b`
/// meanwhile) and answers all six once the handlers go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_answers_every_request_it_accepted() {
    let fx = Fixture::start().await;
    let gate = Arc::new(Semaphore::new(0));
    let started = Arc::new(AtomicU64::new(0));
    let held = Topology::new().endpoint(
        EndpointDecl::new("tests::get_member", &MEMBERS, "get", "members.get").concurrency(2),
        {
            let (gate, started) = (gate.clone(), started.clone());
            move |request| {
                let (gate, started) = (gate.clone(), started.clone());
                let payload = request.payload().clone();
                Box::pin(async move {
                    started.fetch_add(1, Ordering::SeqCst);
                    gate.acquire().await.expect("open").forget();
                    Ok(answer_from("a", &payload))
                })
            }
        },
    );
    let a = replica(&fx, held).await;
    let caller = fx.connect().await;
    let requests = send_concurrently(&caller, 6, Duration::from_secs(30)).await;
    eventually(Duration::from_secs(5), "two handlers running", || {
        let n = started.load(Ordering::SeqCst);
        async move { (n == 2).then_some(()) }
    })
    .await;
    // The other four reached `a` before its PING answer did: the server routes one
    // connection's messages in order.
    caller
        .request("$SRV.PING.members", "".into())
        .await
        .expect("a answers PING");

    let b = replica(&fx, echo("b")).await;
    let health = a.health.clone();
    let draining = tokio::spawn(a.stop());
    eventually(Duration::from_secs(5), "a draining", || {
        let draining = health.endpoints()[0].state == ServingState::Draining;
        async move { draining.then_some(()) }
    })
    .await;
    let during = caller
        .request("members.get", "new".into())
        .await
        .expect("answered");
    assert_eq!(
        answered_by(&during),
        ("b".to_owned(), "new".to_owned()),
        "a unsubscribed"
    );

    gate.add_permits(6);
    let mut answered = BTreeSet::new();
    for request in requests {
        let reply = request
            .await
            .unwrap()
            .expect("every accepted request is answered");
        let (name, payload) = answered_by(&reply);
        assert_eq!(name, "a", "answered by the replica that accepted it");
        answered.insert(payload);
    }
    assert_eq!(answered.len(), 6);
    draining.await.unwrap().expect("clean drain");
    let status = &health.endpoints()[0];
    assert_eq!((status.requests, status.errors), (6, 0));
    assert!(matches!(
        status.state,
        ServingState::Stopped { error: None }
    ));
    b.stop().await.expect("clean drain");
}

/// One caller's outcomes: per request, the answering replica, the payload and how many times
/// it was sent, or what went wrong.
type Outcomes = Vec<Result<(String, String, u32), String>>;

/// How many times a caller sends one request before giving up.
const ATTEMPTS: u32 = 5;

/// Requests from 8 callers, each sending the next as soon as the last is answered, until
/// `stop`; a request not answered within 2 s is sent again (as a NATS caller retries), up to
/// [`ATTEMPTS`] times.
fn keep_requesting(
    caller: &Client,
    stop: &Arc<std::sync::atomic::AtomicBool>,
) -> Vec<tokio::task::JoinHandle<Outcomes>> {
    (0..8)
        .map(|c| {
            let (caller, stop) = (caller.clone(), stop.clone());
            tokio::spawn(async move {
                let mut outcomes = Vec::new();
                let mut i = 0u64;
                while !stop.load(Ordering::SeqCst) {
                    let sent = format!("{c}-{i}");
                    let mut outcome = Err(String::new());
                    for attempt in 1..=ATTEMPTS {
                        let reply = caller
                            .send_request(
                                "members.get",
                                async_nats::Request::new()
                                    .payload(sent.clone().into())
                                    .timeout(Some(Duration::from_secs(2))),
                            )
                            .await;
                        outcome = match reply {
                            Ok(reply) => {
                                let (name, payload) = answered_by(&reply);
                                Ok((name, payload, attempt))
                            }
                            Err(e) => Err(format!("request {sent}, attempt {attempt}: {e}")),
                        };
                        if outcome.is_ok() {
                            break;
                        }
                    }
                    outcomes.push(outcome);
                    i += 1;
                }
                outcomes
            })
        })
        .collect()
}

/// How many requests `running`'s endpoint has answered.
fn answered_count(running: &Running) -> u64 {
    running.health.endpoints()[0].requests
}

/// A rolling restart under steady load: replica `a` drains while 8 callers keep sending, `c`
/// starts, then `b` drains. Every request is answered: what reached a draining replica is
/// answered there, and what the server routed to it in the instant before it processed the
/// `UNSUB` (async-nats 0.51 forgets a drained subscription on its next poll, not on the
/// server's `PONG`: docs/FAULTS.md) is answered by a survivor when its caller sends it again.
/// Each replica's health counts at least what callers saw it answer (more when a late answer
/// reached a caller that had already sent the request again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_under_load_answers_every_request() {
    let fx = Fixture::start().await;
    let a = replica(&fx, echo("a")).await;
    let b = replica(&fx, echo("b")).await;
    let caller = fx.connect().await;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let callers = keep_requesting(&caller, &stop);
    let (a_health, b_health) = (a.health.clone(), b.health.clone());
    eventually(Duration::from_secs(10), "both replicas answering", || {
        let n = a_health.endpoints()[0]
            .requests
            .min(b_health.endpoints()[0].requests);
        async move { (n >= 100).then_some(()) }
    })
    .await;
    a.stop().await.expect("a drains cleanly");
    let a_answered = a_health.endpoints()[0].requests;
    let c = replica(&fx, echo("c")).await;
    let c_health = c.health.clone();
    eventually(Duration::from_secs(10), "c answering", || {
        let n = c_health.endpoints()[0].requests;
        async move { (n >= 100).then_some(()) }
    })
    .await;
    b.stop().await.expect("b drains cleanly");
    let b_answered = b_health.endpoints()[0].requests;
    let after_b = answered_count(&c);
    eventually(Duration::from_secs(20), "c answering alone", || {
        let n = c_health.endpoints()[0].requests;
        async move { (n >= after_b + 100).then_some(()) }
    })
    .await;
    stop.store(true, Ordering::SeqCst);

    let mut by_replica: BTreeMap<String, u64> = BTreeMap::new();
    let mut payloads = BTreeSet::new();
    let mut lost = Vec::new();
    let mut sent_again = 0;
    for handle in callers {
        for outcome in handle.await.expect("caller") {
            match outcome {
                Ok((name, payload, attempts)) => {
                    *by_replica.entry(name).or_default() += 1;
                    sent_again += u64::from(attempts - 1);
                    assert!(payloads.insert(payload.clone()), "{payload} answered twice");
                }
                Err(e) => lost.push(e),
            }
        }
    }
    assert!(lost.is_empty(), "requests never answered: {lost:?}");
    eprintln!("answers by replica {by_replica:?}; {sent_again} request(s) sent again");
    let seen = |name: &str| by_replica.get(name).copied().unwrap_or(0);
    assert!(
        seen("a") >= 100 && seen("a") <= a_answered,
        "{by_replica:?}, a {a_answered}"
    );
    assert!(
        seen("b") >= 100 && seen("b") <= b_answered,
        "{by_replica:?}, b {b_answered}"
    );
    assert!(seen("c") >= 100, "{by_replica:?}");
    c.stop().await.expect("c drains cleanly");
}

/// The worker process's entry point. With [`WORKER_URL`] set, it serves `members.get` on that
/// server with a handler that reports `START <payload>` and never finishes, until it is
/// killed. Without it, it checks in-process that the worker's topology reports and holds a
/// request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_worker_process() {
    fixture::trace();
    let report = Arc::new(|payload: &str| println!("{MARK}START {payload}"));
    match std::env::var(WORKER_URL) {
        Ok(url) => {
            let client = async_nats::connect(url).await.expect("the worker connects");
            let running =
                Running::start(fixture::fast(Runtime::builder(client)).topology(stuck(report)))
                    .await;
            println!("{MARK}READY");
            tokio::task::spawn_blocking(|| {
                use std::io::BufRead;
                for _ in std::io::stdin().lock().lines().map_while(Result::ok) {}
            })
            .await
            .expect("the stdin reader does not panic");
            drop(running);
        }
        Err(_) => {
            let fx = Fixture::start().await;
            let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
            let report = {
                let seen = seen.clone();
                Arc::new(move |payload: &str| seen.lock().unwrap().push(payload.to_owned()))
            };
            let running = replica(&fx, stuck(report)).await;
            let client = fx.connect().await;
            let asked = client.send_request(
                "members.get",
                async_nats::Request::new()
                    .payload("9".into())
                    .timeout(Some(Duration::from_millis(300))),
            );
            assert!(asked.await.is_err(), "the worker's handler never answers");
            assert_eq!(*seen.lock().unwrap(), ["9"]);
            drop(running);
        }
    }
}

/// The worker's topology: the handler reports the request and never finishes.
fn stuck(report: Arc<dyn Fn(&str) + Send + Sync>) -> Topology {
    Topology::new().endpoint(
        EndpointDecl::new("tests::get_member", &MEMBERS, "get", "members.get"),
        move |request| {
            report(std::str::from_utf8(request.payload()).unwrap_or("?"));
            Box::pin(std::future::pending())
        },
    )
}

/// A replica killed with SIGKILL while it handles a request: the caller's retry is answered by
/// the survivor, in the same queue group.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_killed_mid_request_leaves_the_retry_to_the_survivor() {
    let fx = Fixture::start().await;
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut worker = tokio::process::Command::new(exe)
        .args([
            "--exact",
            "service_worker_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(WORKER_URL, fx.server.url())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn a worker process");
    let mut lines = BufReader::new(worker.stdout.take().unwrap()).lines();
    let mut next_report = async || loop {
        let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
            .await
            .expect("the worker reports in time")
            .expect("read the worker's stdout")
            .expect("the worker runs");
        if let Some(at) = line.find(MARK) {
            return line[at + MARK.len()..].to_owned();
        }
    };
    assert_eq!(next_report().await, "READY");

    let caller = fx.connect().await;
    let ask = || {
        let caller = caller.clone();
        async move {
            caller
                .send_request(
                    "members.get",
                    async_nats::Request::new()
                        .payload("42".into())
                        .timeout(Some(Duration::from_secs(2))),
                )
                .await
        }
    };
    // Only the worker serves yet: it takes the request, and holds it.
    let first = tokio::spawn(ask());
    assert_eq!(next_report().await, "START 42");
    let survivor = replica(&fx, echo("survivor")).await;
    let pid = worker.id().expect("the worker runs");
    worker.kill().await.expect("SIGKILL the worker");
    assert!(
        first.await.unwrap().is_err(),
        "the killed replica (pid {pid}) never answered"
    );
    // The caller retries: the server dropped the dead replica's subscription with its
    // connection, so the retry goes to the survivor.
    let reply = ask().await.expect("the retry is answered");
    assert_eq!(
        answered_by(&reply),
        ("survivor".to_owned(), "42".to_owned())
    );
    assert_eq!(survivor.health.endpoints()[0].requests, 1);
    survivor.stop().await.expect("clean drain");
}

/// Application state an endpoint's or a subscription's handler takes.
struct Directory;

static FIND: EndpointDecl =
    EndpointDecl::new("tests::find_member", &MEMBERS, "find", "members.find");
static FIND_STATES: [StateKey; 1] = [StateKey::of::<Directory>()];
static EVICT: SubscriptionDecl = SubscriptionDecl::each_instance("tests::evict", "cache.evict");

fn find_member(_: nats_topology::Request) -> nats_topology::__private::ReplyFuture {
    Box::pin(async { Ok(Default::default()) })
}

fn evict(_: nats_topology::Request) -> nats_topology::HandlerFuture {
    Box::pin(async { Ok(()) })
}

// As `#[endpoint]` and `#[subscription]` register handlers that take `State<Directory>`.
nats_topology::__private::inventory::submit! {
    nats_topology::__private::EndpointRegistration {
        decl: &FIND,
        handler: find_member,
        states: &FIND_STATES,
    }
}
nats_topology::__private::inventory::submit! {
    nats_topology::__private::SubscriptionRegistration {
        decl: &EVICT,
        handler: evict,
        states: &FIND_STATES,
    }
}

/// A handler's `State<T>` is checked at `build` for endpoints and subscriptions as for
/// consumers: each problem names the handler and the type; given the state, it builds.
#[tokio::test]
async fn build_names_the_handlers_whose_state_is_missing() {
    let fx = Fixture::start().await;
    let problems = match fx.builder().await.build() {
        Ok(_) => panic!("a runtime without the state its handlers take builds"),
        Err(e) => e.problems,
    };
    let text: Vec<String> = problems
        .iter()
        .map(|p| format!("{}: {}", p.location, p.message))
        .collect();
    let directory = std::any::type_name::<Directory>();
    assert!(
        text.iter().any(|p| p.starts_with(
            "endpoint `find` of service `members` on `members.find` (handler `tests::find_member`)"
        ) && p.contains(&format!("`State<{directory}>`"))),
        "{text:#?}"
    );
    assert!(
        text.iter().any(|p| p
            .starts_with("subscription to `cache.evict` (handler `tests::evict`)")
            && p.contains(&format!("`State<{directory}>`"))),
        "{text:#?}"
    );
    fx.builder()
        .await
        .state(Directory)
        .build()
        .expect("given the state, it builds");
}

/// A connection lost (the server killed) makes the endpoint `disconnected` and the runtime not
/// ready; once the client has reconnected and subscribed again, a probe proves it and it runs
/// and answers again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_connection_is_not_ready_until_reconnected_and_proven() {
    let mut fx = Fixture::start().await;
    let running = replica(&fx, echo("a")).await;
    fx.server.kill();
    eventually(Duration::from_secs(5), "the endpoint disconnected", || {
        let disconnected =
            state_of_endpoints(&running) == [ServingState::Disconnected] && !running.health.ready();
        async move { disconnected.then_some(()) }
    })
    .await;
    fx.server.restart().await.expect("the server starts again");
    running.ready(Duration::from_secs(15)).await;
    let client = fx.connect().await;
    let reply = client
        .send_request(
            "members.get",
            async_nats::Request::new()
                .payload("back".into())
                .timeout(Some(Duration::from_secs(2))),
        )
        .await
        .expect("ready means answering");
    assert_eq!(answered_by(&reply), ("a".to_owned(), "back".to_owned()));
    running.stop().await.expect("clean drain");
}

/// Each request's span (`request`, with `service`, `endpoint` and `subject`) continues the
/// caller's W3C trace from its `traceparent` header (feature `otel`). The spans are exported in
/// memory through a `tracing-opentelemetry` layer set as this binary's global subscriber (so
/// run it without `RUST_LOG`, which gives the binary another one).
#[cfg(feature = "otel")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_span_continues_the_callers_trace() {
    use opentelemetry::trace::{SpanId, TraceId, TracerProvider as _};
    use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
    use tracing_subscriber::layer::SubscriberExt;

    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("services-tests"));
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(layer))
        .expect("no other global subscriber in this binary: run it without RUST_LOG");

    let fx = Fixture::start().await;
    let running = replica(&fx, echo("traced")).await;
    let client = fx.connect().await;
    let mut headers = HeaderMap::new();
    headers.insert(
        "traceparent",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    );
    let reply = client
        .request_with_headers("members.get", headers, "7".into())
        .await
        .expect("answered");
    assert_eq!(answered_by(&reply).1, "7");
    let trace_id = TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap();
    // Other tests of this binary export spans too: the one of this trace.
    let span = eventually(
        Duration::from_secs(10),
        "the request's span exported",
        || {
            let found = exporter
                .get_finished_spans()
                .expect("the in-memory exporter reads")
                .into_iter()
                .find(|span| span.name == "request" && span.span_context.trace_id() == trace_id);
            async move { found }
        },
    )
    .await;
    let attribute = |key: &str| {
        span.attributes
            .iter()
            .find(|kv| kv.key.as_str() == key)
            .map(|kv| kv.value.to_string())
    };
    assert_eq!(attribute("service").as_deref(), Some("members"));
    assert_eq!(attribute("endpoint").as_deref(), Some("get"));
    assert_eq!(attribute("subject").as_deref(), Some("members.get"));
    assert_eq!(
        span.parent_span_id,
        SpanId::from_hex("00f067aa0ba902b7").unwrap()
    );
    running.stop().await.expect("clean drain");
}

/// A drain whose grace period runs out answers what is left with a 503 (the handler still
/// running and the requests still buffered), so that no caller waits out its own timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_out_of_time_answers_what_is_left_with_503() {
    let fx = Fixture::start().await;
    let builder = fixture::fast(fx.builder().await)
        .grace_period(Duration::from_millis(300))
        .topology(stuck(Arc::new(|_: &str| {})));
    let running = Running::start(builder).await;
    let caller = fx.connect().await;
    let requests = send_concurrently(&caller, 3, Duration::from_secs(10)).await;
    // Sent before the PING: they reached the replica before its answer did.
    caller
        .request("$SRV.PING.members", "".into())
        .await
        .expect("PING answered");
    let health = running.health.clone();
    running.stop().await.expect("clean drain");
    for request in requests {
        let reply = request.await.unwrap().expect("answered");
        let (code, description) = error_of(&reply).expect("an error");
        assert_eq!(code, 503);
        assert!(description.contains("grace period"), "{description}");
    }
    let status = &health.endpoints()[0];
    assert_eq!((status.requests, status.errors), (3, 3));
}
