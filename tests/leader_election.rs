//! Provisioning through a JetStream meta-leader election: eight replicas (runtimes with
//! connections of their own) provision one fresh R3 stream and two consumers while the
//! meta leader is killed; every one gets ready. No timing is asserted here: the time to
//! ready after the election is measured by `bench_provisioning --modes leader-kill`.

#![cfg(unix)]

use std::time::Duration;

use nats_topology::model::{ConsumerDecl, QueueDecl, StreamDecl, StreamRef};
use nats_topology::{HandlerError, HandlerFuture, Runtime, Topology};
use nats_topology_testkit::{NatsCluster, eventually};

const REPLICAS: usize = 8;

static STREAM: StreamDecl = StreamDecl::new("LEADER_KILL", &["leader.kill.>"]).replicas(3);

fn topology() -> Topology {
    let noop = |_| -> HandlerFuture { Box::pin(async { Ok::<(), HandlerError>(()) }) };
    Topology::new()
        .stream(STREAM)
        .consumer(
            ConsumerDecl::queue(
                "lk::a",
                StreamRef::Declared(&STREAM),
                QueueDecl::new("lk_a"),
            )
            .subjects(&["leader.kill.a"]),
            noop,
        )
        .consumer(
            ConsumerDecl::queue(
                "lk::b",
                StreamRef::Declared(&STREAM),
                QueueDecl::new("lk_b"),
            )
            .subjects(&["leader.kill.b"]),
            noop,
        )
}

type Provisioning =
    tokio::task::JoinHandle<Result<nats_topology::ProvisionReport, nats_topology::ProvisionError>>;

/// `REPLICAS` runtimes, each with a connection of its own, provisioning `topology()`.
async fn start_provisioning(cluster: &NatsCluster) -> Vec<Provisioning> {
    let mut provisioning = Vec::new();
    for _ in 0..REPLICAS {
        let client = async_nats::connect(cluster.server_addrs())
            .await
            .expect("connect");
        let runtime = Runtime::builder(client)
            .topology(topology())
            .build()
            .expect("a valid topology");
        provisioning.push(tokio::spawn(async move { runtime.provision().await }));
    }
    provisioning
}

/// Panics unless every replica got ready.
async fn all_ready(provisioning: Vec<Provisioning>) {
    for (i, task) in provisioning.into_iter().enumerate() {
        let report = task.await.expect("the provisioning task");
        let report = report.unwrap_or_else(|e| panic!("replica {i} did not get ready: {e}"));
        eprintln!("replica {i}: ready after {} attempts", report.attempts);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_provisioning_while_the_meta_leader_is_killed_all_get_ready() {
    let mut cluster = NatsCluster::start().await.expect("a 3-node cluster");
    let leader = eventually(Duration::from_secs(30), "an agreed meta leader", || {
        cluster.meta_leader()
    })
    .await;

    let provisioning = start_provisioning(&cluster).await;
    cluster.kill(leader);

    // The killed node comes back once the others have elected a new leader.
    let monitor = cluster.monitor();
    eventually(Duration::from_secs(60), "a new meta leader", || {
        let monitor = monitor.clone();
        async move { monitor.meta_leader().await.filter(|&l| l != leader) }
    })
    .await;
    cluster
        .restart(leader)
        .await
        .expect("the killed node restarts");

    all_ready(provisioning).await;
}

/// The node that leads `stream`, as the stream's info names it (`node<i>`).
async fn stream_leader(js: &async_nats::jetstream::Context, stream: &str) -> Option<usize> {
    let mut handle = js.get_stream(stream).await.ok()?;
    let info = handle.info().await.ok()?;
    NatsCluster::node_index(info.cluster.as_ref()?.leader.as_deref()?)
}

/// Beside the meta leader: the stream exists and its leader, on a node that does not lead
/// the meta group, is killed while eight replicas create their consumers. Each create
/// needs the stream's leader; a new one is elected among the survivors and every replica
/// gets ready with both consumers as declared.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_provisioning_while_their_streams_leader_is_killed_all_get_ready() {
    let mut cluster = NatsCluster::start().await.expect("a 3-node cluster");
    let client = async_nats::connect(cluster.server_addrs())
        .await
        .expect("connect");
    let js = async_nats::jetstream::new(client.clone());
    let stream = STREAM.name;
    // The stream first, alone: the replicas below find it and create their consumers.
    Runtime::builder(client.clone())
        .topology(Topology::new().stream(STREAM))
        .build()
        .expect("a valid topology")
        .provision()
        .await
        .expect("the stream is created");

    // A stream leader that is not the meta leader: step the stream down until it is not.
    let victim = eventually(
        Duration::from_secs(60),
        "a stream leader apart from the meta leader",
        || {
            let (cluster, js) = (&cluster, &js);
            async move {
                let meta = cluster.meta_leader().await?;
                let leader = stream_leader(js, stream).await?;
                if leader != meta {
                    return Some(leader);
                }
                let subject = format!("STREAM.LEADER.STEPDOWN.{stream}");
                let _: Result<serde_json::Value, _> = js.request(subject, &()).await;
                None
            }
        },
    )
    .await;

    let provisioning = start_provisioning(&cluster).await;
    cluster.kill(victim);

    eventually(Duration::from_secs(60), "a new stream leader", || {
        let js = &js;
        async move { stream_leader(js, stream).await.filter(|&l| l != victim) }
    })
    .await;
    cluster
        .restart(victim)
        .await
        .expect("the killed node restarts");

    all_ready(provisioning).await;
    let handle = js.get_stream(stream).await.expect("the stream");
    for (name, subject) in [("lk_a", "leader.kill.a"), ("lk_b", "leader.kill.b")] {
        // The restarted node may still be catching up: the server answers 503 (JetStream
        // temporarily unavailable) until the consumer's leader is back; read it once it is.
        let info = eventually(
            Duration::from_secs(30),
            &format!("consumer {name} readable after the restart"),
            || {
                let handle = handle.clone();
                async move { handle.consumer_info(name).await.ok() }
            },
        )
        .await;
        assert_eq!(info.config.filter_subject, subject, "consumer {name}");
    }
}
