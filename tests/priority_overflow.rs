//! Priority groups on real servers (nats-server 2.11 or newer), beside `tests/priority.rs`
//! (pinned clients in worker processes): a spill-over instance takes work only once the
//! backlog reaches `min_pending`; the priority fields are edited in place; `build` refuses
//! what cannot work.

mod fixture;

use std::collections::BTreeSet;
use std::time::Duration;

use async_nats::jetstream::consumer::PriorityPolicy;
use fixture::{Fixture, Ledger, Running};
use nats_topology::model::{Overflow, QueueDecl};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overflow_spill_over_instance_takes_work_only_past_min_pending() {
    const MIN_PENDING: i64 = 20;
    let fx = Fixture::start().await;
    let stream = fixture::stream("OVERFLOW", &["overflow.>"]);
    let consumer = fixture::queue(
        "tests::bulk",
        &stream,
        "overflow.jobs",
        QueueDecl::new("bulk").overflow(Overflow::new().min_pending(MIN_PENDING)),
    );
    let (primary, spill) = (Ledger::default(), Ledger::default());
    let topology = |ledger: &Ledger| {
        fixture::job_topology(stream, consumer, ledger.clone(), Duration::from_millis(20))
    };
    let primary_run =
        Running::start(fixture::fast(fx.builder().await).topology(topology(&primary))).await;
    let spill_run = Running::start(
        fixture::fast(fx.builder().await)
            .topology(topology(&spill))
            .spill_over("bulk"),
    )
    .await;
    let js = fx.jetstream().await;

    // Below the threshold: the primary alone.
    let below = MIN_PENDING as u64 / 2;
    fixture::publish_jobs(&js, "overflow.jobs", 0..below).await;
    primary.wait_covers(0..below, Duration::from_secs(20)).await;
    assert!(
        spill.ids().is_empty(),
        "below min_pending the spill-over instance takes nothing: {:?}",
        spill.ids()
    );

    // A backlog far past it: the spill-over instance takes a share.
    let total = below + 200;
    fixture::publish_jobs(&js, "overflow.jobs", below..total).await;
    eventually_covered(&[&primary, &spill], total).await;
    assert!(
        !spill.ids().is_empty(),
        "past min_pending the spill-over instance takes work"
    );
    fixture::assert_each_handled_once(&[primary.clone(), spill.clone()], total);
    eprintln!(
        "overflow: primary {} jobs, spill-over {}",
        primary.len(),
        spill.len()
    );

    for outcome in Running::stop_all(vec![primary_run, spill_run]).await {
        outcome.expect("clean drain");
    }
    fixture::settled(&js, "OVERFLOW", "bulk", Duration::from_secs(10)).await;
}

/// Waits until the ledgers together cover `0..total`.
async fn eventually_covered(ledgers: &[&Ledger], total: u64) {
    nats_topology_testkit::eventually(Duration::from_secs(60), "every job handled", || {
        let covered = ledgers
            .iter()
            .flat_map(|l| l.ids())
            .collect::<BTreeSet<_>>()
            .len() as u64
            == total;
        async move { covered.then_some(()) }
    })
    .await;
}

/// The priority fields are editable on the server (2.11 and later): a declaration that adds
/// a pinned client, or removes it, updates the consumer in place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_priority_added_or_removed_updates_the_consumer_in_place() {
    let fx = Fixture::start().await;
    let stream = fixture::stream("EDITED", &["edited.>"]);
    let js = fx.jetstream().await;
    let provision = |queue: QueueDecl| {
        let consumer = fixture::queue("tests::edited", &stream, "edited.jobs", queue);
        let topology = fixture::job_topology(stream, consumer, Ledger::default(), Duration::ZERO);
        async {
            fixture::fast(fx.builder().await)
                .topology(topology)
                .build()
                .expect("valid topology")
                .provision()
                .await
                .expect("provisions")
        }
    };
    let read = || async {
        let info = fixture::consumer_info(&js, "EDITED", "work")
            .await
            .expect("the consumer exists");
        (
            info.config.priority_policy,
            info.config.priority_groups,
            info.config.priority_timeout,
        )
    };
    provision(QueueDecl::new("work")).await;
    let created = fixture::consumer_info(&js, "EDITED", "work")
        .await
        .expect("the consumer exists")
        .created;
    assert_eq!(read().await, (PriorityPolicy::None, vec![], Duration::ZERO));

    provision(QueueDecl::new("work").pinned_client(Duration::from_secs(7))).await;
    assert_eq!(
        read().await,
        (
            PriorityPolicy::PinnedClient,
            vec!["replicas".to_owned()],
            Duration::from_secs(7)
        )
    );
    provision(QueueDecl::new("work")).await;
    assert_eq!(read().await, (PriorityPolicy::None, vec![], Duration::ZERO));
    assert_eq!(
        fixture::consumer_info(&js, "EDITED", "work")
            .await
            .expect("the consumer exists")
            .created,
        created,
        "updated in place, never re-created"
    );
}

/// `build` refuses a spill-over group that is not an overflow consumer, and a hand-built
/// overflow consumer without a threshold (the macros refuse it at compile time).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn build_refuses_a_stray_spill_over_and_an_overflow_without_threshold() {
    let fx = Fixture::start().await;
    let stream = fixture::stream("REFUSED", &["refused.>"]);
    let pinned = fixture::queue(
        "tests::pinned",
        &stream,
        "refused.pinned",
        QueueDecl::new("pinned").pinned_client(Duration::from_secs(5)),
    );
    let topology = fixture::job_topology(stream, pinned, Ledger::default(), Duration::ZERO);
    let Err(error) = fx
        .builder()
        .await
        .topology(topology)
        .spill_over("pinned")
        .build()
    else {
        panic!("a spill-over group that is a pinned client is refused");
    };
    let text = error.to_string();
    assert!(
        text.contains("spill_over") && text.contains("\"pinned\"") && text.contains("overflow"),
        "{text}"
    );

    let bare = fixture::queue(
        "tests::bare",
        &stream,
        "refused.bare",
        QueueDecl::new("bare").overflow(Overflow::new()),
    );
    let topology = fixture::job_topology(stream, bare, Ledger::default(), Duration::ZERO);
    let Err(error) = fx.builder().await.topology(topology).build() else {
        panic!("an overflow consumer without a threshold is refused");
    };
    let text = error.to_string();
    assert!(
        text.contains("tests::bare") && text.contains("min_pending"),
        "{text}"
    );
}
