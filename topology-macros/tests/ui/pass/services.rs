//! Services, endpoints and core subscriptions, and the declarations they register: the
//! endpoints always in a queue group (`q` unless declared), a subscription of each kind.

use core::time::Duration;

use nats_topology::model::Fanout;
use nats_topology::{
    HandlerError, RequestContext, ServiceError, State, Topology, endpoint, service, subscription,
};
use serde::{Deserialize, Serialize};

pub struct Db;

/// The version is the crate's.
#[service(name = "members", description = "Member lookups")]
pub struct Members;

#[service(
    name = "billing",
    version = "2.0.0-rc.1+build.7",
    queue_group = "billing-workers",
    metadata = [("team", "payments"), ("tier", "1")],
)]
pub struct Billing;

#[derive(Deserialize)]
pub struct GetMember {
    pub id: u64,
}

#[derive(Serialize)]
pub struct Member {
    pub id: u64,
    pub name: String,
}

#[endpoint(service = Members, subject = "members.get")]
async fn get_member(request: GetMember, cx: RequestContext) -> Result<Member, ServiceError> {
    let _ = cx.subject();
    Ok(Member {
        id: request.id,
        name: "Ada".into(),
    })
}

#[endpoint(
    service = Members,
    subject = "members.*.rename",
    name = "rename",
    group = "renamers",
    concurrency = 4,
    timeout = "5s",
    metadata = [("idempotent", "yes")],
    crate = nats_topology,
)]
async fn rename_member(name: String, db: State<Db>) -> Result<(), std::io::Error> {
    let _ = (name, db);
    Ok(())
}

/// Raw bytes in, raw bytes out; the service's queue group applies.
#[endpoint(service = Billing, subject = "billing.echo")]
async fn echo(request: bytes::Bytes) -> Result<Vec<u8>, ServiceError> {
    Ok(request.to_vec())
}

type Reply<T> = Result<T, ServiceError>;

/// A reply through a type alias.
#[endpoint(service = Billing, subject = "billing.total")]
async fn total(items: Vec<u64>, _cx: RequestContext) -> Reply<u64> {
    Ok(items.iter().sum())
}

/// Shared work on a core subject: each message handled by one instance.
#[subscription(subject = "jobs.cleanup", group = "cleaners", concurrency = 2)]
async fn cleanup(job: String, _cx: RequestContext, _db: State<Db>) -> Result<(), HandlerError> {
    let _ = job;
    Ok(())
}

/// Every instance receives every message.
#[subscription(subject = "cache.invalidate.>", each_instance)]
async fn invalidate(key: Vec<u8>) -> Result<(), std::io::Error> {
    let _ = key;
    Ok(())
}

fn main() {
    // The user's functions are unchanged.
    let reply = futures::executor::block_on(get_member_direct());
    assert_eq!(reply.id, 7);

    let topology = Topology::from_registry();
    let services: Vec<(&str, &str)> = (topology.services().iter())
        .map(|s| (s.name, s.version))
        .collect();
    assert_eq!(
        services,
        [
            ("billing", "2.0.0-rc.1+build.7"),
            ("members", env!("CARGO_PKG_VERSION"))
        ]
    );
    let billing = topology.services()[0];
    assert_eq!(billing.queue_group, Some("billing-workers"));
    assert_eq!(billing.metadata, [("team", "payments"), ("tier", "1")]);
    assert_eq!(topology.services()[1].description, Some("Member lookups"));

    let endpoint = |name: &str| {
        let handler = format!("{}::{name}", module_path!());
        (topology.endpoints().iter())
            .find(|e| e.decl.handler == handler)
            .unwrap_or_else(|| panic!("{handler} is not registered"))
            .decl
    };
    let get = endpoint("get_member");
    assert_eq!(get.service.name, "members");
    assert_eq!((get.name, get.subject), ("get_member", "members.get"));
    assert_eq!(get.group, None);
    assert_eq!(get.queue_group(), "q");
    assert_eq!((get.concurrency, get.timeout), (None, None));

    let rename = endpoint("rename_member");
    assert_eq!((rename.name, rename.subject), ("rename", "members.*.rename"));
    assert_eq!(rename.queue_group(), "renamers");
    assert_eq!(rename.concurrency, Some(4));
    assert_eq!(rename.timeout, Some(Duration::from_secs(5)));
    assert_eq!(rename.metadata, [("idempotent", "yes")]);

    let echo = endpoint("echo");
    assert_eq!(echo.service.name, "billing");
    assert_eq!(echo.queue_group(), "billing-workers");
    assert_eq!(endpoint("total").subject, "billing.total");
    assert_eq!(topology.endpoints().len(), 4);

    let subscriptions: Vec<(&str, Fanout, u32)> = (topology.subscriptions().iter())
        .map(|s| (s.decl.subject, s.decl.fanout, s.decl.effective_concurrency()))
        .collect();
    assert_eq!(
        subscriptions,
        [
            ("cache.invalidate.>", Fanout::EachInstance, 1),
            ("jobs.cleanup", Fanout::Group("cleaners"), 2),
        ]
    );
    let _ = (Members, Billing);
}

async fn get_member_direct() -> Member {
    // A handler is still an ordinary function; only its context needs a runtime.
    Member { id: 7, name: String::new() }
}
