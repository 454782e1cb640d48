use nats_topology::queue_consumer;

#[queue_consumer(stream = "ORDERS", group = "billing")]
async fn on_order(order: String) -> Result<(), u32> {
    let _ = order;
    Ok(())
}

#[queue_consumer(stream = "ORDERS", group = "shipping")]
async fn on_order_shipped(order: String) -> Result<u64, std::io::Error> {
    let _ = order;
    Ok(1)
}

fn main() {}
