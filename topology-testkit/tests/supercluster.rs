//! The supercluster of the kit against real servers: a stream placed by tag in the other
//! cluster lives there, a mirror across the gateway follows it, and while the gateway stalls
//! each cluster keeps working inside; healed, the mirror catches up with nothing lost.

use std::time::Duration;

use async_nats::jetstream::{self, stream};
use nats_topology_testkit::{NatsSupercluster, eventually};

async fn create(js: &jetstream::Context, config: stream::Config) -> stream::Stream {
    let name = config.name.clone();
    eventually(Duration::from_secs(30), &format!("stream {name}"), || {
        let (js, config) = (js.clone(), config.clone());
        async move { js.create_stream(config).await.ok() }
    })
    .await
}

async fn messages(js: &jetstream::Context, name: &str) -> Option<u64> {
    let mut stream = js.get_stream(name).await.ok()?;
    Some(stream.info().await.ok()?.state.messages)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn placement_by_tag_and_a_mirror_across_a_stalled_gateway() {
    let sc = NatsSupercluster::start(&[3, 1])
        .await
        .expect("supercluster");
    assert_eq!(sc.clusters(), ["A", "B"]);
    assert_eq!((sc.nodes_of(0), sc.nodes_of(1)), (vec![0, 1, 2], vec![3]));
    let in_a = jetstream::new(async_nats::connect(sc.server_addrs(0)).await.expect("A"));
    let in_b = jetstream::new(async_nats::connect(sc.server_addrs(1)).await.expect("B"));

    // Created from cluster A, placed by the tag of cluster B.
    let mut origin = create(
        &in_a,
        stream::Config {
            name: "ORIGIN".into(),
            subjects: vec!["origin.>".into()],
            placement: Some(stream::Placement {
                cluster: None,
                tags: vec!["cluster:b".into()],
            }),
            ..Default::default()
        },
    )
    .await;
    let info = origin.info().await.expect("info");
    let cluster = info.cluster.as_ref().expect("cluster info");
    assert_eq!(cluster.name.as_deref(), Some("B"));
    assert_eq!(cluster.leader.as_deref(), Some("node3"));

    // An R3 mirror in cluster A.
    create(
        &in_a,
        stream::Config {
            name: "MIRROR".into(),
            num_replicas: 3,
            mirror: Some(stream::Source {
                name: "ORIGIN".into(),
                ..Default::default()
            }),
            placement: Some(stream::Placement {
                cluster: Some("A".into()),
                tags: vec![],
            }),
            ..Default::default()
        },
    )
    .await;
    for i in 0..50 {
        in_b.publish(format!("origin.{i}"), "x".into())
            .await
            .expect("publish")
            .await
            .expect("stored in B");
    }
    eventually(Duration::from_secs(20), "the mirror to follow", || {
        let in_a = in_a.clone();
        async move { (messages(&in_a, "MIRROR").await == Some(50)).then_some(()) }
    })
    .await;

    // The gateway stalls: B still stores what its clients publish, A cannot follow.
    sc.stall_gateways();
    for i in 50..100 {
        in_b.publish(format!("origin.{i}"), "x".into())
            .await
            .expect("publish")
            .await
            .expect("stored in B while the gateway stalls");
    }
    assert_eq!(messages(&in_b, "ORIGIN").await, Some(100));
    assert_eq!(
        messages(&in_a, "MIRROR").await,
        Some(50),
        "nothing crosses a stalled gateway"
    );
    sc.heal();
    eventually(Duration::from_secs(60), "the mirror to catch up", || {
        let in_a = in_a.clone();
        async move { (messages(&in_a, "MIRROR").await == Some(100)).then_some(()) }
    })
    .await;
}
