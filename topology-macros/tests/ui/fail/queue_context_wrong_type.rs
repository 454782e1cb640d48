use nats_topology::{Context, HandlerError, queue_consumer};

#[queue_consumer(stream = "ORDERS", group = "billing")]
async fn on_order(order: String, cx: &Context) -> Result<(), HandlerError> {
    let _ = (order, cx.subject());
    Ok(())
}

fn main() {}
