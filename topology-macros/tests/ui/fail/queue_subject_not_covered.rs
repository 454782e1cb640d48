use nats_topology::{HandlerError, queue_consumer, stream};

#[stream(name = "ORDERS", subjects = ["orders.*.created", "orders.*.paid"])]
pub struct Orders;

#[queue_consumer(stream = Orders, group = "billing", subjects = ["orders.eu.created", "orders.eu.shipped"])]
async fn on_order(event: String) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

fn main() {}
