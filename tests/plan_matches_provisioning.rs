//! `plan` says what provisioning then does, for every case: missing, the same, editable
//! drift, immutable drift (stream and consumer), a plain durable where a queue consumer is
//! declared, an older, a newer, an unordered and a missing version stamp, extra subjects on
//! the server, a migration with and without the old consumer, a consumer a newer declaration
//! migrated away from, a relay, external streams (covering and not), and a bind-only
//! runtime's verification (missing, drifted). Each case reads the plan, provisions, and
//! compares what changed on the server (and what failed, and what health says) with the
//! plan's action. A refusal (a feature the server lacks) is planned as one, with the message
//! provisioning fails with: tests/versions.rs, on a server that lacks it.

mod fixture;

use std::time::Duration;

use async_nats::jetstream::{self, consumer, stream};
use fixture::{Fixture, job_topology, leak, queue, stream};
use nats_topology::model::{QueueDecl, StreamDecl, StreamRef};
use nats_topology::report::{Action, Plan, PlanItem};
use nats_topology::{ProvisionErrorKind, RetryPolicy, Runtime, Topology};
use serde_json::Value;

const KEY: &str = "nats-topology.version";

/// Quick retries and a short deadline: an external stream that never becomes ready fails
/// within it.
fn quick() -> RetryPolicy {
    RetryPolicy {
        base: Duration::from_millis(20),
        cap: Duration::from_millis(200),
        deadline: Duration::from_secs(2),
        request_timeout: Duration::from_secs(5),
    }
}

/// A stream keeping messages `max_age` seconds, consumed by the queue consumer `workers`
/// delivering `max_deliver` times.
fn topology(fx: &Fixture, name: &str, max_age: u64, max_deliver: i64) -> (StreamDecl, Topology) {
    let decl = stream(name, &[&format!("{}.>", name.to_lowercase())])
        .max_age(Duration::from_secs(max_age));
    let subject = format!("{}.work", name.to_lowercase());
    let consumer = queue(
        "tests::on_job",
        &decl,
        &subject,
        QueueDecl::new("workers").max_deliver(max_deliver),
    );
    let topology = job_topology(decl, consumer, fx.ledger.clone(), Duration::ZERO);
    (decl, topology)
}

fn runtime(client: async_nats::Client, topology: Topology, version: &str) -> Runtime {
    Runtime::builder(client)
        .topology(topology)
        .retry(quick())
        .version(version)
        .build()
        .expect("a valid topology")
}

/// A stream's or a consumer's configuration on the server, as JSON; `None` when absent.
async fn on_server(js: &jetstream::Context, item: &PlanItem) -> Option<Value> {
    let mut stream = js.get_stream(&item.stream).await.ok()?;
    let config = match &item.consumer {
        None => serde_json::to_value(&stream.info().await.ok()?.config),
        Some(name) => serde_json::to_value(&stream.consumer_info(name).await.ok()?.config),
    };
    Some(config.expect("a configuration serializes"))
}

/// `decl`'s stream (an hour's `max_age`, as `topology` declares it) made by hand, unstamped,
/// as an earlier deploy or an operator would have left it.
async fn create_by_hand(js: &jetstream::Context, decl: &StreamDecl) {
    js.create_stream(stream::Config {
        name: decl.name.to_owned(),
        subjects: decl.subjects.iter().map(|s| (*s).to_owned()).collect(),
        max_age: Duration::from_secs(3600),
        ..Default::default()
    })
    .await
    .unwrap();
}

/// A stream's configuration on the server.
async fn stream_config(js: &jetstream::Context, name: &str) -> stream::Config {
    js.get_stream(name)
        .await
        .expect("the stream exists")
        .info()
        .await
        .expect("its info")
        .config
        .clone()
}

/// The value of a field as `plan` names it (`metadata.nats-topology.version` included).
fn field<'a>(config: &'a Value, name: &str) -> &'a Value {
    match name.split_once('.') {
        Some(("metadata", key)) => &config["metadata"][key],
        _ => &config[name],
    }
}

