//! `migrate_from` during a rolling deploy, beside a running old fleet (docs/DEPLOYS.md): two
//! old-version runtimes consume group `v1`, two new-version runtimes start with group `v2`,
//! `migrate_from = "v1"`, then the old ones drain one by one while publishing continues.
//! Every id is handled exactly once across all four, none lost, on limits, interest and
//! work-queue streams; the old consumer is gone at the end. And a new instance killed in the
//! middle of a migration (after the pause) is finished by the next one.

mod fixture;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_nats::jetstream;
use fixture::{Broker, Fixture, Running, fast, job_topology, publish_jobs, queue, stream};
use nats_topology::model::{Delivery, QueueDecl, Retention, StreamDecl};
use nats_topology::{Runtime, Topology};
use nats_topology_testkit::{NatsCluster, NatsServer, eventually};

/// Handler work per message: long enough that the old fleet holds messages when it is paused.
const WORK: Duration = Duration::from_millis(5);

/// Runs `runtime` and waits until it is ready.
async fn start(runtime: Runtime) -> Running {
    let running = Running::spawn(runtime);
    running.ready(Duration::from_secs(30)).await;
    running
}

struct Deploy<B = NatsServer> {
    fx: Fixture<B>,
    js: jetstream::Context,
    decl: StreamDecl,
    subject: String,
    /// Handler work of the old fleet.
    old_work: Duration,
    /// Push consumers (a deliver group) rather than pull.
    push: bool,
}

impl Deploy {
    async fn start(name: &str, retention: Retention) -> Deploy {
        Deploy::on(Fixture::start().await, name, retention, 1).await
    }
}

impl Deploy<NatsCluster> {
    /// On a three-node cluster, the stream replicated three times.
    async fn on_cluster(name: &str, retention: Retention) -> Deploy<NatsCluster> {
        Deploy::on(Fixture::cluster().await, name, retention, 3).await
    }
}

impl<B: Broker> Deploy<B> {
    async fn on(fx: Fixture<B>, name: &str, retention: Retention, replicas: u8) -> Deploy<B> {
        let js = fx.jetstream().await;
        let prefix = name.to_lowercase();
        let decl = stream(name, &[&format!("{prefix}.>")])
            .retention(retention)
            .replicas(replicas);
        Deploy {
            fx,
            js,
            decl,
            subject: format!("{prefix}.work"),
            old_work: WORK,
            push: false,
        }
    }

    /// The old declaration (`v1`, version 1.0.0) or the new one (`v2` migrating from `v1`,
    /// version 2.0.0).
    fn topology(&self, new: bool) -> Topology {
        let group = if new {
            QueueDecl::new("v2").migrate_from("v1")
        } else {
            QueueDecl::new("v1")
        };
        let group = if self.push {
            group.delivery(Delivery::Push)
        } else {
            group
        };
        let consumer = queue("tests::on_job", &self.decl, &self.subject, group).concurrency(4);
        let work = if new { WORK } else { self.old_work };
        job_topology(self.decl, consumer, self.fx.ledger.clone(), work)
    }

    async fn runtime(&self, new: bool) -> Runtime {
        fast(self.fx.builder().await)
            .topology(self.topology(new))
            .version(if new { "2.0.0" } else { "1.0.0" })
            .build()
            .expect("valid topology")
    }

