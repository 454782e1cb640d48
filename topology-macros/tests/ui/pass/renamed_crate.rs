//! `crate = path` when the facade is reachable under another name.

use nats_topology as nt;

mod inner {
    pub use nats_topology as facade;
}

#[nt::stream(name = "ORDERS", subjects = ["orders.>"], crate = nt)]
pub struct Orders;

#[nt::queue_consumer(stream = Orders, group = "billing", subject = "orders.created", crate = nt)]
async fn on_order(event: String) -> Result<(), nt::HandlerError> {
    let _ = event;
    Ok(())
}

#[nt::broadcast(stream = Orders, crate = inner::facade)]
async fn relay_order(event: String) -> Result<(), nt::HandlerError> {
    let _ = event;
    Ok(())
}

#[nt::broadcast(stream = "ORDERS", crate = "crate::inner::facade")]
async fn relay_order_by_name(event: String) -> Result<(), nt::HandlerError> {
    let _ = event;
    Ok(())
}


#[nt::service(name = "orders", crate = nt)]
pub struct OrdersService;

#[nt::endpoint(service = OrdersService, subject = "orders.get", crate = inner::facade)]
async fn get_order(id: u64) -> Result<u64, nt::ServiceError> {
    Ok(id)
}

#[nt::subscription(subject = "orders.audit", group = "audit", crate = "crate::inner::facade")]
async fn audit_order(raw: Vec<u8>, _cx: nt::RequestContext) -> Result<(), nt::HandlerError> {
    let _ = raw;
    Ok(())
}

fn main() {
    let topology = nt::Topology::from_registry();
    assert_eq!(topology.streams().len(), 1);
    assert_eq!(topology.consumers().len(), 3);
    assert_eq!(topology.services().len(), 1);
    assert_eq!(topology.endpoints().len(), 1);
    assert_eq!(topology.subscriptions().len(), 1);
}
