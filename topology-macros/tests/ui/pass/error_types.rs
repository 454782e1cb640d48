//! Handlers may return `anyhow::Result<()>`, `eyre::Result<()>`, or `Result<(), E>` for any `E`
//! that converts into `Box<dyn Error + Send + Sync>`; `HandlerError::permanent` still
//! dead-letters, and `?` converts `anyhow::Error` and `eyre::Report` into `HandlerError`.

use nats_topology::{Context, HandlerError, Topology, broadcast, queue_consumer};

#[queue_consumer(stream = "ORDERS", group = "anyhow")]
async fn with_anyhow(order: String) -> anyhow::Result<()> {
    anyhow::ensure!(!order.is_empty(), "empty order");
    Ok(())
}

#[queue_consumer(stream = "ORDERS", group = "eyre")]
async fn with_eyre(order: String, cx: Context) -> eyre::Result<()> {
    eyre::ensure!(cx.delivered() < 10, "order {order} delivered too often");
    Ok(())
}

#[broadcast(stream = "ORDERS", subject = "orders.status")]
async fn with_io_error(status: u64) -> Result<(), std::io::Error> {
    let _ = status;
    Ok(())
}

#[queue_consumer(stream = "ORDERS", group = "boxed")]
async fn with_boxed(order: String) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let _: u32 = order.parse()?;
    Ok(())
}

fn parse_anyhow(order: &str) -> anyhow::Result<u64> {
    Ok(order.parse()?)
}

fn parse_eyre(order: &str) -> eyre::Result<u64> {
    Ok(order.parse()?)
}

#[queue_consumer(stream = "ORDERS", group = "question_mark")]
async fn with_question_mark(order: String) -> Result<(), HandlerError> {
    let a = parse_anyhow(&order)?;
    let e = parse_eyre(&order)?;
    if a != e {
        return Err(HandlerError::permanent(anyhow::anyhow!("{a} != {e}")));
    }
    Ok(())
}

fn main() {
    let topology = Topology::from_registry();
    let handlers: Vec<_> = topology.consumers().iter().map(|c| c.decl.handler).collect();
    for name in ["with_anyhow", "with_eyre", "with_io_error", "with_boxed", "with_question_mark"] {
        let path = format!("{}::{name}", module_path!());
        assert!(handlers.contains(&path.as_str()), "{path} not registered: {handlers:?}");
    }

    // The conversions the glue relies on, and `permanent` from an `anyhow::Error`.
    let error: HandlerError = anyhow::anyhow!("boom").into();
    assert!(!error.is_permanent());
    assert_eq!(error.to_string(), "boom");
    let error: HandlerError = eyre::eyre!("bang").into();
    assert_eq!(error.to_string(), "bang");
    assert!(HandlerError::permanent(anyhow::anyhow!("no")).is_permanent());
    let _: Box<dyn std::error::Error + Send + Sync> = HandlerError::new("x").into_source();
}