/// Plans, provisions, and asserts that each item's plan is what provisioning did; returns
/// the plan.
async fn plan_then_provision(fx: &Fixture, runtime: Runtime) -> Plan {
    let js = fx.jetstream().await;
    let plan = runtime.plan().await.expect("a plan");
    let items: Vec<PlanItem> = plan
        .items
        .iter()
        .filter(|i| i.action != Action::PerInstance)
        .cloned()
        .collect();
    let mut before = Vec::new();
    for item in &items {
        before.push(on_server(&js, item).await);
    }
    let provisioned = runtime.provision().await;
    let older = runtime.health().older_declarations();
    let replanned = match &provisioned {
        Ok(_) => Some(runtime.plan().await.expect("a plan after provisioning")),
        Err(_) => None,
    };
    for (item, before) in items.iter().zip(before) {
        let after = on_server(&js, item).await;
        let what = format!("{plan}for {item:?}, provisioning gave {provisioned:?}");
        let is_older = |o: &&nats_topology::OlderDeclaration| {
            o.stream == item.stream && o.consumer == item.consumer
        };
        // Provisioning stops at its first failure (streams are ensured before consumers):
        // what comes after it is not done.
        if let Err(e) = &provisioned
            && (e.stream(), e.consumer_name()) != (item.stream.as_str(), item.consumer.as_deref())
            && (item.consumer.is_some() || e.consumer_name().is_none())
        {
            assert_eq!(before, after, "not reached: {what}");
            continue;
        }
        match &item.action {
            Action::Create => {
                assert!(before.is_none() && after.is_some(), "created: {what}");
            }
            Action::Nothing | Action::Verify(Ok(())) => {
                assert_eq!(before, after, "unchanged: {what}");
                assert!(!older.iter().any(|o| is_older(&o)), "{what}");
            }
            Action::Update(fields) => {
                let (before, after) = (before.expect("exists"), after.expect("exists"));
                for f in fields {
                    assert_ne!(
                        field(&before, f.field),
                        field(&after, f.field),
                        "`{}` updated: {what}",
                        f.field
                    );
                }
                assert!(!older.iter().any(|o| is_older(&o)), "{what}");
            }
            Action::Conflict(fields) => {
                let error = provisioned.as_ref().expect_err("a conflict fails");
                assert_eq!(error.kind(), ProvisionErrorKind::Conflict, "{what}");
                assert_eq!(error.stream(), item.stream, "{what}");
                assert_eq!(error.consumer_name(), item.consumer.as_deref(), "{what}");
                assert_eq!(error.field_diffs(), &fields[..], "{what}");
                assert_eq!(before, after, "unchanged: {what}");
            }
            Action::OlderVersion {
                declared, server, ..
            } => {
                assert_eq!(before, after, "left as the newer version set it: {what}");
                let found = older.iter().find(is_older);
                assert!(
                    found.is_some_and(|o| &o.declared == declared && &o.server == server),
                    "health names the older declaration: {older:?}; {what}"
                );
            }
            Action::Migrate { from } => {
                assert!(before.is_none() && after.is_some(), "created: {what}");
                let old = PlanItem {
                    consumer: Some(from.clone()),
                    ..item.clone()
                };
                let old = on_server(&js, &old).await.expect("the old one is kept");
                let info = js
                    .get_stream(&item.stream)
                    .await
                    .unwrap()
                    .consumer_info(from)
                    .await
                    .unwrap();
                assert!(info.paused, "the old consumer is paused: {old}; {what}");
            }
            Action::Bound(Ok(_)) => {
                assert_eq!(before, after, "used as it is, never changed here: {what}");
            }
            Action::Verify(Err(_)) | Action::Bound(Err(_)) => {
                let error = provisioned.as_ref().expect_err("not ready fails");
                assert_eq!(error.kind(), ProvisionErrorKind::ExternalNotReady, "{what}");
                assert_eq!(before, after, "{what}");
            }
            Action::Refused(why) => {
                let error = provisioned.as_ref().expect_err("a refusal fails");
                assert_eq!(error.kind(), ProvisionErrorKind::Unsupported, "{what}");
                assert_eq!(&error.to_string(), why, "the same message: {what}");
                assert_eq!(before, after, "{what}");
            }
            Action::PerInstance => unreachable!("filtered out"),
            Action::Retire { .. } => unreachable!("no partitioned group migrates here"),
        }
        // What provisioning applied, a plan afterwards finds done.
        if let (Some(replanned), Action::Create | Action::Update(_) | Action::Migrate { .. }) =
            (&replanned, &item.action)
        {
            let now = replanned
                .items
                .iter()
                .find(|i| i.stream == item.stream && i.consumer == item.consumer)
                .expect("the same item");
            assert_eq!(now.action, Action::Nothing, "{replanned}; {what}");
        }
    }
    plan
}

