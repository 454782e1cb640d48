//! Tests of the kit's links (loopback proxies that stall, delay and cut) and of a cluster
//! behind them, against real `nats-server` processes.

#![cfg(unix)]

use std::time::Duration;

use futures::StreamExt;
use nats_topology_testkit::*;
use tokio::time::Instant;

/// How long a test waits to be sure that something does not happen.
const QUIET: Duration = Duration::from_millis(500);

async fn connect(url: &str) -> async_nats::Client {
    async_nats::ConnectOptions::new()
        .ignore_discovered_servers()
        .connect(url)
        .await
        .expect("connect")
}

/// Answers every request on `echo` (on a direct connection of its own), so that a request
/// from a client through a link is a round trip through it (`Client::flush` only writes).
async fn echo(url: &str) -> async_nats::Client {
    let responder = connect(url).await;
    let mut requests = responder.subscribe("echo").await.expect("subscribe");
    let replies = responder.clone();
    tokio::spawn(async move {
        while let Some(request) = requests.next().await {
            if let Some(reply) = request.reply {
                let _ = replies.publish(reply, request.payload).await;
            }
        }
    });
    // Answered through the server: the subscription is registered there (a flush only
    // writes), so no request of the test finds no responder.
    assert!(
        answers(&responder, Duration::from_secs(5)).await,
        "the echo answers"
    );
    responder
}

