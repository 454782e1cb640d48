//! Tests of the test kit itself, against real `nats-server` processes (Unix only, like the kit).

#![cfg(unix)]

use std::path::Path;
use std::time::Duration;

use async_nats::jetstream::{self, message::PublishMessage, stream};
use futures::StreamExt;
use nats_topology_testkit::*;

/// A JetStream context whose API requests and publish acks give up after 2 s, so that retries
/// inside `eventually` stay responsive.
fn js(client: async_nats::Client) -> jetstream::Context {
    jetstream::ContextBuilder::new()
        .timeout(Duration::from_secs(2))
        .build(client)
}

fn pid_exists(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// Publishes with a message id (deduplicated by the stream) until the ack arrives; returns the
/// stream sequence.
async fn publish_acked(js: &jetstream::Context, subject: &str, id: &str, within: Duration) -> u64 {
    eventually(within, &format!("the ack of message {id}"), || async {
        let ack = js
            .send_publish(
                subject.to_string(),
                PublishMessage::build()
                    .payload("payload".into())
                    .message_id(id),
            )
            .await
            .ok()?;
        ack.await.ok().map(|ack| ack.sequence)
    })
    .await
}

/// Creates a file-backed R3 stream, retrying while a fresh cluster times out the first
/// replicated create; returns its info.
async fn create_r3_stream(js: &jetstream::Context, name: &str, subjects: &str) -> stream::Info {
    let what = format!("R3 stream {name}");
    eventually(Duration::from_secs(30), &what, || async {
        js.create_stream(stream::Config {
            name: name.into(),
            subjects: vec![subjects.into()],
            storage: stream::StorageType::File,
            num_replicas: 3,
            ..Default::default()
        })
        .await
        .inspect_err(|e| eprintln!("creating R3 stream {name}: {e}"))
        .ok()
        .map(|s| s.cached_info().clone())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_serves_publish_and_request_and_stop_refuses_connections() {
    let mut server = NatsServer::start().await.expect("start nats-server");
    assert_eq!(server.url(), format!("nats://127.0.0.1:{}", server.port()));
    assert!(server.pid().is_some_and(pid_exists));
    assert!(server.store_dir().is_dir());

    let client = async_nats::connect(server.url()).await.expect("connect");

    // Publish reaches a subscriber.
    let mut sub = client.subscribe("kit.events").await.unwrap();
    client.publish("kit.events", "hello".into()).await.unwrap();
    client.flush().await.unwrap();
    let msg = tokio::time::timeout(Duration::from_secs(5), sub.next())
        .await
        .expect("message within 5 s")
        .expect("subscription open");
    assert_eq!(&msg.payload[..], b"hello");

    // Request/reply round-trips.
    let mut service = client.subscribe("kit.echo").await.unwrap();
    let responder = client.clone();
    tokio::spawn(async move {
        while let Some(req) = service.next().await {
            if let Some(reply) = req.reply {
                let mut body = b"echo:".to_vec();
                body.extend_from_slice(&req.payload);
                responder.publish(reply, body.into()).await.unwrap();
            }
        }
    });
    client.flush().await.unwrap();
    let reply = client.request("kit.echo", "ping".into()).await.unwrap();
    assert_eq!(&reply.payload[..], b"echo:ping");

    // JetStream is on.
    let info = js(client.clone())
        .query_account()
        .await
        .expect("account info");
    assert_eq!(info.streams, 0);

    // A graceful stop ends the process, and the port refuses connections.
    let pid = server.pid().unwrap();
    server.stop().await;
    assert_eq!(server.pid(), None);
    assert!(!pid_exists(pid), "process {pid} still exists after stop()");
    let refused = tokio::net::TcpStream::connect(("127.0.0.1", server.port())).await;
    assert_eq!(
        refused
            .expect_err("the port still accepts connections")
            .kind(),
        std::io::ErrorKind::ConnectionRefused
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_running_server_kills_it_and_removes_its_store() {
    let server = NatsServer::start().await.expect("start nats-server");
    let pid = server.pid().expect("running");
    let dir = server.store_dir().to_path_buf();
    let port = server.port();
    assert!(pid_exists(pid));
    assert!(dir.join("server.log").is_file());

    drop(server);

    assert!(!pid_exists(pid), "process {pid} still exists after drop");
    assert!(!dir.exists(), "store dir {} still exists", dir.display());
    assert!(
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaf_topology_reaches_each_domain_from_both_ends_and_drop_kills_both() {
    let servers = NatsLeafTopology::start()
        .await
        .expect("a hub and a leaf node");
    assert_eq!(servers.hub_domain(), HUB_DOMAIN);
    assert_eq!(servers.leaf_domain(), LEAF_DOMAIN);
    let hub = async_nats::connect(servers.hub_url()).await.unwrap();
    let leaf = async_nats::connect(servers.leaf_url()).await.unwrap();
    assert_eq!(hub.server_info().domain.as_deref(), Some("hub"));
    assert_eq!(leaf.server_info().domain.as_deref(), Some("edge"));

    // A stream created from the hub in the edge domain lives on the leaf node, and a message
    // published at the edge is read back from the hub through the domain.
    let edge_from_hub = jetstream::with_domain(hub.clone(), "edge");
    edge_from_hub
        .create_stream(stream::Config {
            name: "KIT_LEAF".into(),
            subjects: vec!["kitleaf.>".into()],
            ..Default::default()
        })
        .await
        .expect("created in the edge domain");
    let edge_local = js(leaf.clone());
    edge_local
        .publish("kitleaf.a", "at the edge".into())
        .await
        .unwrap()
        .await
        .expect("stored at the edge");
    let message = edge_from_hub
        .get_stream("KIT_LEAF")
        .await
        .unwrap()
        .get_raw_message(1)
        .await
        .expect("read from the hub");
    assert_eq!(message.payload.as_ref(), b"at the edge");
    assert!(
        js(hub.clone()).get_stream("KIT_LEAF").await.is_err(),
        "the hub's own JetStream has no such stream"
    );
    // And the other way round: the leaf reaches the hub's domain.
    let hub_from_leaf = jetstream::with_domain(leaf.clone(), "hub");
    hub_from_leaf
        .query_account()
        .await
        .expect("the hub's JetStream answers on the leaf");

    let pids = [servers.hub_pid().unwrap(), servers.leaf_pid().unwrap()];
    let dirs = [
        servers.hub_store_dir().to_path_buf(),
        servers.leaf_store_dir().to_path_buf(),
    ];
    assert!(dirs[0].join("server.conf").is_file());
    drop(servers);
    for (pid, dir) in pids.iter().zip(&dirs) {
        assert!(!pid_exists(*pid), "process {pid} still exists after drop");
        assert!(!dir.exists(), "store dir {} still exists", dir.display());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_is_abrupt_and_restart_after_kill_works() {
    let mut server = NatsServer::start().await.expect("start nats-server");
    let pid = server.pid().unwrap();
    server.kill();
    assert_eq!(server.pid(), None);
    assert!(!pid_exists(pid));
    assert!(
        tokio::net::TcpStream::connect(("127.0.0.1", server.port()))
            .await
            .is_err()
    );

    server.restart().await.expect("restart after kill");
    let new_pid = server.pid().expect("running again");
    assert_ne!(new_pid, pid);
    let client = async_nats::connect(server.url()).await.expect("connect");
    js(client).query_account().await.expect("JetStream answers");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_keeps_file_stream_messages_and_port() {
    let mut server = NatsServer::start().await.expect("start nats-server");
    let port = server.port();
    let dir = server.store_dir().to_path_buf();
    let old_pid = server.pid().unwrap();

    let client = async_nats::connect(server.url()).await.expect("connect");
    let js = js(client.clone());
    js.create_stream(stream::Config {
        name: "KEEP".into(),
        subjects: vec!["keep.>".into()],
        storage: stream::StorageType::File,
        ..Default::default()
    })
    .await
    .expect("create stream");
    for i in 0..10 {
        let ack = js
            .publish("keep.item", format!("m{i}").into())
            .await
            .unwrap()
            .await
            .unwrap();
        assert_eq!(ack.sequence, i + 1);
    }

    server.restart().await.expect("restart");
    assert_eq!(server.port(), port);
    assert_eq!(server.store_dir(), dir);
    assert_ne!(server.pid(), Some(old_pid));
    assert!(!pid_exists(old_pid));

    // The old client reconnects to the same port by itself.
    let messages = eventually(Duration::from_secs(10), "KEEP after restart", || async {
        let mut stream = js.get_stream("KEEP").await.ok()?;
        Some(stream.info().await.ok()?.state.messages)
    })
    .await;
    assert_eq!(messages, 10);

    // A fresh connection sees the same.
    let fresh = async_nats::connect(server.url()).await.expect("reconnect");
    let mut stream = jetstream::new(fresh).get_stream("KEEP").await.unwrap();
    let info = stream.info().await.unwrap();
    assert_eq!(info.state.messages, 10);
    assert_eq!(info.config.storage, stream::StorageType::File);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_creates_an_r3_stream_and_accepts_publishes() {
    let started = std::time::Instant::now();
    let cluster = NatsCluster::start().await.expect("start cluster");
    eprintln!("cluster ready after {:?}", started.elapsed());
    assert_eq!(cluster.len(), 3);
    assert!(!cluster.is_empty());
    let urls = cluster.urls();
    assert_eq!(urls.len(), 3);
    for (i, url) in urls.iter().enumerate() {
        assert_eq!(url, &cluster.url(i));
        assert!(cluster.pid(i).is_some_and(pid_exists));
    }
    assert_eq!(cluster.server_addrs().len(), 3);

    let client = async_nats::connect(cluster.server_addrs())
        .await
        .expect("connect");
    let js = js(client);
    let created = std::time::Instant::now();
    let info = create_r3_stream(&js, "ORDERS", "orders.>").await;
    eprintln!("R3 stream created after {:?}", created.elapsed());
    assert_eq!(info.config.num_replicas, 3);
    let cluster_info = info.cluster.expect("cluster info");
    assert!(cluster_info.leader.is_some());

    for i in 0..5 {
        let seq = publish_acked(&js, "orders.new", &format!("o{i}"), Duration::from_secs(20)).await;
        assert_eq!(seq, i + 1);
    }
    let messages = eventually(Duration::from_secs(10), "5 messages in ORDERS", || async {
        let mut stream = js.get_stream("ORDERS").await.ok()?;
        let info = stream.info().await.ok()?;
        Some(info.state.messages).filter(|n| *n == 5)
    })
    .await;
    assert_eq!(messages, 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_survives_a_killed_stream_leader_and_the_node_rejoins() {
    let mut cluster = NatsCluster::start().await.expect("start cluster");
    let client = async_nats::connect(cluster.server_addrs())
        .await
        .expect("connect");
    let js_all = js(client);
    create_r3_stream(&js_all, "EVENTS", "events.>").await;
    for i in 0..5 {
        publish_acked(
            &js_all,
            "events.a",
            &format!("e{i}"),
            Duration::from_secs(20),
        )
        .await;
    }

    // Kill the stream leader: the hardest case (a re-election).
    let leader = eventually(Duration::from_secs(10), "the EVENTS leader", || async {
        let mut stream = js_all.get_stream("EVENTS").await.ok()?;
        stream.info().await.ok()?.cluster.as_ref()?.leader.clone()
    })
    .await;
    let victim = (0..cluster.len())
        .find(|&i| leader == format!("node{i}"))
        .unwrap_or_else(|| panic!("leader {leader} is not one of node0..node2"));
    let victim_pid = cluster.pid(victim).unwrap();
    cluster.kill(victim);
    assert_eq!(cluster.pid(victim), None);
    assert!(!pid_exists(victim_pid));

    // The two survivors keep accepting publishes once a new leader is elected.
    let survivors: Vec<_> = cluster
        .server_addrs()
        .into_iter()
        .enumerate()
        .filter(|(i, _)| *i != victim)
        .map(|(_, addr)| addr)
        .collect();
    let survivor_client = async_nats::connect(survivors)
        .await
        .expect("connect to survivors");
    let js_survivors = js(survivor_client);
    let killed_at = std::time::Instant::now();
    for i in 5..10 {
        let seq = publish_acked(
            &js_survivors,
            "events.a",
            &format!("e{i}"),
            Duration::from_secs(30),
        )
        .await;
        assert_eq!(seq, i + 1);
    }
    eprintln!(
        "5 publishes after killing leader {leader} took {:?}",
        killed_at.elapsed()
    );
    let new_leader = eventually(Duration::from_secs(10), "a new EVENTS leader", || async {
        let mut stream = js_survivors.get_stream("EVENTS").await.ok()?;
        stream.info().await.ok()?.cluster.as_ref()?.leader.clone()
    })
    .await;
    assert_ne!(new_leader, leader);

    // The killed node comes back on the same port and store, and catches up.
    let port = cluster.port(victim);
    let restarted_at = std::time::Instant::now();
    cluster
        .restart(victim)
        .await
        .expect("restart the killed node");
    eprintln!(
        "node{victim} answered again after {:?}",
        restarted_at.elapsed()
    );
    assert_eq!(cluster.port(victim), port);
    assert!(cluster.pid(victim).is_some_and(pid_exists));

    let only_restarted = async_nats::ConnectOptions::new()
        .ignore_discovered_servers()
        .connect(cluster.url(victim))
        .await
        .expect("connect to the restarted node");
    let js_restarted = js(only_restarted);
    let victim_name = format!("node{victim}");
    let caught_up = eventually(
        Duration::from_secs(30),
        "the restarted node to hold all 10 messages",
        || async {
            let mut stream = js_restarted.get_stream("EVENTS").await.ok()?;
            let info = stream.info().await.ok()?;
            let cluster_info = info.cluster.as_ref()?;
            let replica_current = cluster_info.leader.as_deref() == Some(victim_name.as_str())
                || cluster_info.replicas.iter().any(|r| {
                    r.name == victim_name && r.current && !r.offline && r.lag.unwrap_or(0) == 0
                });
            (replica_current && info.state.messages == 10).then_some(info.state.messages)
        },
    )
    .await;
    eprintln!("node{victim} caught up after {:?}", restarted_at.elapsed());
    assert_eq!(caught_up, 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eventually_returns_the_first_some() {
    let mut calls = 0;
    let value = eventually(Duration::from_secs(5), "the third call", || {
        calls += 1;
        let n = calls;
        async move { (n >= 3).then_some(n) }
    })
    .await;
    assert_eq!(value, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[should_panic(expected = "timed out after 100ms waiting for something that never happens")]
async fn eventually_panics_with_what_it_waited_for() {
    eventually(
        Duration::from_millis(100),
        "something that never happens",
        || async { None::<()> },
    )
    .await;
}

#[test]
fn server_binary_is_found_or_installed() {
    let bin = server_binary().expect("a nats-server binary");
    assert!(bin.is_file(), "{} is not a file", bin.display());
    let output = std::process::Command::new(&bin)
        .arg("--version")
        .output()
        .expect("run nats-server --version");
    assert!(output.status.success());
    let printed = String::from_utf8_lossy(&output.stdout);
    assert!(printed.contains("nats-server: v"), "{printed}");
    // The server version matrix (scripts/server-matrix) selects the version this way.
    if std::env::var_os("NATS_SERVER_BIN").is_none()
        && let Some(version) = std::env::var("NATS_SERVER_VERSION")
            .ok()
            .filter(|v| !v.is_empty())
    {
        assert!(
            printed.contains(&format!("nats-server: v{version}")),
            "NATS_SERVER_VERSION={version} but {} prints {printed}",
            bin.display()
        );
        assert!(
            bin.ends_with(format!("nats-server-{version}/bin/nats-server")),
            "{}",
            bin.display()
        );
    }
}
