//! Health endpoints (feature `http`) over real HTTP: `/livez`, `/readyz` with every
//! consumer's state as JSON, `/metrics` from a Prometheus recorder; ready, not ready when the
//! server goes down, ready again when it is back, not live once drained.

#[path = "../../tests/fixture/mod.rs"]
mod fixture;

use std::net::SocketAddr;
use std::time::Duration;

use nats_topology::http::{Endpoints, RuntimeHttp};
use nats_topology::model::{BroadcastDecl, ConsumerDecl, QueueDecl, StreamDecl, StreamRef};
use nats_topology::{HandlerError, Runtime, Topology};
use nats_topology_testkit::{NatsServer, eventually};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

static EVENTS: StreamDecl = StreamDecl::new("HEALTH_EVENTS", &["health.events.>"]);

fn topology() -> Topology {
    let ok = |_| -> nats_topology::HandlerFuture { Box::pin(async { Ok::<(), HandlerError>(()) }) };
    Topology::new()
        .consumer(
            ConsumerDecl::queue(
                "health::work",
                StreamRef::Declared(&EVENTS),
                QueueDecl::new("health-workers"),
            )
            .subjects(&["health.events.work"]),
            ok,
        )
        .consumer(
            ConsumerDecl::broadcast(
                "health::relay",
                StreamRef::Declared(&EVENTS),
                BroadcastDecl::new(),
            )
            .subjects(&["health.events.status"]),
            ok,
        )
}

/// A plain HTTP/1.1 GET: the status code and the body.
async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .expect("connects");
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    tokio::time::timeout(
        Duration::from_secs(10),
        stream.read_to_string(&mut response),
    )
    .await
    .expect("the endpoint answers within 10 s")
    .unwrap();
    let status: u16 = response
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {response:?}"));
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default();
    (status, body)
}

async fn get_json(addr: SocketAddr, path: &str) -> (u16, Value) {
    let (status, body) = get(addr, path).await;
    let json = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {body:?}"));
    (status, json)
}

/// The state of consumer `name` in a `/readyz` body.
fn state_of<'a>(body: &'a Value, name: &str) -> &'a Value {
    body["consumers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["handler"] == name)
        .unwrap_or_else(|| panic!("no consumer {name} in {body}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_endpoints_follow_the_runtime_and_the_server() {
    fixture::trace();
    let mut server = NatsServer::start().await.expect("nats-server starts");
    let client = nats_topology::connect(&server.url()).await.unwrap();
    // Short heartbeats: a server that went away is noticed within a second or so.
    let runtime = fixture::fast(Runtime::builder(client))
        .topology(topology())
        .build()
        .unwrap();
    let health = runtime.health();
    let served = runtime
        .serve_health("127.0.0.1:0".parse().unwrap())
        .await
        .expect("the endpoints are served");
    let addr = served.local_addr();

    // Not started: alive (nothing has died), not ready.
    let (status, body) = get_json(addr, "/readyz").await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["ready"], false);
    assert_eq!(
        state_of(&body, "health::work")["state"],
        "starting",
        "{body}"
    );
    let (status, _) = get_json(addr, "/livez").await;
    assert_eq!(status, 200);

    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(runtime.run_until(async move {
        let _ = stopped.await;
    }));
    health.wait_ready(Duration::from_secs(30)).await.unwrap();

    // Ready: 200, every consumer listed as running.
    let (status, body) = get_json(addr, "/readyz").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["ready"], true);
    assert_eq!(body["consumers"].as_array().unwrap().len(), 2, "{body}");
    let work = state_of(&body, "health::work");
    assert_eq!(work["state"], "running");
    assert_eq!(work["kind"], "queue");
    assert_eq!(work["stream"], "HEALTH_EVENTS");
    assert_eq!(work["consumer"], "health-workers");
    assert_eq!(work["handled"], 0);
    assert_eq!(work["restarts"], 0, "{body}");
    let relay = state_of(&body, "health::relay");
    assert_eq!(relay["state"], "running");
    assert_eq!(relay["kind"], "broadcast");
    let (status, _) = get_json(addr, "/livez").await;
    assert_eq!(status, 200);

    // The server goes down: not ready (503, with the reason), still alive.
    server.stop().await;
    let body = eventually(Duration::from_secs(30), "/readyz to answer 503", || async {
        let (status, body) = get_json(addr, "/readyz").await;
        (status == 503).then_some(body)
    })
    .await;
    assert_eq!(body["ready"], false);
    let states: Vec<&Value> = body["consumers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| &c["state"])
        .collect();
    assert!(states.iter().any(|s| *s != "running"), "{body}");
    let (status, body) = get_json(addr, "/livez").await;
    assert_eq!(
        status, 200,
        "a broker that is down is not a reason to restart: {body}"
    );

    // Back: ready again, and the sessions the outage ended are counted.
    server.restart().await.expect("nats-server restarts");
    let body = eventually(
        Duration::from_secs(60),
        "/readyz to answer 200 again",
        || async {
            let (status, body) = get_json(addr, "/readyz").await;
            (status == 200).then_some(body)
        },
    )
    .await;
    let restarts: Vec<u64> = body["consumers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["restarts"].as_u64().expect("a count of restarts"))
        .collect();
    assert!(restarts.iter().any(|n| *n >= 1), "{body}");

    // Drained: its supervisors have ended, so it is not alive any more.
    let _ = stop.send(());
    running.await.unwrap().unwrap();
    let (status, body) = get_json(addr, "/livez").await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(
        state_of(&body, "health::work")["state"],
        "stopped",
        "{body}"
    );
    let (status, _) = get_json(addr, "/readyz").await;
    assert_eq!(status, 503);
    // No `/metrics` unless a render function is given.
    assert_eq!(get(addr, "/metrics").await.0, 404);
    served.shutdown().await;
}

#[tokio::test]
async fn health_routes_mount_on_an_application_router_with_metrics() {
    let server = NatsServer::start().await.expect("nats-server starts");
    let client = nats_topology::connect(&server.url()).await.unwrap();
    let runtime = Runtime::builder(client)
        .topology(topology())
        .build()
        .unwrap();

    // A Prometheus recorder of the application's own, not installed globally.
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    metrics::with_local_recorder(&recorder, || {
        metrics::counter!("health_test_requests_total", "route" => "app").increment(3);
    });

    let app: axum::Router = runtime.mount_health(
        axum::Router::new().route("/app", axum::routing::get(|| async { "the application" })),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let serving = tokio::spawn(async move { axum::serve(listener, app).await });

    let (status, body) = get(addr, "/app").await;
    assert_eq!((status, body.as_str()), (200, "the application"));
    let (status, body) = get_json(addr, "/readyz").await;
    assert_eq!(status, 503, "not started: {body}");
    assert_eq!(body["consumers"].as_array().unwrap().len(), 2);
    assert_eq!(
        get(addr, "/metrics").await.0,
        404,
        "no render function given"
    );
    serving.abort();

    // With a render function, on an address of its own.
    let served = Endpoints::new(runtime.health())
        .metrics(move || handle.render())
        .serve("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let (status, text) = get(served.local_addr(), "/metrics").await;
    assert_eq!(status, 200, "{text}");
    assert!(
        text.contains("health_test_requests_total{route=\"app\"} 3"),
        "{text}"
    );
    let (status, _) = get(served.local_addr(), "/livez").await;
    assert_eq!(status, 200);
    served.shutdown().await;
}
