//! Mirrors, sources and subject transforms: the short and the block forms, by type and by
//! name, and consumers on a mirror and on a stream with sources, checked against the subjects
//! of the streams they take from.

use nats_topology::model::{Origin, StreamRef, SubjectTransform};
use nats_topology::{Context, HandlerError, Topology, broadcast, queue_consumer, stream};

#[stream(name = "ORDERS", subjects = ["orders.>"])]
pub struct Orders;

#[stream(name = "BILLING", subjects = ["billing.>"])]
pub struct Billing;

/// A copy of every order.
#[stream(name = "ORDERS_COPY", mirror = Orders)]
pub struct OrdersCopy;

/// The European orders, kept near the users.
#[stream(name = "ORDERS_EU", mirror = { stream = Orders, filter = "orders.eu.>" }, placement = { cluster = "eu" })]
pub struct OrdersEu;

/// The hub's orders, from another domain.
#[stream(name = "ORDERS_HUB", mirror = { stream = "ORDERS", domain = "hub" })]
pub struct OrdersHub;

/// Orders and invoices together, the invoices renamed.
#[stream(
    name = "LEDGER",
    sources = [Orders, { stream = Billing, filter = "billing.paid.>", transform = "ledger.paid.>" }],
)]
pub struct Ledger;

/// Its own subjects, rewritten as stored.
#[stream(name = "INBOX", subjects = ["in.>"], subject_transform = { src = "in.>", dest = "inbox.>" })]
pub struct Inbox;

#[queue_consumer(stream = OrdersEu, group = "eu-shipping", subject = "orders.eu.paid")]
async fn ship_eu(_order: Vec<u8>, _cx: Context) -> Result<(), HandlerError> {
    Ok(())
}

#[broadcast(stream = Ledger, subject = "orders.>")]
async fn ledger_orders(_entry: Vec<u8>, _cx: Context) -> Result<(), HandlerError> {
    Ok(())
}

fn main() {
    let topology = Topology::from_registry();
    let stream = |name: &str| {
        *topology
            .streams()
            .iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("{name} is registered"))
    };
    let copy = stream("ORDERS_COPY");
    assert!(copy.subjects.is_empty());
    assert_eq!(copy.mirror.map(|m| m.name()), Some("ORDERS"));
    let eu = stream("ORDERS_EU").mirror.unwrap();
    assert_eq!(eu.filter, Some("orders.eu.>"));
    assert!(matches!(eu.stream, StreamRef::Declared(d) if d.subjects == ["orders.>"]));
    let hub = stream("ORDERS_HUB").mirror.unwrap();
    assert_eq!((hub.stream, hub.domain), (StreamRef::Named("ORDERS"), Some("hub")));
    let ledger = stream("LEDGER");
    assert_eq!(ledger.sources.len(), 2);
    assert_eq!(ledger.sources[1].transform, Some("ledger.paid.>"));
    assert_eq!(ledger.sources[1].filter, Some("billing.paid.>"));
    assert_eq!(
        stream("INBOX").subject_transform,
        Some(SubjectTransform::new("in.>", "inbox.>"))
    );
    let _: Origin = ledger.sources[0];
    assert_eq!(topology.consumers().len(), 2);
}
