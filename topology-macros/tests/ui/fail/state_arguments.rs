//! Refused: application state not wrapped in `State<..>`; a `State` of a type that cannot be
//! shared between threads.

use std::cell::Cell;

use nats_topology::{Context, HandlerError, State, queue_consumer};

pub struct Db;

#[queue_consumer(stream = "ORDERS", group = "billing")]
async fn on_order(order: String, cx: Context, db: Db) -> Result<(), HandlerError> {
    let _ = (order, cx, db);
    Ok(())
}

#[queue_consumer(stream = "ORDERS", group = "shipping")]
async fn on_shipped(order: String, counter: State<Cell<u32>>) -> Result<(), HandlerError> {
    let _ = (order, counter.get());
    Ok(())
}

fn main() {}
