//! Every mistake of one attribute is reported in one build, each at its token; the item is kept
//! (no "cannot find" errors follow).

use nats_topology::{HandlerError, queue_consumer, stream};

#[stream(
    name = "orders.v2",
    subjects = ["orders..created", "orders.>"],
    replicas = 9,
    storage = "ssd",
    max_age = "7 days",
    dicard = "old",
)]
pub struct Orders;

#[queue_consumer(
    stream = Orders,
    durable = "billing",
    subject = "orders.*",
    subjects = ["orders.paid"],
    ack_wait = "0s",
    max_deliver = 1,
    backoff = ["1s", "5s"],
    concurrency = 0,
)]
fn on_order(event: String, extra: u8) -> Result<(), HandlerError> {
    let _ = (event, extra);
    Ok(())
}

fn main() {
    // Both items survive the errors.
    let _ = Orders;
    let _ = on_order;
}
