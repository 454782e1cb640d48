//! Refused: each priority key only with its policy (thresholds with overflow, the ttl with a
//! pinned client), and none without a policy; a bad policy name; priority on a push consumer.

use nats_topology::{HandlerError, queue_consumer};

#[queue_consumer(stream = "S", group = "a", priority = "pinned_client", pinned_ttl = "5s", min_pending = 10)]
async fn pinned_with_threshold(event: String) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

#[queue_consumer(stream = "S", group = "b", priority = "overflow", min_ack_pending = 10, pinned_ttl = "5s")]
async fn overflow_with_ttl(event: String) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

#[queue_consumer(stream = "S", group = "c", min_pending = 10)]
async fn threshold_without_policy(event: String) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

#[queue_consumer(stream = "S", group = "d", priority = "pinned")]
async fn unknown_policy(event: String) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

#[queue_consumer(stream = "S", group = "e", delivery = "push", priority = "pinned_client", pinned_ttl = "5s")]
async fn on_push(event: String) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

#[queue_consumer(stream = "S", group = "f", priority = "overflow", min_pending = 0)]
async fn zero_threshold(event: String) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

fn main() {}
