//! Refused: a key token the subject does not have, a key on a subject without `*`, a
//! malformed key, zero and absurd partition counts, one key without the other, what each
//! partition sets itself (priority, max_ack_pending, concurrency), and partitions on a
//! broadcast.

#![allow(unused_imports)]

use nats_topology::{HandlerError, broadcast, queue_consumer};

#[queue_consumer(stream = "O", group = "a", subject = "orders.*.paid", key = "{2}", partitions = 16)]
async fn past_the_wildcards(event: String) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

#[queue_consumer(stream = "O", group = "b", subject = "orders.paid", key = "{1}", partitions = 16)]
async fn plain_subject(event: String) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

#[queue_consumer(stream = "O", group = "c", subject = "orders.*.paid", key = "member", partitions = 16)]
async fn not_a_key(event: String) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

#[queue_consumer(stream = "O", group = "d", subject = "orders.*.paid", key = "{1}", partitions = 0)]
async fn no_partitions(event: String) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

#[queue_consumer(stream = "O", group = "e", subject = "orders.*.paid", key = "{1}", partitions = 100000)]
async fn absurd_partitions(event: String) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

#[queue_consumer(stream = "O", group = "f", subject = "orders.*.paid", key = "{1}")]
async fn key_alone(event: String) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

#[queue_consumer(
    stream = "O",
    group = "g",
    subject = "orders.*.paid",
    key = "{1}",
    partitions = 8,
    priority = "pinned_client",
    pinned_ttl = "5s",
    max_ack_pending = 10,
    concurrency = 4
)]
async fn sets_what_partitions_set(event: String) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

#[queue_consumer(stream = "O", group = "h", subject = "orders.*.paid", key = "{1}", partitions = 8, migrate_from_partitions = 4)]
async fn count_without_an_old_group(event: String) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

#[queue_consumer(stream = "O", group = "i", subject = "orders.*.paid", migrate_from = "old", migrate_from_partitions = 4)]
async fn count_on_a_plain_consumer(event: String) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

#[queue_consumer(stream = "O", group = "j", subject = "orders.*.paid", key = "{1}", partitions = 8, migrate_from = "old", migrate_from_partitions = 0)]
async fn count_out_of_range(event: String) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

#[broadcast(stream = "O", subject = "orders.*.paid", key = "{1}", partitions = 8)]
async fn broadcast_partitions(event: String) -> Result<(), HandlerError> {
    let _ = event;
    Ok(())
}

fn main() {}
