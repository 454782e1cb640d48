//! The `Nats-Msg-Id` of a handler's publishes and dead letters, derived from the message being
//! handled so that every delivery of one message publishes under the same ids (see
//! [deduplicated outputs](super::Context#deduplicated-outputs)).

use super::{Context, Scope};

impl Context {
    /// The id derived for the `n`-th publish (from 1) of this handler call: the stream, its
    /// instance (a stream deleted and created again numbers from 1 again), the stream
    /// sequence, the consumer, and `n`. `None` when the delivery carried no metadata.
    pub(super) fn derived_msg_id(&self, n: u32) -> Option<String> {
        let sequence = self.received.stream_sequence;
        (sequence > 0).then(|| msg_id(&self.scope, sequence, n))
    }
}

/// The `Nats-Msg-Id` of the `n`-th publish for the message at `sequence` of `scope`'s
/// stream, handled by `scope`'s consumer (also used for dead letters, with `n` = 0).
pub(crate) fn msg_id(scope: &Scope, sequence: u64, n: u32) -> String {
    format!(
        "nt:{}:{}:{}:{}:{}",
        scope.stream, scope.stream_epoch, sequence, scope.consumer, n
    )
}

/// A short, stable token for a stream instance's creation time.
pub(crate) fn stream_epoch(created: &str) -> String {
    format!("{:016x}", crate::hash::fnv1a(created.as_bytes()))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_stream_epoch_does_not_change() {
        // Part of every derived message id already stored in duplicate windows.
        assert_eq!(
            super::stream_epoch("2024-05-01T12:00:00.123456789Z"),
            "af61c665b4e6b7c9"
        );
    }
}