/// A round trip through `client`'s connection completes within `within`.
async fn answers(client: &async_nats::Client, within: Duration) -> bool {
    tokio::time::timeout(within, client.request("echo", "ping".into()))
        .await
        .is_ok_and(|r| r.is_ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_link_holds_every_byte_until_it_heals() {
    let server = NatsServer::start().await.expect("nats-server starts");
    let link = Link::start(server.port()).await.expect("a link starts");
    let through = connect(&link.url()).await;
    let direct = connect(&server.url()).await;
    let _echo = echo(&server.url()).await;
    let mut received = direct.subscribe("stalled.>").await.expect("subscribe");
    assert!(answers(&direct, Duration::from_secs(5)).await, "subscribed");
    assert_eq!(link.connections(), 1);

    link.stall();
    for i in 0..10u32 {
        through
            .publish(format!("stalled.{i}"), i.to_string().into())
            .await
            .expect("publish into the client's buffer");
    }
    assert!(!answers(&through, QUIET).await, "no PONG through a stall");
    assert!(
        tokio::time::timeout(QUIET, received.next()).await.is_err(),
        "nothing gets through a stall"
    );
    assert_eq!(link.connections(), 1, "the connection stays open");

    link.heal();
    for i in 0..10u32 {
        let message = tokio::time::timeout(Duration::from_secs(5), received.next())
            .await
            .expect("stalled messages arrive after the heal")
            .expect("a message");
        assert_eq!(message.subject.as_str(), format!("stalled.{i}"), "in order");
    }
    assert!(answers(&through, Duration::from_secs(5)).await);
    assert_eq!(
        link.accepted(),
        1,
        "the same connection, never re-established"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_way_stall_holds_what_the_client_sends_while_deliveries_flow() {
    let server = NatsServer::start().await.expect("nats-server starts");
    let link = Link::start(server.port()).await.expect("a link starts");
    let through = connect(&link.url()).await;
    let direct = connect(&server.url()).await;
    let _echo = echo(&server.url()).await;
    let mut to_linked = through.subscribe("down").await.expect("subscribe");
    let mut to_direct = direct.subscribe("up").await.expect("subscribe");
    // A round trip on each connection after its subscription: the server has registered
    // both before the stall (a flush only writes, and the link could hold the SUB).
    assert!(answers(&through, Duration::from_secs(5)).await);
    assert!(answers(&direct, Duration::from_secs(5)).await);

    link.stall_one_way(Direction::Forward);
    assert!(link.is_stalled(Direction::Forward) && !link.is_stalled(Direction::Back));
    through.publish("up", "held".into()).await.expect("publish");
    direct
        .publish("down", "delivered".into())
        .await
        .expect("publish");
    direct.flush().await.expect("flush");
    let delivered = tokio::time::timeout(Duration::from_secs(5), to_linked.next())
        .await
        .expect("deliveries flow during a forward stall")
        .expect("a message");
    assert_eq!(delivered.payload.as_ref(), b"delivered");
    assert!(
        tokio::time::timeout(QUIET, to_direct.next()).await.is_err(),
        "what the client sends is held"
    );

    link.heal();
    let held = tokio::time::timeout(Duration::from_secs(5), to_direct.next())
        .await
        .expect("held bytes arrive after the heal")
        .expect("a message");
    assert_eq!(held.payload.as_ref(), b"held");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latency_delays_each_direction() {
    let server = NatsServer::start().await.expect("nats-server starts");
    let link = Link::start(server.port()).await.expect("a link starts");
    let through = connect(&link.url()).await;
    let _echo = echo(&server.url()).await;
    let latency = Duration::from_millis(150);
    link.latency(latency);
    let started = Instant::now();
    assert!(
        answers(&through, Duration::from_secs(5)).await,
        "a round trip"
    );
    assert!(
        started.elapsed() >= latency * 2,
        "a round trip takes the latency twice, took {:?}",
        started.elapsed()
    );
    link.heal();
    assert!(answers(&through, Duration::from_secs(5)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_ends_the_connections_and_the_client_comes_back_through_the_link() {
    let server = NatsServer::start().await.expect("nats-server starts");
    let link = Link::start(server.port()).await.expect("a link starts");
    for cut in [Cut::Reset, Cut::Fin] {
        let (events_tx, mut events) = tokio::sync::mpsc::unbounded_channel();
        let client = async_nats::ConnectOptions::new()
            .ignore_discovered_servers()
            .event_callback(move |event| {
                let events_tx = events_tx.clone();
                async move {
                    let _ = events_tx.send(event);
                }
            })
            .connect(link.url())
            .await
            .expect("connect");
        let _echo = echo(&server.url()).await;
        assert!(answers(&client, Duration::from_secs(5)).await);
        let before = link.accepted();
        link.cut(cut);
        let reconnected = tokio::time::timeout(Duration::from_secs(10), async {
            let mut disconnected = false;
            while let Some(event) = events.recv().await {
                match event {
                    async_nats::Event::Disconnected => disconnected = true,
                    async_nats::Event::Connected if disconnected => return,
                    _ => {}
                }
            }
        })
        .await;
        assert!(
            reconnected.is_ok(),
            "{cut:?}: disconnected, then connected again"
        );
        assert!(link.accepted() > before, "{cut:?}: a new connection");
        assert!(answers(&client, Duration::from_secs(5)).await);
    }
}

/// The route connections the nodes report, and those through the links: equal when no route
/// bypasses them.
async fn route_connections(cluster: &NatsCluster) -> Option<(u64, usize)> {
    let monitor = cluster.monitor();
    let mut reported = 0;
    for i in 0..cluster.len() {
        reported += monitor.node_json(i, "/routez").await?["num_routes"].as_u64()?;
    }
    let mut linked = 0;
    for from in 0..cluster.len() {
        for to in (0..cluster.len()).filter(|&to| to != from) {
            linked += cluster.route_link(from, to).connections();
        }
    }
    // Each route connection is counted by both of its nodes.
    Some((reported / 2, linked))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_linked_cluster_routes_only_through_its_links_and_isolate_partitions_a_node() {
    let cluster = NatsCluster::start_linked()
        .await
        .expect("a linked cluster starts");
    let (reported, linked) = eventually(
        Duration::from_secs(10),
        "every route through a link",
        || async {
            let (reported, linked) = route_connections(&cluster).await?;
            (reported > 0 && reported as usize == linked).then_some((reported, linked))
        },
    )
    .await;
    eprintln!("{reported} route connections, {linked} through links");

    // A client given one node's URL learns no other (`no_advertise`).
    let client = async_nats::connect(cluster.url(0)).await.expect("connect");
    client.flush().await.expect("flush");
    assert!(
        client.server_info().connect_urls.is_empty(),
        "no client URL is advertised: {:?}",
        client.server_info().connect_urls
    );

    let leader = eventually(Duration::from_secs(30), "a meta leader", || {
        cluster.meta_leader()
    })
    .await;
    cluster.isolate(leader);
    let monitor = cluster.monitor();
    let others: Vec<usize> = (0..cluster.len()).filter(|&i| i != leader).collect();
    let new_leader = eventually(
        Duration::from_secs(30),
        "the majority elects a meta leader of its own",
        || async {
            let mut seen = Vec::new();
            for &i in &others {
                let jsz = monitor.node_json(i, "/jsz").await?;
                seen.push(NatsCluster::node_index(
                    jsz["meta_cluster"]["leader"].as_str()?,
                )?);
            }
            (seen.iter().all(|&l| l == seen[0]) && seen[0] != leader).then_some(seen[0])
        },
    )
    .await;
    assert_ne!(new_leader, leader);

    cluster.heal();
    eventually(
        Duration::from_secs(30),
        "all three nodes agree on one meta leader after the heal",
        || async {
            let mut seen = Vec::new();
            for i in 0..cluster.len() {
                let jsz = monitor.node_json(i, "/jsz").await?;
                seen.push(jsz["meta_cluster"]["leader"].as_str()?.to_owned());
            }
            seen.iter().all(|l| *l == seen[0]).then_some(())
        },
    )
    .await;
    eventually(
        Duration::from_secs(10),
        "every route through a link after the heal",
        || async {
            let (reported, linked) = route_connections(&cluster).await?;
            (reported > 0 && reported as usize == linked).then_some(())
        },
    )
    .await;
}
