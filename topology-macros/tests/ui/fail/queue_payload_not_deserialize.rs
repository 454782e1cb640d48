use nats_topology::{HandlerError, queue_consumer};

pub struct Order {
    pub id: u64,
}

#[queue_consumer(stream = "ORDERS", group = "billing")]
async fn on_order(order: Order) -> Result<(), HandlerError> {
    let _ = order.id;
    Ok(())
}

fn main() {}
