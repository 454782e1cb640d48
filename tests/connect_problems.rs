//! A connection that cannot come up is named, with its cause, within seconds: in health (the
//! JetStream status every readiness report shows) and by `nats_topology::diagnose`. The
//! faults beside each other: nothing listens on the port, and a server that runs without
//! JetStream.

mod fixture;

use std::net::TcpListener;
use std::time::Duration;

use fixture::Running;
use nats_topology::{ProblemKind, Runtime};
use nats_topology_testkit::eventually;

/// A runtime over one stream and queue consumer, on `client`.
fn runtime(client: nats_topology::async_nats::Client) -> Runtime {
    let decl = fixture::stream("PROBLEMS", &["problems.>"]);
    let consumer = fixture::queue(
        "tests::on_job",
        &decl,
        "problems.work",
        nats_topology::model::QueueDecl::new("workers"),
    );
    fixture::fast(Runtime::builder(client))
        .topology(fixture::job_topology(
            decl,
            consumer,
            Default::default(),
            Duration::ZERO,
        ))
        .build()
        .expect("a valid topology")
}

/// A loopback port on which nothing listens (bound, read, released).
fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local address").port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_port_is_named_within_seconds() {
    let url = format!("nats://127.0.0.1:{}", free_port());
    let client = nats_topology::connect(&url).await.expect("returns at once");
    let problem = nats_topology::diagnose(&client)
        .await
        .expect("a problem is named");
    assert_eq!(problem.kind, ProblemKind::Refused, "{problem}");
    assert!(problem.to_string().contains(&url), "{problem}");

    let running = Running::spawn(runtime(client));
    let health = running.health.clone();
    let error = eventually(
        Duration::from_secs(5),
        "health to name the refused connection",
        || {
            let jetstream = health.jetstream();
            async move { jetstream.error.filter(|e| e.contains("connection refused")) }
        },
    )
    .await;
    assert!(error.contains(&url), "names the URL: {error}");
    assert!(!health.ready());
    assert!(
        health.to_string().contains("connection refused"),
        "{health}"
    );
    running.stop().await.expect("a drain without a server ends");
}

/// A nats-server without JetStream, started by this test from the test kit's binary, stopped
/// by pid on drop.
struct PlainServer {
    child: std::process::Child,
    port: u16,
}

impl Drop for PlainServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_jetstream_is_named_within_seconds() {
    let port = free_port();
    let binary = nats_topology_testkit::server_binary().expect("the test kit's nats-server");
    let child = std::process::Command::new(binary)
        .args(["-a", "127.0.0.1", "-p", &port.to_string()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("nats-server starts");
    let server = PlainServer { child, port };
    let url = format!("nats://127.0.0.1:{}", server.port);
    let client = nats_topology::connect(&url).await.expect("returns at once");
    eventually(Duration::from_secs(10), "the connection", || {
        let state = client.connection_state();
        async move { (state == nats_topology::async_nats::connection::State::Connected).then_some(()) }
    })
    .await;

    let running = Running::spawn(runtime(client));
    let health = running.health.clone();
    let error = eventually(
        Duration::from_secs(5),
        "health to name the missing JetStream",
        || {
            let jetstream = health.jetstream();
            async move {
                jetstream
                    .error
                    .filter(|e| e.contains("JetStream is not enabled"))
            }
        },
    )
    .await;
    assert!(error.contains("-js"), "says what to do: {error}");
    assert!(!health.ready());
    running.stop().await.expect("clean drain");
}

/// What the server denied a user is readable from the client (the server says it only on the
/// connection: a denied request just goes unanswered), so that a report made with the wrong
/// credentials says so instead of printing an incomplete answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_server_denied_is_read_from_the_client() {
    let permissions = nats_topology::export::permissions(
        &nats_topology::Topology::new(),
        &nats_topology::export::Role::owner("narrow"),
    );
    let server = nats_topology_testkit::NatsServer::builder()
        .config(fixture::users_config(&[("narrow", "pw", &permissions)]))
        .probe_user("admin", "admin")
        .start()
        .await
        .expect("server starts");
    let client = fixture::client_of(&server.url(), "narrow", "pw", "_INBOX_narrow").await;
    assert!(nats_topology::denied(&client).is_empty());
    client
        .publish("$SRV.PING.orders", "".into())
        .await
        .expect("sent");
    client.flush().await.expect("flushed");
    let denied = eventually(Duration::from_secs(5), "the denial", || {
        let denied = nats_topology::denied(&client);
        async move { (!denied.is_empty()).then_some(denied) }
    })
    .await;
    assert_eq!(denied, ["publish to `$SRV.PING.orders`"]);
}
