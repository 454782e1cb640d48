//! More replicas than a queue consumer's wait list (`max_waiting`): the server takes as many
//! pull requests as the wait list holds and drops the others without a word (nats-server
//! 2.15; older servers answer 409 "Exceeded MaxWaiting"), so a replica past it is delivered
//! nothing. Its health says `crowded out`, naming `max_waiting` and what to do, instead of
//! `running`, and it is not ready; what is published is handled by the others. With a wait
//! list large enough, every replica takes work; one the runtime creates without a declared
//! `max_waiting` gets the documented default.

mod fixture;

use std::time::Duration;

use fixture::{Fixture, Running, job_topology, publish_jobs, queue, stream};
use nats_topology::model::QueueDecl;
use nats_topology::{ConsumerState, Runtime};
use nats_topology_testkit::eventually;

const REPLICAS: usize = 4;

/// `REPLICAS` runtimes of one queue group, each on a connection of its own.
async fn fleet(fx: &Fixture, name: &str, group: QueueDecl) -> Vec<Running> {
    let decl = stream(name, &[&format!("{}.>", name.to_lowercase())]);
    let subject = format!("{}.jobs", name.to_lowercase());
    let mut runs = Vec::new();
    for _ in 0..REPLICAS {
        let consumer = queue("tests::on_job", &decl, &subject, group).concurrency(1);
        let topology = job_topology(decl, consumer, fx.ledger.clone(), Duration::from_millis(5));
        let runtime: Runtime = fx
            .builder()
            .await
            .topology(topology)
            .build()
            .expect("valid topology");
        runs.push(Running::spawn(runtime));
    }
    runs
}

fn crowded(run: &Running) -> Option<String> {
    match &run.health.consumers()[0].state {
        ConsumerState::Crowded { cause } => Some(cause.clone()),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_past_the_wait_list_say_so_and_a_larger_one_serves_them_all() {
    let fx = Fixture::start().await;
    let js = fx.jetstream().await;

    // A wait list of two for four replicas that keep one request open each.
    let narrow = fleet(&fx, "NARROW", QueueDecl::new("workers").max_waiting(2)).await;
    let (crowded_out, running) = eventually(
        Duration::from_secs(30),
        "every replica running or crowded out",
        || {
            let crowded_out: Vec<String> = narrow.iter().filter_map(crowded).collect();
            let running = narrow
                .iter()
                .filter(|r| r.health.consumers()[0].state == ConsumerState::Running)
                .count();
            async move {
                (running + crowded_out.len() == REPLICAS && !crowded_out.is_empty())
                    .then_some((crowded_out, running))
            }
        },
    )
    .await;
    println!(
        "max_waiting 2, {REPLICAS} replicas: {running} running, {} crowded out: {}",
        crowded_out.len(),
        crowded_out[0]
    );
    assert!(
        crowded_out[0].contains("max_waiting") && crowded_out[0].contains("migrate_from"),
        "says what is full and what to do: {}",
        crowded_out[0]
    );
    for run in narrow.iter().filter(|r| crowded(r).is_some()) {
        assert!(
            !run.health.ready(),
            "crowded out is not ready: {}",
            run.health
        );
    }
    // What is published is handled by the others: nothing waits for a crowded-out replica.
    publish_jobs(&js, "narrow.jobs", 1..=100).await;
    fx.ledger
        .wait_covers(1..=100, Duration::from_secs(30))
        .await;
    for outcome in Running::stop_all(narrow).await {
        outcome.expect("a clean drain");
    }

    // Room for all: every replica takes work.
    let wide = fleet(&fx, "WIDE", QueueDecl::new("workers").max_waiting(16)).await;
    for run in &wide {
        run.ready(Duration::from_secs(30)).await;
    }
    publish_jobs(&js, "wide.jobs", 1_001..=1_400).await;
    fx.ledger
        .wait_covers(1_001..=1_400, Duration::from_secs(30))
        .await;
    let handled: Vec<u64> = wide
        .iter()
        .map(|r| r.health.consumers()[0].handled)
        .collect();
    println!("max_waiting 16, {REPLICAS} replicas: handled {handled:?}");
    assert!(
        handled.iter().all(|&n| n > 0),
        "every replica took work: {handled:?}"
    );
    for outcome in Running::stop_all(wide).await {
        outcome.expect("a clean drain");
    }

    // Undeclared: the runtime creates the consumer with the documented default.
    let default = fleet(&fx, "DEFAULTED", QueueDecl::new("workers")).await;
    default[0].ready(Duration::from_secs(30)).await;
    let info = js
        .get_stream("DEFAULTED")
        .await
        .expect("the stream")
        .consumer_info("workers")
        .await
        .expect("the consumer");
    assert_eq!(
        info.config.max_waiting,
        nats_topology::model::DEFAULT_MAX_WAITING
    );
    for outcome in Running::stop_all(default).await {
        outcome.expect("a clean drain");
    }
}

/// The server cannot change a consumer's wait list: a declaration that does is refused at
/// start-up, naming the field, both values and the way through (`migrate_from`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_wait_list_on_an_existing_consumer_is_refused_naming_migrate_from() {
    let fx = Fixture::start().await;
    let decl = stream("RESIZE", &["resize.>"]);
    let provision = |max_waiting: i64| {
        let consumer = queue(
            "tests::on_job",
            &decl,
            "resize.jobs",
            QueueDecl::new("workers").max_waiting(max_waiting),
        );
        let topology = job_topology(decl, consumer, fx.ledger.clone(), Duration::ZERO);
        let fx = &fx;
        async move {
            fx.builder()
                .await
                .topology(topology)
                .build()
                .expect("valid topology")
                .provision()
                .await
        }
    };
    provision(8).await.expect("created with a wait list of 8");
    let refused = provision(16)
        .await
        .expect_err("a wait list cannot change in place");
    let message = refused.to_string();
    println!("{message}");
    assert!(
        message.contains("max_waiting") && message.contains("migrate_from"),
        "{message}"
    );
}
