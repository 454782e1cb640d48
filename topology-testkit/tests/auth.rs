//! Servers and clusters with authorization and TLS: users with permissions admit the right
//! user and refuse the rest, a permission not granted is a server error on the connection,
//! a TLS-only server refuses plain clients, and a cluster with both forms with three nodes.

#![cfg(unix)]

use std::time::Duration;

use async_nats::jetstream::{self, stream};
use async_nats::{ConnectErrorKind, ConnectOptions, Event, ServerError};
use futures::StreamExt;
use nats_topology_testkit::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

/// An `admin` user allowed everything (its password read from `$ADMIN_PASSWORD`) and a
/// `limited` user that may publish and subscribe only under `allowed.>` (and receive replies).
const USERS: &str = r#"
authorization {
  users = [
    { user: admin, password: $ADMIN_PASSWORD }
    {
      user: limited
      password: limited-pw
      permissions: {
        publish: { allow: ["allowed.>"] }
        subscribe: { allow: ["allowed.>", "_INBOX.>"] }
      }
    }
  ]
}
"#;

const ADMIN_PASSWORD: &str = "admin-pw";

fn admin() -> ConnectOptions {
    ConnectOptions::new().user_and_password("admin".into(), ADMIN_PASSWORD.into())
}

fn limited() -> ConnectOptions {
    ConnectOptions::new().user_and_password("limited".into(), "limited-pw".into())
}

/// `options` with an event callback that forwards every connection event to the receiver.
fn with_events(options: ConnectOptions) -> (ConnectOptions, mpsc::UnboundedReceiver<Event>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let options = options.event_callback(move |event| {
        let tx = tx.clone();
        async move {
            let _ = tx.send(event);
        }
    });
    (options, rx)
}

/// The first server error among the events within `timeout`.
async fn server_error(events: &mut mpsc::UnboundedReceiver<Event>, timeout: Duration) -> String {
    let wait = async {
        while let Some(event) = events.recv().await {
            if let Event::ServerError(ServerError::Other(message)) = event {
                return message;
            }
        }
        panic!("the connection's events ended without a server error");
    };
    tokio::time::timeout(timeout, wait)
        .await
        .expect("a server error within the timeout")
}

/// A message published by `publisher` on `subject` reaches `subscriber`: published again
/// until one arrives (the subscription is on the server only once the server has read it;
/// `flush` only writes it out), for up to 10 s.
async fn round_trip(
    publisher: &async_nats::Client,
    subscriber: &async_nats::Client,
    subject: &str,
) {
    let mut sub = subscriber.subscribe(subject.to_owned()).await.unwrap();
    let received = async {
        loop {
            publisher
                .publish(subject.to_owned(), "hello".into())
                .await
                .unwrap();
            publisher.flush().await.unwrap();
            if let Ok(Some(message)) =
                tokio::time::timeout(Duration::from_millis(200), sub.next()).await
            {
                return message.payload;
            }
        }
    };
    let payload = tokio::time::timeout(Duration::from_secs(10), received)
        .await
        .unwrap_or_else(|_| panic!("a message on {subject} within 10 s"));
    assert_eq!(&payload[..], b"hello");
}