/// The action kinds of a plan, by item (stream first).
fn kinds(plan: &Plan) -> Vec<String> {
    plan.items
        .iter()
        .map(|i| {
            let kind = format!("{:?}", i.action);
            let end = kind.find(['(', ' ', '{']).unwrap_or(kind.len());
            let fields = match &i.action {
                Action::Update(f)
                | Action::Conflict(f)
                | Action::OlderVersion { fields: f, .. }
                | Action::Bound(Ok(f)) => {
                    let names: Vec<&str> = f.iter().map(|d| d.field).collect();
                    format!(" {}", names.join(","))
                }
                _ => String::new(),
            };
            format!("{}{fields}", &kind[..end]).trim_end().to_owned()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_says_what_provisioning_does_with_versions_and_editable_drift() {
    let fx = Fixture::start().await;
    let js = fx.jetstream().await;
    let fx = &fx;
    let (decl, _) = topology(fx, "PLAN_V", 3600, 3);
    let run = |version: &str, max_age: u64, max_deliver: i64| {
        let (_, t) = topology(fx, "PLAN_V", max_age, max_deliver);
        let version = version.to_owned();
        async move { runtime(fx.connect().await, t, &version) }
    };
    // Missing, then the same.
    let plan = plan_then_provision(fx, run("1.0.0", 3600, 3).await).await;
    assert_eq!(kinds(&plan), ["Create", "Create"]);
    let plan = plan_then_provision(fx, run("1.0.0", 3600, 3).await).await;
    assert_eq!(kinds(&plan), ["Nothing", "Nothing"]);
    // Editable drift, same version.
    let plan = plan_then_provision(fx, run("1.0.0", 7200, 5).await).await;
    assert_eq!(kinds(&plan), ["Update max_age", "Update max_deliver"]);
    // A newer version with nothing else to change: the stamp alone is an update (the plan
    // said "nothing to do" here).
    let plan = plan_then_provision(fx, run("1.1.0", 7200, 5).await).await;
    let stamp = "metadata.nats-topology.version";
    assert_eq!(
        kinds(&plan),
        [format!("Update {stamp}"), format!("Update {stamp}")]
    );
    // An older version with editable differences: not applied, said in health.
    let plan = plan_then_provision(fx, run("1.0.0", 3600, 3).await).await;
    assert_eq!(
        kinds(&plan),
        ["OlderVersion max_age", "OlderVersion max_deliver"]
    );
    // An older version with nothing to change.
    let plan = plan_then_provision(fx, run("1.0.0", 7200, 5).await).await;
    assert_eq!(kinds(&plan), ["Nothing", "Nothing"]);
    // An unordered stamp on the server (set by hand): the declaration is applied.
    let mut config = stream_config(&js, decl.name).await;
    config.metadata.insert(KEY.to_owned(), "by-hand".to_owned());
    js.update_stream(&config).await.unwrap();
    let plan = plan_then_provision(fx, run("1.1.0", 7200, 5).await).await;
    assert_eq!(
        kinds(&plan),
        [format!("Update {stamp}"), "Nothing".to_owned()]
    );
    // Unstamped (created before stamps, or by hand): stamped.
    let mut stream = js.get_stream(decl.name).await.unwrap();
    let mut config = stream.info().await.unwrap().config.clone();
    config.metadata.remove(KEY);
    js.update_stream(&config).await.unwrap();
    let mut workers = stream
        .consumer_info("workers")
        .await
        .unwrap()
        .config
        .clone();
    workers.metadata.remove(KEY);
    js.update_consumer_on_stream(workers, decl.name)
        .await
        .unwrap();
    let plan = plan_then_provision(fx, run("1.1.0", 7200, 5).await).await;
    assert_eq!(
        kinds(&plan),
        [format!("Update {stamp}"), format!("Update {stamp}")]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_says_what_provisioning_does_with_conflicts_extra_subjects_and_migration() {
    let fx = Fixture::start().await;
    let js = fx.jetstream().await;

    // Extra subjects on the server: kept, nothing to do.
    let (decl, t) = topology(&fx, "PLAN_EXTRA", 3600, 3);
    plan_then_provision(&fx, runtime(fx.connect().await, t, "1.0.0")).await;
    let mut config = stream_config(&js, decl.name).await;
    config.subjects.push("plan_extra_more.>".to_owned());
    js.update_stream(&config).await.unwrap();
    let (_, t) = topology(&fx, "PLAN_EXTRA", 3600, 3);
    let plan = plan_then_provision(&fx, runtime(fx.connect().await, t, "1.0.0")).await;
    assert_eq!(kinds(&plan), ["Nothing", "Nothing"]);

    // Immutable stream drift: storage.
    js.create_stream(stream::Config {
        name: "PLAN_STORAGE".to_owned(),
        subjects: vec!["plan_storage.>".to_owned()],
        storage: stream::StorageType::Memory,
        ..Default::default()
    })
    .await
    .unwrap();
    let (decl, _) = topology(&fx, "PLAN_STORAGE", 3600, 3);
    let decl = decl.storage(nats_topology::model::Storage::File);
    let t = Topology::new().stream(decl);
    let plan = plan_then_provision(&fx, runtime(fx.connect().await, t, "1.0.0")).await;
    assert_eq!(kinds(&plan), ["Conflict storage"]);

    // Immutable consumer drift: ack policy.
    let (decl, t) = topology(&fx, "PLAN_ACK", 3600, 3);
    create_by_hand(&js, &decl).await;
    js.create_consumer_on_stream(
        consumer::pull::Config {
            durable_name: Some("workers".into()),
            filter_subject: "plan_ack.work".into(),
            ack_policy: consumer::AckPolicy::None,
            ..Default::default()
        },
        decl.name,
    )
    .await
    .unwrap();
    let plan = plan_then_provision(&fx, runtime(fx.connect().await, t, "1.0.0")).await;
    assert_eq!(
        kinds(&plan),
        [
            "Update metadata.nats-topology.version",
            "Conflict ack_policy"
        ]
    );

    // A migration: the old consumer exists, the new one does not.
    let (decl, t) = topology(&fx, "PLAN_MOVE", 3600, 3);
    plan_then_provision(&fx, runtime(fx.connect().await, t, "1.0.0")).await;
    let moved = queue(
        "tests::on_job",
        &decl,
        "plan_move.work",
        QueueDecl::new("workers-v2")
            .max_deliver(3)
            .migrate_from("workers"),
    );
    let t = job_topology(decl, moved, fx.ledger.clone(), Duration::ZERO);
    let plan = plan_then_provision(&fx, runtime(fx.connect().await, t, "2.0.0")).await;
    assert_eq!(
        kinds(&plan),
        ["Update metadata.nats-topology.version", "Migrate"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_says_what_provisioning_does_with_external_streams() {
    let fx = Fixture::start().await;
    let js = fx.jetstream().await;
    js.create_stream(stream::Config {
        name: "PLAN_EXT".to_owned(),
        subjects: vec!["plan_ext.a.>".to_owned()],
        ..Default::default()
    })
    .await
    .unwrap();
    let external = |subject: &str| {
        let decl = StreamDecl::new("PLAN_EXT", &["plan_ext.>"]).external();
        let consumer = nats_topology::model::ConsumerDecl::queue(
            "tests::on_job",
            StreamRef::Named("PLAN_EXT"),
            QueueDecl::new("ext-workers"),
        )
        .subjects(fixture::leak_all(&[subject]));
        job_topology(decl, consumer, fx.ledger.clone(), Duration::ZERO)
    };
    // Covering: verified, and the consumer created in it.
    let t = external(leak("plan_ext.a.work"));
    let plan = plan_then_provision(&fx, runtime(fx.connect().await, t, "1.0.0")).await;
    assert_eq!(kinds(&plan), ["Verify", "Create"]);
    // Not covering: not ready, and nothing changed.
    let t = external(leak("plan_ext.b.work"));
    let plan = plan_then_provision(&fx, runtime(fx.connect().await, t, "1.0.0")).await;
    assert_eq!(kinds(&plan)[0], "Verify");
    assert!(
        matches!(plan.items[0].action, Action::Verify(Err(_))),
        "{plan}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_says_what_a_bind_only_runtime_does() {
    let fx = Fixture::start().await;
    let bound = |t: Topology, client: async_nats::Client| {
        Runtime::builder(client)
            .topology(t)
            .retry(quick())
            .version("1.0.0")
            .bind_only()
            .build()
            .expect("a valid topology")
    };
    // Nothing provisioned yet: not ready, and nothing created.
    let (_, t) = topology(&fx, "PLAN_BOUND", 3600, 3);
    let plan = plan_then_provision(&fx, bound(t, fx.connect().await)).await;
    assert_eq!(kinds(&plan), ["Bound", "Bound"]);
    assert!(
        plan.items
            .iter()
            .all(|i| matches!(i.action, Action::Bound(Err(_)))),
        "{plan}"
    );
    // Provisioned by the operator; this declaration differs in max_deliver: used as it is.
    let (_, t) = topology(&fx, "PLAN_BOUND", 3600, 3);
    plan_then_provision(&fx, runtime(fx.connect().await, t, "1.0.0")).await;
    let (_, t) = topology(&fx, "PLAN_BOUND", 3600, 5);
    let plan = plan_then_provision(&fx, bound(t, fx.connect().await)).await;
    assert_eq!(kinds(&plan), ["Bound", "Bound max_deliver"]);
    assert_eq!(
        plan.items[0].action,
        Action::Bound(Ok(Vec::new())),
        "{plan}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_says_what_provisioning_does_with_plain_durables_relays_and_retired_consumers() {
    let fx = Fixture::start().await;
    let js = fx.jetstream().await;

    // A plain push durable (one subscriber) where a queue consumer is declared: a conflict.
    let (decl, t) = topology(&fx, "PLAN_PLAIN", 3600, 3);
    create_by_hand(&js, &decl).await;
    js.create_consumer_on_stream(
        consumer::push::Config {
            durable_name: Some("workers".into()),
            deliver_subject: "plain.deliver".into(),
            filter_subject: "plan_plain.work".into(),
            ..Default::default()
        },
        decl.name,
    )
    .await
    .unwrap();
    let plan = plan_then_provision(&fx, runtime(fx.connect().await, t, "1.0.0")).await;
    assert!(
        kinds(&plan)[1].starts_with("Conflict"),
        "a plain durable cannot become a queue consumer in place: {plan}"
    );

    // `migrate_from` whose old consumer does not exist (a first deploy): created.
    let decl = stream("PLAN_FRESH", &["plan_fresh.>"]).max_age(Duration::from_secs(3600));
    let fresh = queue(
        "tests::on_job",
        &decl,
        "plan_fresh.work",
        QueueDecl::new("workers-v2")
            .max_deliver(3)
            .migrate_from("workers"),
    );
    let t = job_topology(decl, fresh, fx.ledger.clone(), Duration::ZERO);
    let plan = plan_then_provision(&fx, runtime(fx.connect().await, t, "2.0.0")).await;
    assert_eq!(kinds(&plan), ["Create", "Create"]);

    // A consumer a newer declaration migrated away from (deleted, its successor naming it):
    // at start-up the older declaration creates it again, as the plan says (the newer
    // fleet's retirement pauses and deletes it again; after a loss it stays superseded).
    let (decl, t) = topology(&fx, "PLAN_RETIRED", 3600, 3);
    plan_then_provision(&fx, runtime(fx.connect().await, t, "1.0.0")).await;
    let moved = queue(
        "tests::on_job",
        &decl,
        "plan_retired.work",
        QueueDecl::new("workers-v2")
            .max_deliver(3)
            .migrate_from("workers"),
    );
    let t = job_topology(decl, moved, fx.ledger.clone(), Duration::ZERO);
    plan_then_provision(&fx, runtime(fx.connect().await, t, "2.0.0")).await;
    fixture::delete_consumer(&js, decl.name, "workers").await;
    let (_, t) = topology(&fx, "PLAN_RETIRED", 3600, 3);
    let plan = plan_then_provision(&fx, runtime(fx.connect().await, t, "1.0.0")).await;
    assert_eq!(kinds(&plan), ["Nothing", "Create"]);

    // A relay: created by each instance when it runs, never by provisioning.
    let decl = stream("PLAN_RELAY", &["plan_relay.>"]);
    let t = Topology::new().stream(decl).consumer(
        fixture::relay("tests::on_status", &decl, "plan_relay.status"),
        fixture::job_handler(fx.ledger.clone(), Duration::ZERO),
    );
    let plan = plan_then_provision(&fx, runtime(fx.connect().await, t, "1.0.0")).await;
    assert_eq!(kinds(&plan), ["Create", "PerInstance"]);
    let mut relay_stream = js.get_stream("PLAN_RELAY").await.unwrap();
    assert_eq!(
        relay_stream.info().await.unwrap().state.consumer_count,
        0,
        "provisioning creates no relay: {plan}"
    );
}
