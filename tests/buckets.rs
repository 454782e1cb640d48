//! Key-value buckets and object stores against a real server: provisioned as the streams every
//! client expects, the typed handles (compare-and-swap races included), drift, external
//! buckets, and start-up validation.

mod fixture;
mod npm;

use std::collections::BTreeSet;
use std::time::Duration;

use async_nats::jetstream::{self, kv};
use fixture::Fixture;
use nats_topology::bucket::{Kv, KvErrorKind, ObjectErrorKind, ObjectStore};
use nats_topology::model::{BucketDecl, Storage, StreamDecl};
use nats_topology::{ProvisionErrorKind, RetryPolicy, Runtime, Topology};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Status {
    online: bool,
    seen: u64,
}

fn quick() -> RetryPolicy {
    RetryPolicy {
        request_timeout: Duration::from_secs(2),
        deadline: Duration::from_secs(10),
        ..RetryPolicy::default()
    }
}

/// The configuration of the stream `name` on the server.
async fn config(js: &jetstream::Context, name: &str) -> jetstream::stream::Config {
    let stream = js.get_stream(name).await.unwrap();
    stream.cached_info().config.clone()
}

async fn runtime(fx: &Fixture, topology: Topology) -> Runtime {
    fx.builder()
        .await
        .topology(topology)
        .retry(quick())
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declared_bucket_is_the_stream_create_key_value_makes() {
    static STATUS: BucketDecl = BucketDecl::kv("MEMBER_STATUS")
        .history(5)
        .ttl(Duration::from_secs(3600))
        .max_value_size(4096)
        .max_bytes(1 << 20)
        .description("the status of each member");
    let fx = Fixture::start().await;
    let js = fx.jetstream().await;
    let runtime = runtime(&fx, Topology::new().bucket(STATUS)).await;
    runtime
        .provision()
        .await
        .expect("the bucket is provisioned");

    let ours = config(&js, "KV_MEMBER_STATUS").await;
    // What async-nats creates for the same settings, in a bucket of its own.
    js.create_key_value(kv::Config {
        bucket: "REFERENCE".into(),
        history: 5,
        max_age: Duration::from_secs(3600),
        max_value_size: 4096,
        max_bytes: 1 << 20,
        description: "the status of each member".into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let reference = config(&js, "KV_REFERENCE").await;
    let (a, b) = (&ours, &reference);
    assert_eq!(a.subjects, ["$KV.MEMBER_STATUS.>"]);
    assert_eq!(
        (a.max_messages_per_subject, a.max_age, a.max_bytes),
        (b.max_messages_per_subject, b.max_age, b.max_bytes)
    );
    assert_eq!(
        (a.max_message_size, a.discard, a.storage, a.num_replicas),
        (b.max_message_size, b.discard, b.storage, b.num_replicas)
    );
    assert_eq!(
        (a.allow_rollup, a.deny_delete, a.deny_purge, a.allow_direct),
        (b.allow_rollup, b.deny_delete, b.deny_purge, b.allow_direct)
    );
    assert_eq!(
        (a.duplicate_window, a.retention, &a.description),
        (b.duplicate_window, b.retention, &b.description)
    );
    assert!(
        a.metadata.contains_key("nats-topology.version"),
        "stamped: {:?}",
        a.metadata
    );
    // The official client opens it as a key-value bucket.
    let store = js.get_key_value("MEMBER_STATUS").await.unwrap();
    store.put("member.1", "up".into()).await.unwrap();
    fixture::assert_nothing_to_do(&runtime).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typed_handle_reads_and_writes_values_of_the_declared_type() {
    static STATUS: BucketDecl = BucketDecl::kv("HANDLE_STATUS").history(3);
    let fx = Fixture::start().await;
    let runtime = runtime(&fx, Topology::new().bucket(STATUS)).await;
    runtime.provision().await.unwrap();
    let status: Kv<Status> = Kv::json(&runtime, STATUS);
    let up = Status {
        online: true,
        seen: 1,
    };

    assert_eq!(status.get("member.1").await.unwrap(), None);
    let first = status.create("member.1", &up).await.unwrap();
    let again = status.create("member.1", &up).await.unwrap_err();
    assert_eq!(again.kind(), KvErrorKind::AlreadyExists);
    assert_eq!(
        (again.bucket(), again.key()),
        ("HANDLE_STATUS", Some("member.1"))
    );
    let entry = status.entry("member.1").await.unwrap().unwrap();
    assert_eq!(
        (entry.value.clone(), entry.revision),
        (Some(up.clone()), first)
    );
    let down = Status {
        online: false,
        seen: 2,
    };
    let second = status.put("member.1", &down).await.unwrap();
    assert!(second > first);
    assert_eq!(status.get("member.1").await.unwrap(), Some(down.clone()));
    status.put("member.2", &up).await.unwrap();
    let keys: BTreeSet<String> = status.keys().await.unwrap().into_iter().collect();
    assert_eq!(keys, BTreeSet::from(["member.1".into(), "member.2".into()]));

    status.delete("member.1").await.unwrap();
    assert_eq!(status.get("member.1").await.unwrap(), None);
    status.purge("member.2").await.unwrap();
    assert_eq!(status.entry("member.2").await.unwrap(), None);
    assert!(status.keys().await.unwrap().is_empty());

    let invalid = status.put(".bad", &up).await.unwrap_err();
    assert_eq!(invalid.kind(), KvErrorKind::InvalidKey);
    // A value written by another client that is not a Status: a decode error naming the key.
    let raw = Kv::raw(&runtime, STATUS);
    raw.put("member.3", &"not json".into()).await.unwrap();
    let undecodable = status.get("member.3").await.unwrap_err();
    assert_eq!(undecodable.kind(), KvErrorKind::Decode);
    let text = undecodable.to_string();
    assert!(
        text.contains("`HANDLE_STATUS`") && text.contains("`member.3`"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_racing_a_compare_and_swap_one_wins_the_other_gets_a_conflict() {
    static LEASES: BucketDecl = BucketDecl::kv("LEASES");
    let fx = Fixture::start().await;
    let a = runtime(&fx, Topology::new().bucket(LEASES)).await;
    let b = runtime(&fx, Topology::new().bucket(LEASES)).await;
    let (ra, rb) = tokio::join!(a.provision(), b.provision());
    ra.unwrap();
    rb.unwrap();
    let (leases_a, leases_b): (Kv<String>, Kv<String>) =
        (Kv::json(&a, LEASES), Kv::json(&b, LEASES));
    for round in 0..20u64 {
        let key = format!("shard.{round}");
        let revision = leases_a.put(&key, &"nobody".into()).await.unwrap();
        let (value_a, value_b) = ("a".to_owned(), "b".to_owned());
        let (won_a, won_b) = tokio::join!(
            leases_a.update(&key, &value_a, revision),
            leases_b.update(&key, &value_b, revision),
        );
        let (winner, loser) = match (won_a, won_b) {
            (Ok(_), Err(lost)) => ("a", lost),
            (Err(lost), Ok(_)) => ("b", lost),
            other => panic!("round {round}: exactly one must win: {other:?}"),
        };
        assert_eq!(
            loser.kind(),
            KvErrorKind::Conflict {
                expected_revision: revision
            }
        );
        assert_eq!(loser.key(), Some(key.as_str()));
        assert!(loser.to_string().contains("`LEASES`"), "{loser}");
        assert_eq!(leases_b.get(&key).await.unwrap().as_deref(), Some(winner));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bucket_drift_applies_history_and_refuses_a_storage_change_precisely() {
    let fx = Fixture::start().await;
    let js = fx.jetstream().await;
    let declared = |decl: BucketDecl| Topology::new().bucket(decl);
    runtime(&fx, declared(BucketDecl::kv("DRIFT").history(1)))
        .await
        .provision()
        .await
        .unwrap();

    let wider = runtime(&fx, declared(BucketDecl::kv("DRIFT").history(10))).await;
    let plan = wider.plan().await.unwrap().to_string();
    assert!(plan.contains("max_msgs_per_subject"), "{plan}");
    wider.provision().await.expect("history is editable");
    let history = config(&js, "KV_DRIFT").await.max_messages_per_subject;
    assert_eq!(history, 10);
    fixture::assert_nothing_to_do(&wider).await;

    let in_memory = BucketDecl::kv("DRIFT").history(10).storage(Storage::Memory);
    let error = runtime(&fx, declared(in_memory))
        .await
        .provision()
        .await
        .expect_err("storage cannot change in place");
    assert_eq!(error.kind(), ProvisionErrorKind::Conflict);
    assert_eq!(error.attempts(), 1, "a conflict is never retried");
    assert_eq!(error.stream(), "KV_DRIFT");
    let diffs = error.field_diffs();
    assert_eq!(diffs.len(), 1, "{error}");
    assert_eq!(diffs[0].field, "storage");
    assert_eq!(
        (diffs[0].server.as_str(), diffs[0].declared.as_str()),
        ("File", "Memory")
    );
    let text = error.to_string();
    assert!(text.contains("key-value bucket `DRIFT`"), "{text}");
    assert!(
        text.contains("declare the bucket as it is on the server"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_store_holds_a_20_mb_object_intact_and_is_drift_checked() {
    static UPLOADS: BucketDecl = BucketDecl::object("UPLOADS").description("uploads");
    let fx = Fixture::start().await;
    let js = fx.jetstream().await;
    let runtime = runtime(&fx, Topology::new().bucket(UPLOADS)).await;
    runtime.provision().await.unwrap();
    let made = config(&js, "OBJ_UPLOADS").await;
    assert_eq!(made.subjects, ["$O.UPLOADS.C.>", "$O.UPLOADS.M.>"]);
    assert!(made.allow_rollup && made.allow_direct && !made.deny_delete);
    assert_eq!(made.discard, jetstream::stream::DiscardPolicy::New);

    let uploads = ObjectStore::new(&runtime, UPLOADS);
    let object: Vec<u8> = (0..20 * 1024 * 1024u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let info = uploads.put_bytes("big.bin", &object).await.unwrap();
    assert_eq!(info.size, object.len());
    assert!(info.chunks > 1, "stored in chunks: {}", info.chunks);
    let read = uploads.get_bytes("big.bin").await.unwrap();
    assert!(read == object, "the 20 MB read back differ from those put");
    // The official client reads it too.
    let official = js.get_object_store("UPLOADS").await.unwrap();
    let mut theirs = Vec::new();
    tokio::io::AsyncReadExt::read_to_end(&mut official.get("big.bin").await.unwrap(), &mut theirs)
        .await
        .unwrap();
    assert!(theirs == object);
    let listed: Vec<String> = uploads
        .list()
        .await
        .unwrap()
        .into_iter()
        .map(|i| i.name)
        .collect();
    assert_eq!(listed, ["big.bin"]);
    uploads.delete("big.bin").await.unwrap();
    let gone = uploads.info("big.bin").await.unwrap_err();
    assert_eq!(gone.kind(), ObjectErrorKind::NotFound);
    assert_eq!(gone.object(), Some("big.bin"));

    // Drift: an editable change is applied, storage refused.
    let renamed = BucketDecl::object("UPLOADS").description("user uploads");
    runtime_of(&fx, renamed).await.provision().await.unwrap();
    let described = config(&js, "OBJ_UPLOADS").await.description;
    assert_eq!(described.as_deref(), Some("user uploads"));
    let error = runtime_of(&fx, renamed.storage(Storage::Memory))
        .await
        .provision()
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ProvisionErrorKind::Conflict);
    assert!(
        error.to_string().contains("object store `UPLOADS`"),
        "{error}"
    );
}

async fn runtime_of(fx: &Fixture, decl: BucketDecl) -> Runtime {
    runtime(fx, Topology::new().bucket(decl)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_external_bucket_is_verified_never_created() {
    static FLAGS: BucketDecl = BucketDecl::kv("FLAGS").external();
    let fx = Fixture::start().await;
    let js = fx.jetstream().await;
    let error = runtime_of(&fx, FLAGS)
        .await
        .provision()
        .await
        .expect_err("the bucket is not there");
    assert_eq!(error.kind(), ProvisionErrorKind::ExternalNotReady);
    assert!(
        js.get_stream("KV_FLAGS").await.is_err(),
        "never created here"
    );
    js.create_key_value(kv::Config {
        bucket: "FLAGS".into(),
        history: 2,
        ..Default::default()
    })
    .await
    .unwrap();
    let runtime = runtime_of(&fx, FLAGS).await;
    runtime.provision().await.expect("verified");
    let history = config(&js, "KV_FLAGS").await.max_messages_per_subject;
    assert_eq!(history, 2, "left as its owner made it");
    Kv::raw(&runtime, FLAGS)
        .put("dark_mode", &"on".into())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_up_refuses_streams_on_bucket_subjects_and_a_bucket_declared_twice() {
    static GRABBY: StreamDecl = StreamDecl::new("GRABBY", &["$KV.FLAGS.>"]);
    let fx = Fixture::start().await;
    let topology = Topology::new()
        .stream(GRABBY)
        .bucket(BucketDecl::kv("STATUS").history(1))
        .bucket(BucketDecl::kv("STATUS").history(2))
        .bucket(BucketDecl::kv("bad.name"));
    let Err(error) = fx.builder().await.topology(topology).build() else {
        panic!("the topology is refused");
    };
    let text = error.to_string();
    for expected in [
        "stream `GRABBY`: subject `$KV.FLAGS.>` is reserved for key-value buckets",
        "key-value bucket `STATUS`: declared twice with different settings",
        "key-value bucket `bad.name`: a bucket name is one or more of",
    ] {
        assert!(text.contains(expected), "{expected:?} in {text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_nats_json_export_of_a_bucket_creates_the_bucket_the_runtime_would() {
    static EXPORTED: BucketDecl = BucketDecl::kv("EXPORTED").history(4).replicas(1);
    let topology = Topology::new()
        .bucket(EXPORTED)
        .bucket(BucketDecl::object("BLOBS"));
    let nats = nats_topology::export::nats_json(&topology);
    let names: Vec<&str> = nats
        .streams
        .iter()
        .map(|s| s.config.name.as_str())
        .collect();
    assert_eq!(names, ["KV_EXPORTED", "OBJ_BLOBS"]);
    let dir = std::env::temp_dir().join(format!("nt-bucket-export-{}", std::process::id()));
    let written = nats.write_to(&dir).unwrap();
    assert!(
        written
            .iter()
            .any(|p| p.ends_with("KV_EXPORTED.stream.json"))
    );
    // An operator creates the streams from the files (as `nats stream add --config` does).
    let fx = Fixture::start().await;
    let js = fx.jetstream().await;
    for name in ["KV_EXPORTED", "OBJ_BLOBS"] {
        let text = std::fs::read_to_string(dir.join(format!("{name}.stream.json"))).unwrap();
        let config: jetstream::stream::Config = serde_json::from_str(&text).unwrap();
        js.create_stream(config).await.unwrap();
    }
    std::fs::remove_dir_all(&dir).unwrap();
    js.get_key_value("EXPORTED")
        .await
        .unwrap()
        .put("k", "v".into())
        .await
        .unwrap();
    js.get_object_store("BLOBS").await.unwrap();
    let runtime = runtime(&fx, topology).await;
    fixture::assert_nothing_to_do(&runtime).await;
    let plan = runtime.plan().await.unwrap().to_string();
    assert!(
        plan.contains("key-value bucket `EXPORTED` (stream `KV_EXPORTED`): nothing to do"),
        "{plan}"
    );
    assert!(
        plan.contains("object store `BLOBS` (stream `OBJ_BLOBS`): nothing to do"),
        "{plan}"
    );
    let inspection = runtime.inspect().await.unwrap().to_string();
    assert!(
        inspection.contains("key-value bucket `EXPORTED` (stream `KV_EXPORTED`): 1 messages"),
        "{inspection}"
    );
}

/// Interop: an object we put is read back byte for byte by the official JavaScript client
/// (`@nats-io/obj`, pinned in `tests/js/package.json`), and one it puts is read by our handle,
/// both large enough to take many chunks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_cross_with_the_official_javascript_client_byte_for_byte() {
    static SHARED: BucketDecl = BucketDecl::object("SHARED_FILES");
    const SIZE: usize = 3 * 1024 * 1024 + 17;
    let fx = Fixture::start().await;
    let runtime = runtime(&fx, Topology::new().bucket(SHARED)).await;
    runtime.provision().await.unwrap();
    let files = ObjectStore::new(&runtime, SHARED);
    let ours: Vec<u8> = (0..SIZE as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let put = files.put_bytes("ours.bin", &ours).await.unwrap();
    assert!(put.chunks > 1, "stored in chunks: {}", put.chunks);

    let copy = std::env::temp_dir().join(format!("nt-obj-{}.bin", std::process::id()));
    let (url, copy_path) = (fx.server.url(), copy.display().to_string());
    let (ok, stdout) = tokio::task::spawn_blocking(move || {
        npm::node(
            "obj_roundtrip.mjs",
            &[
                &url,
                "SHARED_FILES",
                "ours.bin",
                &copy_path,
                "theirs.bin",
                &SIZE.to_string(),
            ],
        )
    })
    .await
    .expect("node runs");
    assert!(ok, "the JavaScript client opens the object store: {stdout}");
    let read = std::fs::read(&copy).expect("the JavaScript client wrote what it read");
    let _ = std::fs::remove_file(&copy);
    assert_eq!(read.len(), SIZE, "{stdout}");
    assert!(
        read == ours,
        "the JavaScript client read other bytes than we put"
    );

    let theirs = files.get_bytes("theirs.bin").await.unwrap();
    let expected: Vec<u8> = (0..SIZE).map(|i| ((i * 31 + 7) % 251) as u8).collect();
    assert_eq!(theirs.len(), SIZE, "{stdout}");
    assert!(
        theirs == expected,
        "our handle read other bytes than the JavaScript client put"
    );
    let info = files.info("theirs.bin").await.unwrap();
    assert!(info.chunks > 1, "their object in chunks: {}", info.chunks);
}
