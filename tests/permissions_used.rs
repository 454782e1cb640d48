//! Least privilege, counted: the representative service (`fixture::least_privilege`) lives its
//! whole life under exactly its generated permissions on a server that traces every protocol
//! operation (`trace: true`), and every entry of the block must have been used by the service's
//! connection: a publish or a subscription the entry allows. The entries that only an outage
//! uses are listed, each with why and the test that uses them.

mod fixture;

use std::collections::BTreeSet;
use std::sync::Arc;

use fixture::least_privilege::{self, EVERY_STEP_DONE, SERVICE, Seen};
use nats_topology::export::{self, Permission, Permissions, Verb};

/// The entries no life on one healthy server uses, and why they are granted all the same: the
/// leader watch's, used only while a request waits for a JetStream leader
/// (tests/permissions_cluster.rs kills the meta leader and removes them), and the consumer
/// elections a session follows only for a consumer with replicas.
const NOT_USED_WITHOUT_AN_OUTAGE: &[(&str, &str)] = &[
    (
        "_INBOX_billing._NT_FLEET.*.$JS.API",
        "the fleet channel: a replica publishes to it only while its leader watch waits for a \
         JetStream leader (its subscription is the inbox's, used for replies)",
    ),
    (
        "$JS.EVENT.ADVISORY.DOMAIN.LEADER_ELECTED",
        "the leader watch subscribes only while a request waits for a leader",
    ),
    (
        "$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED.PERM_ORDERS",
        "the leader watch subscribes to a stream's elections only while a request on it waits \
         for a leader",
    ),
    (
        "$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED.PERM_JOBS",
        "the leader watch subscribes to a stream's elections only while a request on it waits \
         for a leader",
    ),
    (
        "$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED.KV_PERM_INVOICED",
        "the leader watch subscribes to a stream's elections only while a request on it waits \
         for a leader",
    ),
    (
        "$JS.EVENT.ADVISORY.CONSUMER.LEADER_ELECTED.PERM_JOBS.jobs-v1",
        "the leader watch subscribes to the old consumer's elections only while a request of \
         the migration waits for a leader (nothing runs on it: no liveness subscribes)",
    ),
    (
        "$JS.EVENT.ADVISORY.CONSUMER.LEADER_ELECTED.PERM_JOBS.jobs-v2",
        "a session follows its consumer's elections only when the consumer has replicas (one \
         replica elects no leader while it runs); tests/permissions_cluster.rs runs R3 \
         consumers under their generated permissions and is denied nothing",
    ),
    (
        "$JS.EVENT.ADVISORY.CONSUMER.LEADER_ELECTED.PERM_ORDERS.*",
        "a relay's session follows its consumer's elections only when the consumer has \
         replicas, as the queue consumer's above",
    ),
];

/// One operation of a client, as nats-server traces it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Used {
    Publish(String),
    Subscribe(String, Option<String>),
}

/// The publishes and subscriptions the connections of `user` made, from a server log written
/// with `trace: true` (2.15.1: `.. - cid:7 - ".." - <<- [PUB subject reply size]`, `HPUB`,
/// `SUB subject [queue] sid`; the `CONNECT` line names the user).
fn used_by(log: &str, user: &str) -> BTreeSet<Used> {
    let cid = |line: &str| -> Option<String> {
        let rest = &line[line.find("cid:")? + 4..];
        Some(rest.chars().take_while(char::is_ascii_digit).collect())
    };
    let ops = |line: &str| -> Option<(String, Vec<String>)> {
        let rest = &line[line.find("<<- [")? + 5..];
        let mut words = rest.trim_end_matches(']').split_whitespace();
        let op = words.next()?.to_owned();
        Some((op, words.map(str::to_owned).collect()))
    };
    let user_field = format!("\"user\":\"{user}\"");
    let theirs: BTreeSet<String> = log
        .lines()
        .filter(|l| l.contains("<<- [CONNECT ") && l.contains(&user_field))
        .filter_map(cid)
        .collect();
    let mut used = BTreeSet::new();
    for line in log.lines().filter(|l| l.contains("[TRC]")) {
        let (Some(cid), Some((op, args))) = (cid(line), ops(line)) else {
            continue;
        };
        if !theirs.contains(&cid) {
            continue;
        }
        match (op.as_str(), args.as_slice()) {
            ("PUB" | "HPUB", [subject, ..]) => {
                used.insert(Used::Publish(subject.clone()));
            }
            ("SUB", [subject, _sid]) => {
                used.insert(Used::Subscribe(subject.clone(), None));
            }
            ("SUB", [subject, queue, _sid]) => {
                used.insert(Used::Subscribe(subject.clone(), Some(queue.clone())));
            }
            _ => {}
        }
    }
    used
}

