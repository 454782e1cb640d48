//! Refused: the shapes an ordered replay cannot take. It handles one message at a time in
//! stream order (no `concurrency` above 1), rebuilds from what the stream holds (`deliver`
//! is `"all"` or `"last_per_subject"`), and is per instance (no `ordered` on a queue
//! consumer, whose messages are shared out).

use nats_topology::{broadcast, queue_consumer, stream, HandlerError};

#[stream(name = "LEDGER", subjects = ["ledger.>"])]
pub struct Ledger;

#[broadcast(stream = Ledger, subject = "ledger.>", ordered, concurrency = 4)]
async fn concurrent(entry: String) -> Result<(), HandlerError> {
    let _ = entry;
    Ok(())
}

#[broadcast(stream = Ledger, subject = "ledger.>", ordered, deliver = "new")]
async fn only_new(entry: String) -> Result<(), HandlerError> {
    let _ = entry;
    Ok(())
}

#[broadcast(stream = Ledger, subject = "ledger.>", ordered = "yes")]
async fn with_a_value(entry: String) -> Result<(), HandlerError> {
    let _ = entry;
    Ok(())
}

#[queue_consumer(stream = Ledger, group = "ledger", subject = "ledger.>", ordered)]
async fn shared(entry: String) -> Result<(), HandlerError> {
    let _ = entry;
    Ok(())
}

fn main() {}