/// Sends a plain (non-TLS) `CONNECT` and `PING` to `port` and returns what the server answers
/// until it closes the connection (or 5 s pass).
async fn plain_exchange(port: u16) -> String {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("TCP connect");
    let mut received = Vec::new();
    let exchange = async {
        let mut buf = [0u8; 4096];
        let n = stream.read(&mut buf).await.expect("the INFO line");
        received.extend_from_slice(&buf[..n]);
        let _ = stream
            .write_all(b"CONNECT {\"verbose\":false}\r\nPING\r\n")
            .await;
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => received.extend_from_slice(&buf[..n]),
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(5), exchange).await;
    String::from_utf8_lossy(&received).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_admit_the_right_password_and_refuse_a_wrong_one() {
    let server = NatsServer::builder()
        .config(USERS)
        .env("ADMIN_PASSWORD", ADMIN_PASSWORD)
        .probe_user("admin", ADMIN_PASSWORD)
        .start()
        .await
        .expect("a server with users starts");
    assert!(server.tls().is_none());
    assert!(server.url().starts_with("nats://"));

    let admin = admin().connect(server.url()).await.expect("admin connects");
    let limited = limited()
        .connect(server.url())
        .await
        .expect("limited connects");
    round_trip(&limited, &admin, "allowed.greeting").await;
    let info = jetstream::new(admin.clone())
        .query_account()
        .await
        .expect("JetStream for admin");
    assert_eq!(info.streams, 0);

    let wrong = ConnectOptions::new()
        .user_and_password("admin".into(), "not-the-password".into())
        .connect(server.url())
        .await
        .expect_err("a wrong password is refused");
    assert_eq!(wrong.kind(), ConnectErrorKind::AuthorizationViolation);
    let anonymous = async_nats::connect(server.url())
        .await
        .expect_err("no credentials are refused");
    assert_eq!(anonymous.kind(), ConnectErrorKind::AuthorizationViolation);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permission_not_granted_is_a_permissions_violation() {
    let server = NatsServer::builder()
        .config(USERS)
        .env("ADMIN_PASSWORD", ADMIN_PASSWORD)
        .probe_user("admin", ADMIN_PASSWORD)
        .start()
        .await
        .expect("a server with users starts");
    let (options, mut events) = with_events(limited());
    let limited = options
        .connect(server.url())
        .await
        .expect("limited connects");

    limited
        .publish("denied.subject", "nope".into())
        .await
        .expect("the client sends the publish");
    limited.flush().await.expect("flush");
    let error = server_error(&mut events, Duration::from_secs(10)).await;
    assert!(
        error.contains("Permissions Violation") && error.contains("denied.subject"),
        "{error}"
    );

    // A subscription outside the permissions, likewise.
    let _sub = limited.subscribe("denied.>").await.expect("sent");
    limited.flush().await.expect("flush");
    let error = server_error(&mut events, Duration::from_secs(10)).await;
    assert!(
        error.contains("Permissions Violation") && error.contains("Subscription"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_probe_refused_by_the_server_fails_at_once_naming_the_fix() {
    let started = std::time::Instant::now();
    let error = NatsServer::builder()
        .config(USERS)
        .env("ADMIN_PASSWORD", ADMIN_PASSWORD)
        .start()
        .await
        .expect_err("the probe has no credentials");
    let message = error.to_string();
    assert!(matches!(error, TestkitError::NotReady { .. }), "{message}");
    assert!(message.contains("probe_user"), "{message}");
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "a refused probe is not retried until the 20 s deadline: {:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mutual_tls_server_refuses_plain_clients_and_admits_a_client_certificate() {
    let server = NatsServer::builder()
        .mutual_tls()
        .start()
        .await
        .expect("a TLS server starts");
    let tls = server.tls().expect("TLS files").clone();
    assert!(tls.verifies_clients());
    assert_eq!(server.url(), format!("tls://127.0.0.1:{}", server.port()));
    for path in [
        tls.ca(),
        tls.client_cert(),
        tls.client_key(),
        tls.server_cert(),
        tls.server_key(),
    ] {
        assert!(path.starts_with(server.store_dir()), "{}", path.display());
        assert!(
            std::fs::read_to_string(path)
                .unwrap()
                .starts_with("-----BEGIN "),
            "{} is PEM",
            path.display()
        );
    }

    // Plain text: the server answers nothing but its INFO (which requires TLS), and no PONG.
    let plain = plain_exchange(server.port()).await;
    eprintln!("a plain client got: {plain:?}");
    assert!(plain.starts_with("INFO "), "{plain}");
    assert!(plain.contains("\"tls_required\":true"), "{plain}");
    assert!(
        !plain.contains("PONG"),
        "a plain client was served: {plain}"
    );
    // A client that does not trust the CA, and one that trusts it but has no certificate.
    let plain_url = format!("nats://127.0.0.1:{}", server.port());
    assert!(async_nats::connect(plain_url.as_str()).await.is_err());
    let no_certificate = ConnectOptions::new()
        .add_root_certificates(tls.ca().to_path_buf())
        .require_tls(true)
        .connect(server.url())
        .await;
    assert!(
        no_certificate.is_err(),
        "mutual TLS requires a client certificate"
    );

    let client = tls
        .connect_options()
        .connect(server.url())
        .await
        .expect("a client with the CA and a client certificate connects");
    round_trip(&client, &client, "tls.greeting").await;
    let js = jetstream::new(client);
    let created = js
        .create_stream(stream::Config {
            name: "OVER_TLS".into(),
            subjects: vec!["tls.>".into()],
            ..Default::default()
        })
        .await
        .expect("JetStream over TLS");
    drop(created);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_server_admits_a_client_that_trusts_its_ca_and_restarts_with_it() {
    let mut server = NatsServer::builder()
        .tls()
        .config("authorization { token: $TOKEN }")
        .env("TOKEN", "s3cret-token")
        .probe_token("s3cret-token")
        .start()
        .await
        .expect("a TLS server with a token starts");
    let tls = server.tls().expect("TLS files").clone();
    assert!(!tls.verifies_clients());

    let trusting = || {
        ConnectOptions::new()
            .add_root_certificates(tls.ca().to_path_buf())
            .token("s3cret-token".into())
    };
    let client = trusting()
        .connect(server.url())
        .await
        .expect("trusting the CA is enough without client verification");
    round_trip(&client, &client, "tls.once").await;
    drop(client);

    // Restarted: the same port, TLS with the same files, the same token.
    let port = server.port();
    server.restart().await.expect("restart");
    assert_eq!(server.port(), port);
    let client = trusting()
        .connect(server.url())
        .await
        .expect("the restarted server has the same TLS and token");
    round_trip(&client, &client, "tls.again").await;
    let plain = plain_exchange(server.port()).await;
    assert!(
        !plain.contains("PONG"),
        "a plain client was served: {plain}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_with_users_and_mutual_tls_forms_with_three_nodes() {
    let started = std::time::Instant::now();
    let cluster = NatsCluster::builder()
        .config(USERS)
        .env("ADMIN_PASSWORD", ADMIN_PASSWORD)
        .probe_user("admin", ADMIN_PASSWORD)
        .mutual_tls()
        .start()
        .await
        .expect("a cluster with users and TLS starts");
    eprintln!("cluster ready after {:?}", started.elapsed());
    let tls = cluster.tls().expect("TLS files").clone();
    for i in 0..cluster.len() {
        assert_eq!(
            cluster.url(i),
            format!("tls://127.0.0.1:{}", cluster.port(i))
        );
        // Each node admits the admin over TLS and refuses a wrong password.
        let options = tls.connect_options().ignore_discovered_servers();
        let client = options
            .user_and_password("admin".into(), ADMIN_PASSWORD.into())
            .connect(cluster.url(i))
            .await
            .unwrap_or_else(|e| panic!("node {i} admits admin: {e}"));
        drop(client);
        let wrong = tls
            .connect_options()
            .user_and_password("admin".into(), "wrong".into())
            .connect(cluster.url(i))
            .await
            .expect_err("a wrong password is refused");
        assert_eq!(wrong.kind(), ConnectErrorKind::AuthorizationViolation);
    }

    // Three nodes: an R3 stream has a leader and two current replicas.
    let client = tls
        .connect_options()
        .user_and_password("admin".into(), ADMIN_PASSWORD.into())
        .connect(cluster.server_addrs())
        .await
        .expect("admin connects to the cluster");
    let js = jetstream::ContextBuilder::new()
        .timeout(Duration::from_secs(2))
        .build(client);
    let info = eventually(Duration::from_secs(30), "an R3 stream", || async {
        js.create_stream(stream::Config {
            name: "SECURE".into(),
            subjects: vec!["allowed.secure.>".into()],
            num_replicas: 3,
            ..Default::default()
        })
        .await
        .ok()
        .map(|s| s.cached_info().clone())
    })
    .await;
    let placement = info.cluster.expect("cluster info");
    assert!(placement.leader.is_some());
    let replicas = eventually(Duration::from_secs(30), "two current replicas", || async {
        let mut stream = js.get_stream("SECURE").await.ok()?;
        let info = stream.info().await.ok()?;
        let replicas = info.cluster.as_ref()?.replicas.clone();
        (replicas.len() == 2 && replicas.iter().all(|r| r.current)).then_some(replicas)
    })
    .await;
    assert_eq!(replicas.len(), 2);
}
