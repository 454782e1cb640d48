//! Codecs on the declarations: JSON unless declared (also when written), raw bytes recorded as
//! such, and what the export and the runtime read from `decl.codec`. (The codecs beyond JSON
//! need their cargo features, off in this suite; tests/codecs.rs runs them.)

use bytes::Bytes;
use nats_topology::model::CodecId;
use nats_topology::{
    HandlerError, ServiceError, Topology, endpoint, queue_consumer, service, subscription,
};
use serde::{Deserialize, Serialize};

#[derive(Deserialize, Serialize)]
pub struct Order {
    pub id: u64,
}

#[queue_consumer(stream = "ORDERS", group = "default", subject = "orders.a")]
async fn by_default(order: Order) -> Result<(), HandlerError> {
    let _ = order.id;
    Ok(())
}

#[queue_consumer(stream = "ORDERS", group = "written", subject = "orders.b", codec = "json")]
async fn written(order: Order) -> Result<(), HandlerError> {
    let _ = order.id;
    Ok(())
}

#[queue_consumer(stream = "ORDERS", group = "raw", subject = "orders.c")]
async fn raw(bytes: Bytes) -> Result<(), HandlerError> {
    let _ = bytes;
    Ok(())
}

#[service(name = "orders", version = "1.0.0")]
struct Orders;

#[endpoint(service = Orders, subject = "orders.get", codec = "json")]
async fn get(order: Order) -> Result<Order, ServiceError> {
    Ok(order)
}

#[subscription(subject = "orders.seen", each_instance)]
async fn seen(bytes: Vec<u8>) -> Result<(), HandlerError> {
    let _ = bytes;
    Ok(())
}

fn main() {
    let topology = Topology::from_registry();
    let codec_of = |group: &str| {
        topology
            .consumers()
            .iter()
            .find(|c| c.decl.handler.ends_with(group))
            .map(|c| c.decl.codec)
    };
    assert_eq!(codec_of("by_default"), Some(CodecId::Json));
    assert_eq!(codec_of("written"), Some(CodecId::Json));
    assert_eq!(codec_of("raw"), Some(CodecId::Raw));
    assert_eq!(topology.endpoints()[0].decl.codec, CodecId::Json);
    assert_eq!(topology.subscriptions()[0].decl.codec, CodecId::Raw);
}
