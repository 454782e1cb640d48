//! Handler shapes the macros accept, re-emitted unchanged (still callable directly).

use nats_topology::{Context, HandlerError, Topology, queue_consumer, stream};
use serde::Deserialize;

#[derive(Debug, Deserialize, PartialEq)]
pub struct Order {
    pub id: u64,
    pub total: u64,
}

#[derive(Debug)]
pub struct Rejected;

impl std::fmt::Display for Rejected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("rejected")
    }
}

impl std::error::Error for Rejected {}

type HandlerResult = Result<(), HandlerError>;

mod streams {
    use nats_topology::stream;

    #[stream(name = "ORDERS", subjects = ["orders.>"])]
    pub struct Orders;
}

/// A pattern in the argument, a custom error type, attributes kept.
#[queue_consumer(stream = streams::Orders, group = "billing", subject = "orders.created")]
#[allow(clippy::unused_async)]
pub(crate) async fn on_order(Order { id, total }: Order) -> Result<(), Rejected> {
    if total == 0 {
        Err(Rejected)
    } else {
        let _ = id;
        Ok(())
    }
}

/// A type alias as the return type; the context under another name.
#[queue_consumer(stream = crate::streams::Orders, group = "audit", subject = "orders.*.audited")]
async fn on_audit(order: Order, context: Context) -> HandlerResult {
    let _ = (order, context.delivered());
    Ok(())
}

/// A raw identifier as the name; the raw payload spelled with a path.
#[queue_consumer(stream = "ORDERS", group = "raw")]
async fn r#type(bytes: std::vec::Vec<u8>) -> HandlerResult {
    let _ = bytes;
    Ok(())
}

mod nested {
    use nats_topology::{HandlerError, queue_consumer};

    /// A handler in a submodule, naming the stream through `super`.
    #[queue_consumer(stream = super::streams::Orders, group = "nested", subject = "orders.nested")]
    pub async fn on_nested(order: super::Order) -> Result<(), HandlerError> {
        let _ = order;
        Ok(())
    }
}

#[stream(name = "LOCAL", subjects = ["local.>"])]
struct Local;

fn main() {
    // The user's functions are unchanged.
    let ok = futures::executor::block_on(on_order(Order { id: 1, total: 2 }));
    assert!(ok.is_ok());
    let rejected = futures::executor::block_on(on_order(Order { id: 1, total: 0 }));
    assert!(rejected.is_err());

    let topology = Topology::from_registry();
    let handlers: Vec<&str> = topology
        .consumers()
        .iter()
        .map(|c| c.decl.handler)
        .collect();
    let module = module_path!();
    for name in ["on_order", "on_audit", "type", "nested::on_nested"] {
        let path = format!("{module}::{name}");
        assert!(handlers.contains(&path.as_str()), "{path} in {handlers:?}");
    }
    assert!(topology.find_stream("LOCAL").is_some());
    let _ = Local;
}
