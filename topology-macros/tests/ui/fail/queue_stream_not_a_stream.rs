use nats_topology::{HandlerError, queue_consumer};

pub struct Orders;

#[queue_consumer(stream = Orders, group = "billing")]
async fn on_order(event: String) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

fn main() {}
