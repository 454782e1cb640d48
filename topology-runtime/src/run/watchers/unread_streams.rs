//! The streams no consumer of this service reads (it only publishes to them): ensured at
//! start, then ensured again when the stream watch (or a handler's publish) finds one gone, so
//! that publishes find them.

use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::provision::ProvisionError;
use crate::run::Inner;
use topology_core::model::StreamDecl;

/// Ensures `stream` (retrying transient failures), then ensures it again each time it is
/// found gone, until shutdown. A failure no retry fixes goes to `fatal`.
pub(in crate::run) async fn supervise_stream(
    inner: Arc<Inner>,
    stream: StreamDecl,
    cancel: CancellationToken,
    fatal: mpsc::UnboundedSender<ProvisionError>,
) {
    let shared = &inner.health.shared;
    loop {
        let mut failures = 0u32;
        let transient = |e: &ProvisionError| {
            if e.is_transient() {
                failures += 1;
                tracing::warn!(stream = stream.name, attempt = failures, error = %e, "stream not provisioned yet; retrying");
            }
            e.is_transient()
        };
        let ensured = inner
            .ensurer
            .policy()
            .backoff_until(None)
            .run(|| inner.ensurer.ensure_stream(&stream), transient);
        let result = tokio::select! {
            r = ensured => r,
            _ = cancel.cancelled() => return,
        };
        if let Err(failed) = result {
            let _ = fatal.send(failed.error);
            return;
        }
        shared.set_stream_ensured(stream.name, true);
        tokio::select! {
            _ = gone(&inner, &stream) => {}
            _ = cancel.cancelled() => return,
        }
        tracing::warn!(
            stream = stream.name,
            "the stream disappeared from the server (deleted, or lost with a server's memory storage); ensuring it again"
        );
        shared.set_stream_ensured(stream.name, false);
        inner.ensurer.forget_stream(stream.name).await;
    }
}

/// Resolves when a read of the stream says it does not exist. The stream watch (`writes`)
/// reads every declared stream every two heartbeats and wakes this when one is gone, as does a
/// handler's publish that finds no stream; a read that fails for another reason waits for the
/// next wake.
async fn gone(inner: &Inner, stream: &StreamDecl) {
    let missing = &inner.health.shared.stream_missing;
    loop {
        missing.notified().await;
        let read = inner.ensurer.provisioner().read_stream(stream.name).await;
        if let Ok(None) = read {
            return;
        }
    }
}
