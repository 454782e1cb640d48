//! Key-value buckets and object stores under exactly the permissions `export::permissions`
//! generates: the service provisions them and uses every operation of its handles, denied
//! nothing; with the bucket's entries removed, the same handle is refused.

mod fixture;

use std::collections::BTreeSet;
use std::time::Duration;

use fixture::users_config;
use nats_topology::bucket::{Kv, KvErrorKind, ObjectStore};
use nats_topology::export::{self, Role};
use nats_topology::model::BucketDecl;
use nats_topology::{RetryPolicy, Runtime, Topology};
use nats_topology_testkit::NatsServer;

static STATUS: BucketDecl = BucketDecl::kv("PERM_STATUS").history(2);
static UPLOADS: BucketDecl = BucketDecl::object("PERM_UPLOADS");
const SERVICE: &str = "members";
const PASSWORD: &str = "members-pw";

fn topology() -> Topology {
    Topology::new().bucket(STATUS).bucket(UPLOADS)
}

async fn runtime_under(permissions: &export::Permissions) -> (NatsServer, Runtime) {
    let server = NatsServer::builder()
        .config(users_config(&[(SERVICE, PASSWORD, permissions)]))
        .probe_user("admin", "admin")
        .start()
        .await
        .expect("nats-server starts");
    let role = Role::owner(SERVICE);
    let client = fixture::client_of(&server.url(), SERVICE, PASSWORD, role.inbox_prefix()).await;
    let runtime = Runtime::builder(client)
        .topology(topology())
        .retry(RetryPolicy {
            request_timeout: Duration::from_secs(2),
            deadline: Duration::from_secs(6),
            ..RetryPolicy::default()
        })
        .build()
        .unwrap();
    (server, runtime)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buckets_are_provisioned_and_used_under_exactly_their_generated_permissions() {
    let permissions = export::permissions(&topology(), &Role::owner(SERVICE));
    let published: BTreeSet<String> = permissions
        .of(export::Verb::Publish)
        .map(|p| p.pattern())
        .filter(|p| p.contains("PERM_") || p.starts_with("$KV") || p.starts_with("$O"))
        .collect();
    for expected in [
        "$KV.PERM_STATUS.>",
        "$O.PERM_UPLOADS.>",
        "$JS.API.STREAM.CREATE.KV_PERM_STATUS",
        "$JS.API.DIRECT.GET.KV_PERM_STATUS.>",
        "$JS.API.STREAM.PURGE.OBJ_PERM_UPLOADS",
    ] {
        assert!(published.contains(expected), "{expected} in {published:#?}");
    }
    let (_server, runtime) = runtime_under(&permissions).await;
    runtime
        .provision()
        .await
        .expect("provisioned under its permissions");
    runtime.plan().await.expect("planned under its permissions");
    runtime
        .inspect()
        .await
        .expect("inspected under its permissions");

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
    assert_eq!(uploads.list().await.unwrap().len(), 1);
    uploads.delete("a.bin").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_buckets_subjects_the_handle_is_refused() {
    let mut permissions = export::permissions(&topology(), &Role::owner(SERVICE));
    permissions
        .entries
        .retain(|e| e.subject != "$KV.PERM_STATUS.>");
    let (_server, runtime) = runtime_under(&permissions).await;
    runtime.provision().await.unwrap();
    let status: Kv<String> = Kv::json(&runtime, STATUS);
    let refused = status.put("m.1", &"up".into()).await.unwrap_err();
    assert_eq!(refused.kind(), KvErrorKind::Request, "{refused}");
    assert_eq!(refused.key(), Some("m.1"));
}