    /// Publishes ids from 0 on, one every 2 ms, until `stop`; the count published.
    fn publish_until(&self, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<u64> {
        let (js, subject) = (self.js.clone(), self.subject.clone());
        tokio::spawn(async move {
            let mut next = 0;
            while !stop.load(Ordering::Relaxed) {
                publish_jobs(&js, &subject, [next]).await;
                next += 1;
                // The publishing rate, not synchronisation.
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            next
        })
    }

    async fn consumer_gone(&self, name: &str) {
        let (js, stream, name) = (self.js.clone(), self.decl.name, name.to_owned());
        eventually(Duration::from_secs(30), "the old consumer deleted", || {
            let (js, name) = (js.clone(), name.clone());
            async move {
                let stream = js.get_stream(stream).await.ok()?;
                stream.consumer_info(&name).await.is_err().then_some(())
            }
        })
        .await;
    }

    /// Every published id handled exactly once (waiting for the last ones), none lost.
    async fn all_handled_once(&self, published: u64) {
        self.fx
            .ledger
            .wait_covers(0..published, Duration::from_secs(30))
            .await;
        self.fx.ledger.assert_handled_once(published as usize);
    }

    /// The ending of a migration under load: every published id handled once, the old
    /// consumer retired (nobody pulls from it any more: a new instance deletes it), the new
    /// instances drained, and still every id handled once.
    async fn migrated(&self, published: u64, new: Vec<Running>) {
        self.all_handled_once(published).await;
        self.consumer_gone("v1").await;
        for outcome in Running::stop_all(new).await {
            outcome.expect("the new instances drain");
        }
        self.fx.ledger.assert_handled_once(published as usize);
    }
}

/// What `inspect` shows, read with the new declaration.
async fn new_a_inspect<B: Broker>(deploy: &Deploy<B>) -> nats_topology::report::Inspection {
    deploy.runtime(true).await.inspect().await.expect("inspect")
}

async fn rolling_migration_under_load(name: &str, retention: Retention) {
    rolling(Deploy::start(name, retention).await, retention).await;
}

async fn rolling<B: Broker>(deploy: Deploy<B>, retention: Retention) {
    let old_a = start(deploy.runtime(false).await).await;
    let old_b = start(deploy.runtime(false).await).await;
    let stop = Arc::new(AtomicBool::new(false));
    let publisher = deploy.publish_until(stop.clone());
    // The old fleet is busy before the new version arrives.
    deploy
        .fx
        .ledger
        .wait_len(100, Duration::from_secs(20), "the old fleet handling jobs")
        .await;
    let handled_by_old = deploy.fx.ledger.len();

    let (new_a, new_b) = tokio::join!(deploy.runtime(true), deploy.runtime(true));
    let (new_a, new_b) = tokio::join!(start(new_a), start(new_b));
    // The new fleet handles jobs published after the migration.
    let target = deploy.fx.ledger.len() + 100;
    deploy
        .fx
        .ledger
        .wait_len(
            target,
            Duration::from_secs(20),
            "the new fleet handling jobs",
        )
        .await;
    assert!(handled_by_old > 0);
    // The old fleet still pulls: the old consumer stays, paused (old instances receive
    // nothing and never see it lost), and inspect shows its removal scheduled. On a
    // work-queue stream it was deleted before the new one was created.
    let inspection = new_a_inspect(&deploy).await;
    let report = &inspection.consumers[0];
    if retention == Retention::WorkQueue {
        assert!(report.migrating_from.is_none(), "{inspection}");
    } else {
        let (old, server) = report.migrating_from.as_ref().expect("v1 still there");
        assert_eq!(old, "v1");
        assert!(server.paused, "{inspection}");
        assert!(
            inspection.to_string().contains("removal scheduled"),
            "{inspection}"
        );
    }

    // The old fleet drains one by one while publishing goes on.
    old_a.stop().await.expect("the first old instance drains");
    let target = deploy.fx.ledger.len() + 50;
    deploy
        .fx
        .ledger
        .wait_len(target, Duration::from_secs(20), "jobs handled meanwhile")
        .await;
    old_b.stop().await.expect("the second old instance drains");
    let target = deploy.fx.ledger.len() + 50;
    deploy
        .fx
        .ledger
        .wait_len(target, Duration::from_secs(20), "jobs handled meanwhile")
        .await;

    stop.store(true, Ordering::Relaxed);
    let published = publisher.await.expect("the publisher runs");
    deploy.migrated(published, vec![new_a, new_b]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_migration_under_load_on_a_limits_stream() {
    rolling_migration_under_load("ROLL_LIMITS", Retention::Limits).await;
}

/// On a cluster the pause API answers before the consumer applies it: the new instances read
/// the consumer until it reports paused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_migration_under_load_on_a_replicated_limits_stream_in_a_cluster() {
    let deploy = Deploy::on_cluster("ROLL_R3", Retention::Limits).await;
    rolling(deploy, Retention::Limits).await;
}

/// Push consumers (a deliver group): an old instance's bound subscription keeps the paused
/// consumer, as a waiting pull does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_migration_under_load_of_push_consumers_on_an_interest_stream() {
    let mut deploy = Deploy::start("ROLL_PUSH", Retention::Interest).await;
    deploy.push = true;
    rolling(deploy, Retention::Interest).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_migration_under_load_on_an_interest_stream() {
    rolling_migration_under_load("ROLL_INTEREST", Retention::Interest).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_migration_under_load_on_a_workqueue_stream() {
    rolling_migration_under_load("ROLL_WQ", Retention::WorkQueue).await;
}

/// A new instance killed right after it paused the old consumer (before it could create the
/// new one) leaves the old consumer paused and no new consumer: the next new instance
/// finishes the migration, and nothing is lost or handled twice.
async fn killed_mid_migration(name: &str, retention: Retention) {
    let mut deploy = Deploy::start(name, retention).await;
    // The old fleet's handlers take a while, so that the drain after the pause lasts long
    // enough for the kill to land before the new consumer is created.
    deploy.old_work = Duration::from_millis(300);
    let old_a = start(deploy.runtime(false).await).await;
    let old_b = start(deploy.runtime(false).await).await;
    let stop = Arc::new(AtomicBool::new(false));
    let publisher = deploy.publish_until(stop.clone());
    deploy
        .fx
        .ledger
        .wait_len(20, Duration::from_secs(20), "the old fleet handling jobs")
        .await;

    // The first new instance, killed (its run dropped mid-provisioning) once it paused `v1`.
    let doomed = deploy.runtime(true).await;
    let killed = tokio::spawn(doomed.run_until(std::future::pending::<()>()));
    let (js, stream_name) = (deploy.js.clone(), deploy.decl.name);
    eventually(Duration::from_secs(20), "the old consumer paused", || {
        let js = js.clone();
        async move {
            let info = js
                .get_stream(stream_name)
                .await
                .ok()?
                .consumer_info("v1")
                .await
                .ok()?;
            info.paused.then_some(())
        }
    })
    .await;
    killed.abort();
    let _ = killed.await;
    let paused_at = deploy.fx.ledger.len();

    let stream = deploy.js.get_stream(deploy.decl.name).await.unwrap();
    let v1 = stream.clone().consumer_info("v1").await.expect("v1 exists");
    assert!(
        v1.paused,
        "the killed instance left the old consumer paused"
    );
    assert!(
        stream.clone().consumer_info("v2").await.is_err(),
        "killed before it created the new consumer"
    );

    // The next new instance resumes the migration.
    let next = start(deploy.runtime(true).await).await;
    let target = paused_at + 100;
    deploy
        .fx
        .ledger
        .wait_len(
            target,
            Duration::from_secs(30),
            "the new instance handling jobs",
        )
        .await;
    for old in [old_a, old_b] {
        old.stop().await.expect("the old instances drain");
    }
    stop.store(true, Ordering::Relaxed);
    let published = publisher.await.expect("the publisher runs");
    deploy.migrated(published, vec![next]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_instance_killed_mid_migration_is_finished_by_the_next_on_a_limits_stream() {
    killed_mid_migration("KILLED_LIMITS", Retention::Limits).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_instance_killed_mid_migration_is_finished_by_the_next_on_a_workqueue_stream() {
    killed_mid_migration("KILLED_WQ", Retention::WorkQueue).await;
}

/// Right beside the rolling deploy: an old instance (running this library) that loses the old
/// consumer after the migration, as one cut off from the server longer than the retirement
/// wait would, does not create it again (which would hand it every message after its last
/// floor a second time): it stays unready, naming the consumer that migrated from it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_instance_does_not_resurrect_the_consumer_migrated_from() {
    let deploy = Deploy::start("RESURRECT", Retention::Limits).await;
    let old = start(deploy.runtime(false).await).await;
    publish_jobs(&deploy.js, &deploy.subject, 0..50).await;
    deploy
        .fx
        .ledger
        .wait_covers(0..50, Duration::from_secs(20))
        .await;
    let new = start(deploy.runtime(true).await).await;
    fixture::delete_consumer(&deploy.js, deploy.decl.name, "v1").await;

    let health = old.health.clone();
    let refusal = eventually(
        Duration::from_secs(20),
        "the old instance refusing to re-create v1",
        || {
            let status = health.consumers().remove(0);
            async move {
                match status.state {
                    nats_topology::ConsumerState::Retrying { error, .. }
                        if error.contains("migrated from this one") =>
                    {
                        Some(error)
                    }
                    _ => None,
                }
            }
        },
    )
    .await;
    assert!(
        refusal.contains("`v2`") && refusal.contains("2.0.0"),
        "{refusal}"
    );
    assert!(!old.health.ready(), "the old instance is not ready");
    let stream = deploy.js.get_stream(deploy.decl.name).await.unwrap();
    assert!(
        stream.consumer_info("v1").await.is_err(),
        "v1 was not re-created"
    );

    publish_jobs(&deploy.js, &deploy.subject, 50..100).await;
    deploy
        .fx
        .ledger
        .wait_covers(0..100, Duration::from_secs(20))
        .await;
    for outcome in Running::stop_all(vec![old, new]).await {
        outcome.expect("both drain");
    }
    deploy.fx.ledger.assert_handled_once(100);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_instance_killed_mid_migration_is_finished_by_the_next_on_an_interest_stream() {
    killed_mid_migration("KILLED_INTEREST", Retention::Interest).await;
}

/// The old fleet beside a paused consumer, for longer than the missed-heartbeat window (3 s
/// at the test's 500 ms heartbeat) and several pull expiries: old instances stay `running`
/// (they never see the consumer lost, so they never re-create it), and the paused consumer
/// is not deleted while they pull from it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_instances_stay_running_beside_the_paused_consumer_and_keep_it() {
    stay_running_beside_the_paused_consumer("PAUSED_KEPT", false).await;
}

/// The same with push consumers: a bound subscription, not a waiting pull, keeps it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_push_instances_stay_running_beside_the_paused_consumer_and_keep_it() {
    stay_running_beside_the_paused_consumer("PAUSED_KEPT_PUSH", true).await;
}

async fn stay_running_beside_the_paused_consumer(name: &str, push: bool) {
    let mut deploy = Deploy::start(name, Retention::Interest).await;
    deploy.push = push;
    let old = start(deploy.runtime(false).await).await;
    let stop = Arc::new(AtomicBool::new(false));
    let publisher = deploy.publish_until(stop.clone());
    deploy
        .fx
        .ledger
        .wait_len(50, Duration::from_secs(20), "the old fleet handling jobs")
        .await;
    let new = start(deploy.runtime(true).await).await;

    // Every state the old instance goes through from now on.
    let health = old.health.clone();
    let states = Arc::new(std::sync::Mutex::new(Vec::new()));
    let watcher = {
        let states = states.clone();
        tokio::spawn(async move {
            loop {
                let changed = health.changed();
                states
                    .lock()
                    .unwrap()
                    .push(health.consumers().remove(0).state);
                changed.await;
            }
        })
    };
    // 2500 more jobs, each published at least 2 ms after the previous one: over 5 s.
    let target = deploy.fx.ledger.len() + 2500;
    deploy
        .fx
        .ledger
        .wait_len(
            target,
            Duration::from_secs(60),
            "the new fleet handling jobs",
        )
        .await;
    watcher.abort();
    let states = states.lock().unwrap().clone();
    assert!(
        states
            .iter()
            .all(|s| *s == nats_topology::ConsumerState::Running),
        "the old instance left `running`: {states:?}"
    );
    let v1 = deploy
        .js
        .get_stream(deploy.decl.name)
        .await
        .unwrap()
        .consumer_info("v1")
        .await
        .expect("the paused consumer is kept while an old instance pulls from it");
    assert!(v1.paused);

    old.stop().await.expect("the old instance drains");
    deploy.consumer_gone("v1").await;
    stop.store(true, Ordering::Relaxed);
    let published = publisher.await.expect("the publisher runs");
    deploy.all_handled_once(published).await;
    new.stop().await.expect("the new instance drains");
}
