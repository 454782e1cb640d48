//! A wrong grant on a long-running replica does not grow health without bound: with the
//! consumer's acks denied, thousands of acks are refused (each on a subject of its own, counted
//! in the server's log), and health keeps one denial per entry of the generated permissions,
//! counting every refusal that reaches the runtime.

mod fixture;

use std::time::Duration;

use fixture::{Running, admin_of, client_of, fast, users_config};
use nats_topology::Runtime;
use nats_topology::export::{self, Role, Verb};
use nats_topology::model::{AckMode, QueueDecl};
use nats_topology_testkit::{NatsServer, eventually};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_denied_acks_are_one_denial_of_one_entry() {
    let decl = fixture::stream("DENY_WORK", &["deny.work.>"]);
    let consumer = fixture::queue(
        "tests::on_job",
        &decl,
        "deny.work.jobs",
        // Room for every message unacknowledged at once: each is handled once, and each ack
        // refused, without waiting for redeliveries.
        // Fire-and-forget acks: one refused publish per message.
        QueueDecl::new("workers")
            .max_ack_pending(5_000)
            .ack(AckMode::FireAndForget),
    );
    let topology = || fixture::job_topology(decl, consumer, Default::default(), Duration::ZERO);
    let role = Role::owner("denied");
    let granted = export::permissions(&topology(), &role);
    let acks = granted
        .entries
        .iter()
        .position(|e| e.action == Verb::Publish && e.subject.starts_with("$JS.ACK."))
        .expect("the generated permissions grant the consumer's acks");
    let entry = granted.entries[acks].subject.clone();
    let without_acks = granted.without(acks);
    let server = NatsServer::builder()
        .config(users_config(&[("denied", "pw", &without_acks)]))
        .probe_user("admin", "admin")
        .start()
        .await
        .expect("server starts");

    let messages = 2_000u64;
    let client = client_of(&server.url(), "denied", "pw", role.inbox_prefix()).await;
    let running = Running::spawn(
        fast(Runtime::builder(client))
            // A short grace: the drain waits it out for acks that a denial keeps from landing.
            .grace_period(Duration::from_secs(2))
            // Every message taken in one pull, before the first refused ack stops the
            // consumer from asking for more: thousands of acks refused.
            .pull_batch(messages as usize)
            .topology(topology())
            .build()
            .expect("a valid topology"),
    );
    let admin = admin_of(&server.url()).await;
    let js = async_nats::jetstream::new(admin);
    eventually(Duration::from_secs(20), "the stream", || {
        let js = js.clone();
        async move { js.get_stream("DENY_WORK").await.ok().map(|_| ()) }
    })
    .await;
    fixture::publish_jobs(&js, "deny.work.jobs", 1..=messages).await;

    let health = running.health.clone();
    // The server refuses (and logs) each ack; not every refusal reaches the runtime (the client
    // hands its events over a bounded channel and drops what overflows it), so the thousands
    // are counted in the server's log.
    let log = server.store_dir().join("server.log");
    let refused_by_server = eventually(
        Duration::from_secs(60),
        "a thousand acks refused by the server",
        || {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let refused = text
                .lines()
                .filter(|l| {
                    l.contains("Publish Violation") && l.contains("$JS.ACK.DENY_WORK.workers.")
                })
                .count();
            async move { (refused >= 1_000).then_some(refused) }
        },
    )
    .await;
    let denials = eventually(Duration::from_secs(10), "the refusals recorded", || {
        let denials = health.denials();
        let recorded = denials
            .iter()
            .any(|d| d.permission.as_deref() == Some(entry.as_str()));
        async move { recorded.then_some(denials) }
    })
    .await;
    println!(
        "refused by the server: {refused_by_server}; denials in health: {}, counting {:?}",
        denials.len(),
        denials.iter().map(|d| d.count).collect::<Vec<_>>()
    );
    let of_acks: Vec<_> = denials
        .iter()
        .filter(|d| d.permission.as_deref() == Some(entry.as_str()))
        .collect();
    assert_eq!(of_acks.len(), 1, "one denial for the entry: {denials:#?}");
    assert!(of_acks[0].subject.starts_with("$JS.ACK.DENY_WORK.workers."));
    assert!(
        denials.len() <= granted.entries.len(),
        "bounded by the entries: {} denials",
        denials.len()
    );
    assert!(!health.ready(), "a denial is not ready: {health}");
    assert!(
        matches!(
            health.consumers()[0].state,
            nats_topology::ConsumerState::Denied { .. }
        ),
        "the consumer whose acks are refused is denied: {health}"
    );
    running.stop().await.expect("a drain ends");
}
