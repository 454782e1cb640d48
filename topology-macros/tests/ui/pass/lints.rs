//! Generated code is quiet under strict crate lints.

#![forbid(unsafe_code)]
#![deny(missing_docs, warnings, rust_2018_idioms, unreachable_pub)]

use nats_topology::{
    HandlerError, RequestContext, ServiceError, Topology, broadcast, endpoint, kv_bucket,
    object_store, queue_consumer, service, stream, subscription,
};

/// The orders.
#[stream(name = "ORDERS", subjects = ["orders.>"])]
pub struct Orders;

#[queue_consumer(stream = Orders, group = "billing", subject = "orders.created", backoff = ["1s"], dead_letter = "dead.billing")]
async fn on_order(event: String) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

#[broadcast(stream = Orders)]
async fn relay_order(event: Vec<u8>) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

/// The members service.
#[service(name = "members", metadata = [("team", "a")])]
pub struct Members;

#[endpoint(service = Members, subject = "members.get", timeout = "1s")]
async fn get_member(id: u64, cx: RequestContext) -> Result<String, ServiceError> {
    Ok(format!("{id} via {}", cx.subject()))
}

#[endpoint(service = Members, subject = "members.raw")]
async fn raw_member(raw: Vec<u8>) -> Result<Vec<u8>, ServiceError> {
    Ok(raw)
}

#[subscription(subject = "cache.invalidate", each_instance)]
async fn invalidate(key: String) -> Result<(), HandlerError> {
    let _ = key;
    Ok(())
}

/// The status of each member.
#[kv_bucket(name = "STATUS", value = String, history = 2)]
pub struct Status;

#[kv_bucket(name = "FLAGS")]
pub(crate) struct Flags;

#[object_store(name = "UPLOADS")]
struct Uploads;

fn main() {
    let topology = Topology::from_registry();
    assert_eq!(topology.buckets().len(), 3);
    assert_eq!(topology.consumers().len(), 2);
    assert_eq!(topology.endpoints().len(), 2);
    assert_eq!(topology.subscriptions().len(), 1);
}
