//! Per-message stream features on a real server (2.11+ and 2.12+; the pinned 2.15.1): a
//! message published by a handler with its own time to live is gone once it runs out while
//! its neighbour stays; a scheduled message is published to its target at its time, never
//! before; a stream that lacked the TTL is turned to allow it in place, as `plan` said.

mod fixture;

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use fixture::Fixture;
use nats_topology::model::QueueDecl;
use nats_topology::{HandlerError, Topology};
use nats_topology_testkit::eventually;

/// A topology of `stream` whose consumer on `<prefix>.in` runs `publish` once per message.
fn publishing<F, Fut>(
    stream: nats_topology::model::StreamDecl,
    prefix: &str,
    publish: F,
) -> Topology
where
    F: Fn(nats_topology::Context) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<(), HandlerError>> + Send + 'static,
{
    let consumer = fixture::queue(
        &format!("tests::{prefix}"),
        &stream,
        &format!("{prefix}.in"),
        QueueDecl::new(fixture::leak(format!("{prefix}_worker"))),
    );
    let publish = Arc::new(publish);
    Topology::new()
        .stream(stream)
        .consumer(consumer, move |incoming| {
            let publish = publish.clone();
            Box::pin(async move { publish(incoming.context().clone()).await })
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_with_a_ttl_is_gone_after_it_and_its_neighbour_stays() {
    let fx = Fixture::start().await;
    let js = fx.jetstream().await;
    let stream = fixture::stream("TTLS", &["ttls.>"]).allow_msg_ttl();
    let running = fx
        .run(publishing(stream, "ttls", |cx| async move {
            cx.publisher("ttls.short")
                .ttl(Duration::from_millis(800))
                .bytes("gone soon".into())
                .await?;
            cx.publisher("ttls.kept").bytes("kept".into()).await?;
            Ok(())
        }))
        .await;
    js.publish("ttls.in", "go".into())
        .await
        .unwrap()
        .await
        .unwrap();

    let info = js
        .get_stream("TTLS")
        .await
        .unwrap()
        .cached_info()
        .config
        .clone();
    assert!(info.allow_message_ttl, "the stream allows per-message TTL");
    let stored = eventually(
        Duration::from_secs(10),
        "the short-lived message stored",
        || {
            let js = js.clone();
            async move {
                let stream = js.get_stream("TTLS").await.ok()?;
                stream
                    .get_last_raw_message_by_subject("ttls.short")
                    .await
                    .ok()
            }
        },
    )
    .await;
    let ttl = stored.headers.get("Nats-TTL").map(|v| v.to_string());
    assert_eq!(ttl.as_deref(), Some("1s"), "rounded up to whole seconds");
    eventually(
        Duration::from_secs(15),
        "the short-lived message removed",
        || {
            let js = js.clone();
            async move {
                let stream = js.get_stream("TTLS").await.ok()?;
                let gone = stream
                    .get_last_raw_message_by_subject("ttls.short")
                    .await
                    .is_err();
                gone.then_some(())
            }
        },
    )
    .await;
    let stream = js.get_stream("TTLS").await.unwrap();
    let kept = stream.get_last_raw_message_by_subject("ttls.kept").await;
    assert!(kept.is_ok(), "the message without a TTL stays: {kept:?}");
    running.stop().await.expect("a clean drain");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduled_message_reaches_its_target_at_its_time_not_before() {
    let fx = Fixture::start().await;
    let js = fx.jetstream().await;
    let stream = fixture::stream("SCHED", &["sched.>"]).allow_msg_schedules();
    let at: Arc<Mutex<Option<SystemTime>>> = Arc::default();
    let scheduled = at.clone();
    let running = fx
        .run(publishing(stream, "sched", move |cx| {
            let scheduled = scheduled.clone();
            async move {
                let when = SystemTime::now() + Duration::from_secs(2);
                *scheduled.lock().unwrap() = Some(when);
                cx.publisher("sched.schedule.1")
                    .schedule_at(when, "sched.due.1")
                    .bytes("reminder".into())
                    .await?;
                Ok(())
            }
        }))
        .await;
    js.publish("sched.in", "go".into())
        .await
        .unwrap()
        .await
        .unwrap();

    let due = eventually(
        Duration::from_secs(20),
        "the scheduled message published",
        || {
            let js = js.clone();
            async move {
                let stream = js.get_stream("SCHED").await.ok()?;
                stream
                    .get_last_raw_message_by_subject("sched.due.1")
                    .await
                    .ok()
            }
        },
    )
    .await;
    let when = at.lock().unwrap().expect("the handler scheduled it");
    // `@at` is in whole seconds: the message is due at the second `when` falls in.
    let due_from = when
        - Duration::from_nanos(u64::from(
            when.duration_since(SystemTime::UNIX_EPOCH)
                .unwrap()
                .subsec_nanos(),
        ));
    let published: SystemTime = due.time.into();
    assert!(
        published >= due_from,
        "published at {published:?}, scheduled for {due_from:?}"
    );
    assert_eq!(&due.payload[..], b"reminder");
    running.stop().await.expect("a clean drain");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_without_ttl_is_turned_to_allow_it_in_place_as_plan_said() {
    let fx = Fixture::start().await;
    let js = fx.jetstream().await;
    js.create_stream(async_nats::jetstream::stream::Config {
        name: "LATER_TTL".into(),
        subjects: vec!["later.>".into()],
        ..Default::default()
    })
    .await
    .unwrap();
    js.publish("later.one", "kept".into())
        .await
        .unwrap()
        .await
        .unwrap();
    let topology =
        Topology::new().stream(fixture::stream("LATER_TTL", &["later.>"]).allow_msg_ttl());
    let runtime = fx.builder().await.topology(topology).build().unwrap();
    let plan = runtime.plan().await.unwrap().to_string();
    assert!(plan.contains("allow_msg_ttl"), "{plan}");
    runtime.provision().await.unwrap();
    let stream = js.get_stream("LATER_TTL").await.unwrap();
    let config = stream.cached_info().config.clone();
    assert!(config.allow_message_ttl, "turned on in place");
    assert_eq!(stream.cached_info().state.messages, 1, "nothing lost");
}
