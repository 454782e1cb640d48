//! The stream watch: reads every declared stream's info every two heartbeats (and at once
//! when a handler's publish got no acknowledgement), says when one is gone (the watch of a
//! stream no consumer reads ensures it again), and records for health, the metrics and
//! the log whether each takes writes: a leader that reaches a quorum of its replicas. A
//! stream without one takes no writes while its consumers may go on delivering what it
//! holds, so nothing else shows it.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::health::Writes;
use crate::provision::ProvisionError;
use crate::run::Inner;
use crate::telemetry;

/// Watches until `cancel` (see the module documentation).
pub(in crate::run) async fn watch_writes(inner: Arc<Inner>, cancel: CancellationToken) {
    let shared = &inner.health.shared;
    let record = &shared.writes;
    let streams: Vec<String> = record.streams().map(str::to_owned).collect();
    if streams.is_empty() {
        return;
    }
    telemetry::describe();
    // A read that takes longer than a heartbeat is an answer of its own: none.
    let patience = inner.settings.heartbeat;
    let mut ticker = tokio::time::interval(inner.settings.heartbeat * 2);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = record.wake.notified() => {}
            _ = cancel.cancelled() => return,
        }
        let provisioner = inner.ensurer.provisioner();
        let reads = streams.iter().map(|stream| async move {
            let read = tokio::time::timeout(patience, provisioner.read_stream(stream)).await;
            (stream, read)
        });
        let reads = tokio::select! {
            reads = futures::future::join_all(reads) => reads,
            _ = cancel.cancelled() => return,
        };
        for (stream, read) in reads {
            let writes = match read {
                Ok(Ok(Some(info))) => Writes::of(&info),
                // Gone: the stream's own watch (or its consumers) create it again; this read
                // is the one the watch of a stream no consumer reads waits for.
                Ok(Ok(None)) => {
                    record.forget(stream);
                    shared.stream_missing.notify_waiters();
                    continue;
                }
                // Not allowed to read it, or an answer that says something else: nothing is
                // known of its writes (a denial shows in health on its own).
                Ok(Err(error)) if !error.is_transient() => {
                    record.forget(stream);
                    continue;
                }
                Ok(Err(error)) => no_answer(&error),
                Err(_) => Writes::NoAnswer {
                    error: format!("no answer within {patience:?}"),
                },
            };
            let taken = writes.taken();
            let changed = record.record(stream, writes.clone());
            telemetry::stream_writes(stream, taken, changed.is_some());
            let Some(changed) = changed else {
                continue;
            };
            if taken {
                tracing::info!(stream, before = %changed.before, lasted = ?changed.lasted, "the stream takes writes again");
            } else {
                tracing::warn!(stream, state = %writes, "the stream takes no writes: publishes to it wait, and handlers' publishes fail after the publish retry");
            }
            shared.changed();
        }
    }
}

/// A read that failed: no answer (or one that says JetStream cannot answer now).
fn no_answer(error: &ProvisionError) -> Writes {
    Writes::NoAnswer {
        error: error.to_string(),
    }
}