/// Whether `entry` allows `used`, as nats-server decides it.
fn allows(permissions: &Permissions, entry: &Permission, used: &Used) -> bool {
    let (action, subject, queue) = match used {
        Used::Publish(subject) => (Verb::Publish, subject, None),
        Used::Subscribe(subject, queue) => (Verb::Subscribe, subject, queue.as_deref()),
    };
    permissions
        .granting(action, subject)
        .any(|e| e == entry && (e.queue.is_none() || e.queue.as_deref() == queue))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_entry_of_the_generated_permissions_is_used_by_the_services_life() {
    let permissions = export::permissions(
        &least_privilege::topology(&Arc::new(Seen::default())),
        &least_privilege::role(),
    );
    let life = least_privilege::live(&permissions, "trace: true").await;
    let report = life.report();
    assert!(
        life.denials.is_empty(),
        "denied: {:?}\n{report}",
        life.denials
    );
    for expected in EVERY_STEP_DONE {
        assert!(report.contains(expected), "{expected}:\n{report}");
    }
    assert_eq!(life.drained, Ok(()), "{report}");

    let used = used_by(&life.server_log, SERVICE);
    assert!(
        used.iter()
            .any(|u| matches!(u, Used::Publish(s) if s == "$JS.API.INFO")),
        "the trace shows the service's operations: {used:#?}"
    );
    let unused: Vec<&Permission> = permissions
        .entries
        .iter()
        .filter(|entry| !used.iter().any(|u| allows(&permissions, entry, u)))
        .collect();
    println!("entries no operation of the life used:");
    for entry in &unused {
        let why = NOT_USED_WITHOUT_AN_OUTAGE
            .iter()
            .find(|(subject, _)| *subject == entry.subject)
            .map_or("NOT EXPLAINED", |(_, why)| why);
        println!("  {}: {why}", entry.describe());
    }
    let unexplained: Vec<String> = unused
        .iter()
        .filter(|e| {
            !NOT_USED_WITHOUT_AN_OUTAGE
                .iter()
                .any(|(subject, _)| *subject == e.subject)
        })
        .map(|e| e.describe())
        .collect();
    assert!(
        unexplained.is_empty(),
        "granted, never used, not explained: {unexplained:#?}\nused: {used:#?}"
    );
    // The list says why each unused entry stays; an entry listed but used is listed wrongly.
    for (subject, _) in NOT_USED_WITHOUT_AN_OUTAGE {
        assert!(
            unused.iter().any(|e| e.subject == *subject),
            "{subject} is listed as unused, but the life used it (or it is not granted)"
        );
    }
}

/// Every entry the generated permissions give a key-value bucket and an object store is used by
/// their handles' operations (`tests/buckets_permissions.rs` runs the same operations denied
/// nothing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_entry_of_a_buckets_permissions_is_used_by_its_handles() {
    use nats_topology::bucket::{Kv, ObjectStore};
    use nats_topology::model::BucketDecl;
    use nats_topology::{Runtime, Topology};
    use nats_topology_testkit::NatsServer;

    static STATUS: BucketDecl = BucketDecl::kv("USED_STATUS").history(2);
    static UPLOADS: BucketDecl = BucketDecl::object("USED_UPLOADS");
    let topology = || Topology::new().bucket(STATUS).bucket(UPLOADS);
    let role = export::Role::owner("members");
    let permissions = export::permissions(&topology(), &role);
    let server = NatsServer::builder()
        .config(format!(
            "trace: true\n{}",
            fixture::users_config(&[("members", "members-pw", &permissions)])
        ))
        .probe_user("admin", "admin")
        .start()
        .await
        .expect("nats-server starts");
    let client =
        fixture::client_of(&server.url(), "members", "members-pw", role.inbox_prefix()).await;
    // Buckets as an earlier deploy left them (one value per key, not two; a description):
    // updated.
    let admin = async_nats::jetstream::new(fixture::admin_of(&server.url()).await);
    admin
        .create_key_value(async_nats::jetstream::kv::Config {
            bucket: STATUS.name.into(),
            history: 1,
            ..Default::default()
        })
        .await
        .unwrap();
    admin
        .create_object_store(async_nats::jetstream::object_store::Config {
            bucket: UPLOADS.name.into(),
            description: Some("made by hand".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    let runtime = fixture::fast(Runtime::builder(client.clone()))
        .topology(topology())
        .build()
        .unwrap();
    runtime.provision().await.expect("provisioned");

    let status: Kv<String> = Kv::json(&runtime, STATUS);
    let revision = status.create("m.1", &"up".into()).await.unwrap();
    status
        .update("m.1", &"down".into(), revision)
        .await
        .unwrap();
    assert_eq!(status.get("m.1").await.unwrap().as_deref(), Some("down"));
    assert_eq!(status.keys().await.unwrap(), ["m.1"]);
    status.delete("m.1").await.unwrap();
    status.purge("m.1").await.unwrap();
    let uploads = ObjectStore::new(&runtime, UPLOADS);
    let data = vec![7u8; 300 * 1024];
    uploads.put_bytes("a.bin", &data).await.unwrap();
    uploads.put_bytes("a.bin", &data[..1000]).await.unwrap(); // replaces: old chunks purged
    assert_eq!(uploads.get_bytes("a.bin").await.unwrap(), &data[..1000]);
    assert_eq!(uploads.info("a.bin").await.unwrap().size, 1000);
    assert_eq!(uploads.list().await.unwrap().len(), 1);
    uploads.delete("a.bin").await.unwrap();
    client.flush().await.unwrap();
    assert!(nats_topology::denied(&client).is_empty());
    drop(runtime);

    let log = std::fs::read_to_string(server.store_dir().join("server.log")).unwrap();
    let used = used_by(&log, "members");
    // What the buckets need (what every replica needs is the other test's: no runtime runs
    // here, only the handles), but their streams' leader elections, which the leader watch
    // follows only while a request waits for a leader (the other test lists them).
    let unused: Vec<String> = permissions
        .entries
        .iter()
        .filter(|e| {
            e.needed_by
                .iter()
                .all(|n| matches!(n.declaration, export::Declaration::Stream(_)))
                && !e
                    .needed_by
                    .iter()
                    .all(|n| n.why.starts_with("the leader watch"))
        })
        .filter(|entry| !used.iter().any(|u| allows(&permissions, entry, u)))
        .map(|e| e.describe())
        .collect();
    assert!(
        unused.is_empty(),
        "granted, never used: {unused:#?}\nused: {used:#?}"
    );
}
