use std::rc::Rc;

use nats_topology::{HandlerError, queue_consumer};

async fn tick() {}

#[queue_consumer(stream = "ORDERS", group = "billing")]
async fn on_order(event: String) -> Result<(), HandlerError> {
    let held = Rc::new(event);
    tick().await;
    drop(held);
    Ok(())
}

fn main() {}
