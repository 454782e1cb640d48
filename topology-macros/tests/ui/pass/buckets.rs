//! Key-value buckets and object stores, and the declarations (and streams) they register;
//! the examples of `docs/kv_bucket.md` and `docs/object_store.md` as written there.

use core::time::Duration;

use nats_topology::model::{BucketDecl, KvBucketDef, ObjectStoreDef, Storage};
use nats_topology::{Topology, kv_bucket, object_store};

mod kv_bucket_doc {
    use nats_topology::kv_bucket;
    #[derive(serde::Serialize, serde::Deserialize)]
    pub struct Status { online: bool }

    #[kv_bucket(name = "MEMBER_STATUS", value = Status, history = 1, ttl = "1h", replicas = 3)]
    pub struct MemberStatus;

    /// Raw bytes; owned by another service: never created or changed here, only verified.
    #[kv_bucket(name = "FLAGS", external)]
    pub struct Flags;

    pub async fn set_online(runtime: &nats_topology::Runtime) -> Result<(), nats_topology::bucket::KvError> {
        let status = MemberStatus::kv(runtime);
        let revision = status.put("member.42", &Status { online: true }).await?;
        status.update("member.42", &Status { online: false }, revision).await?;
        let _flags = Flags::kv(runtime).keys().await?;
        Ok(())
    }
}

mod object_store_doc {
    use nats_topology::object_store;

    #[object_store(name = "UPLOADS", replicas = 3, max_bytes = 10737418240, description = "user uploads")]
    pub struct Uploads;

    pub async fn upload(runtime: &nats_topology::Runtime) -> Result<(), nats_topology::bucket::ObjectError> {
        let uploads = Uploads::store(runtime);
        uploads.put_bytes("avatar.png", b"\x89PNG...").await?;
        let _size = uploads.info("avatar.png").await?.size;
        Ok(())
    }
}

#[kv_bucket(
    name = "LEASES",
    value = "Vec<String>",
    history = 64,
    ttl = "30s",
    replicas = 1,
    storage = "memory",
    max_value_size = 1024,
    max_bytes = 1048576,
    description = "who holds which shard",
    crate = nats_topology,
)]
pub(crate) struct Leases;

#[object_store(name = "ARCHIVE", ttl = "7d", storage = "file", external = false)]
struct Archive;

fn main() {
    let _ = (kv_bucket_doc::set_online, object_store_doc::upload);
    // The handles' types: JSON values of the declared type, raw bytes without one.
    let _: fn(&nats_topology::Runtime) -> nats_topology::bucket::Kv<Vec<String>> = |r| Leases::kv(r);
    let _: fn(&nats_topology::Runtime) -> nats_topology::bucket::Kv<bytes::Bytes> =
        |r| kv_bucket_doc::Flags::kv(r);
    let _: fn(&nats_topology::Runtime) -> nats_topology::bucket::ObjectStore = |r| Archive::store(r);
    assert_eq!(
        <Leases as KvBucketDef>::DECL,
        BucketDecl::kv("LEASES")
            .history(64)
            .ttl(Duration::from_secs(30))
            .replicas(1)
            .storage(Storage::Memory)
            .max_value_size(1024)
            .max_bytes(1048576)
            .description("who holds which shard")
            .version(env!("CARGO_PKG_VERSION")),
    );
    assert_eq!(
        <Archive as ObjectStoreDef>::DECL,
        BucketDecl::object("ARCHIVE")
            .ttl(Duration::from_secs(7 * 24 * 3600))
            .storage(Storage::File)
            .version(env!("CARGO_PKG_VERSION")),
    );
    let topology = Topology::from_registry();
    let names: Vec<&str> = topology.buckets().iter().map(|b| b.name).collect();
    assert_eq!(names, ["ARCHIVE", "FLAGS", "LEASES", "MEMBER_STATUS", "UPLOADS"]);
    let streams: Vec<&str> = topology.streams().iter().map(|s| s.name).collect();
    assert_eq!(
        streams,
        ["KV_FLAGS", "KV_LEASES", "KV_MEMBER_STATUS", "OBJ_ARCHIVE", "OBJ_UPLOADS"]
    );
    assert!(topology.find_stream("KV_FLAGS").unwrap().external);
    assert_eq!(
        topology.find_stream("KV_LEASES").unwrap().max_msgs_per_subject,
        Some(64)
    );
}
