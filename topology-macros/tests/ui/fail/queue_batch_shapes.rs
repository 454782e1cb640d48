//! Refused: the shapes of a batch consumer that cannot work.

use nats_topology::{Batch, BatchError, Context, HandlerError, queue_consumer};

#[derive(serde::Deserialize)]
struct Order {}

// `batch` with a handler of single messages.
#[queue_consumer(stream = "ORDERS", group = "a", subject = "orders.a", batch = 50)]
async fn single(order: Order) -> Result<(), HandlerError> {
    let _ = order;
    Ok(())
}

// A `Batch<T>` handler without `batch`.
#[queue_consumer(stream = "ORDERS", group = "b", subject = "orders.b")]
async fn unsized_batch(orders: Batch<Order>) -> Result<(), BatchError> {
    let _ = orders;
    Ok(())
}

// A context beside the batch.
#[queue_consumer(stream = "ORDERS", group = "c", subject = "orders.c", batch = 50)]
async fn with_context(orders: Batch<Order>, cx: Context) -> Result<(), BatchError> {
    let _ = (orders, cx);
    Ok(())
}

// `batch_wait` without `batch`.
#[queue_consumer(stream = "ORDERS", group = "d", subject = "orders.d", batch_wait = "1s")]
async fn wait_alone(order: Order) -> Result<(), HandlerError> {
    let _ = order;
    Ok(())
}

// Fewer messages at once than one batch, or unacknowledged on the server.
#[queue_consumer(stream = "ORDERS", group = "e", subject = "orders.e", batch = 50, concurrency = 10)]
async fn narrow(orders: Batch<Order>) -> Result<(), BatchError> {
    let _ = orders;
    Ok(())
}

#[queue_consumer(stream = "ORDERS", group = "f", subject = "orders.f", batch = 50, max_ack_pending = 20)]
async fn starved(orders: Batch<Order>) -> Result<(), BatchError> {
    let _ = orders;
    Ok(())
}

// Out of range.
#[queue_consumer(stream = "ORDERS", group = "g", subject = "orders.g", batch = 0)]
async fn empty(orders: Batch<Order>) -> Result<(), BatchError> {
    let _ = orders;
    Ok(())
}

// A batch on a relay.
#[nats_topology::broadcast(stream = "ORDERS", subject = "orders.h", batch = 50)]
async fn relayed(orders: Batch<Order>) -> Result<(), BatchError> {
    let _ = orders;
    Ok(())
}

fn main() {}
