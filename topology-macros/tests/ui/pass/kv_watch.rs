//! Watches of key-value buckets, and the relays they register; the example of
//! `docs/kv_watch.md` as written there.

use nats_topology::model::{ConsumerKind, DeliverPolicy};
use nats_topology::{HandlerError, State, Topology, kv_bucket, kv_watch};

mod kv_watch_doc {
    use nats_topology::{kv_bucket, kv_watch, Context, HandlerError};
    use nats_topology::bucket::{KvEntry, KvOperation};
    #[derive(serde::Serialize, serde::Deserialize, Debug)]
    pub struct Status { online: bool }

    #[kv_bucket(name = "MEMBER_STATUS", value = Status)]
    pub struct MemberStatus;

    #[kv_watch(bucket = MemberStatus, keys = "member.>")]
    async fn on_status(entry: KvEntry<Status>, cx: Context) -> Result<(), HandlerError> {
        let _ = cx;
        match entry.operation {
            KvOperation::Put => println!("{} is {:?} (revision {})", entry.key, entry.value, entry.revision),
            KvOperation::Delete | KvOperation::Purge => println!("{} is gone", entry.key),
        }
        Ok(())
    }

    /// A bucket without `value` has `Bytes` values; only changes made from now on.
    #[kv_bucket(name = "FLAGS")]
    pub struct Flags;

    #[kv_watch(bucket = Flags, from = "now")]
    async fn on_flag(entry: KvEntry<nats_topology::bucket::Bytes>) -> Result<(), HandlerError> {
        let _ = entry;
        Ok(())
    }
}

pub struct Db;

#[kv_bucket(name = "LEASES", value = "Vec<String>", crate = nats_topology)]
pub struct Leases;

#[kv_watch(bucket = crate::Leases, keys = "shard.*.owner", from = "current", crate = nats_topology)]
async fn on_lease(
    entry: nats_topology::bucket::KvEntry<Vec<String>>,
    _db: State<Db>,
) -> Result<(), anyhow::Error> {
    let _ = entry;
    Ok(())
}

fn main() {
    let topology = Topology::from_registry();
    let watches: Vec<_> = topology
        .consumers()
        .iter()
        .map(|c| {
            let ConsumerKind::Broadcast(relay) = c.decl.kind else {
                panic!("a watch is a relay")
            };
            (c.decl.stream.name(), c.decl.subjects, relay.deliver, relay.kv_watch)
        })
        .collect();
    assert_eq!(
        watches,
        [
            ("KV_FLAGS", &["$KV.FLAGS.>"][..], DeliverPolicy::New, Some("FLAGS")),
            ("KV_LEASES", &["$KV.LEASES.shard.*.owner"][..], DeliverPolicy::LastPerSubject, Some("LEASES")),
            ("KV_MEMBER_STATUS", &["$KV.MEMBER_STATUS.member.>"][..], DeliverPolicy::LastPerSubject, Some("MEMBER_STATUS")),
        ]
    );
    assert_eq!(topology.buckets().len(), 3);
    let _: fn() -> Result<(), HandlerError> = || Ok(());
    let _ = kv_bucket_used;
}

#[allow(dead_code)]
fn kv_bucket_used() {
    let _ = (kv_bucket_marker as fn(), kv_watch_marker as fn());
}
fn kv_bucket_marker() {}
fn kv_watch_marker() {}
