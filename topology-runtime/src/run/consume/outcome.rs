//! How each message ended ([`Outcome`], returned by `dispatch`), and the one place that
//! accounts for it ([`Observer`]): health counters, metrics, and where the consumer resumes
//! after a loss (a queue consumer's settled sequences, a relay's progress).

use std::sync::Arc;
use std::time::Duration;

use super::resume::Record;
use super::settled::LastSettled;
use crate::health::Slot;
use crate::telemetry::{ConsumerMetrics, Running};

/// How one message ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::run) enum Outcome {
    /// The handler succeeded; `acked`: its ack was sent (with confirmed acks: confirmed).
    /// Unacked, the server delivers it again after `ack_wait`.
    Handled { acked: bool },
    /// The handler failed and the message is delivered again after `delay`; `naked`: the nak
    /// was sent (if not, the server delivers it again after `ack_wait`).
    Retried { delay: Duration, naked: bool },
    /// The handler failed for good (a permanent error or its last delivery): dead-lettered
    /// when a dead-letter subject is declared, then terminated; `terminated`: the term was sent.
    DeadLettered { terminated: bool },
    /// Failed for good, but the dead letter could not be published: on its `last` delivery
    /// the message stays unacknowledged and is not delivered again; otherwise it was naked to
    /// be delivered (and dead-lettered) again.
    DeadLetterUnpublished { last: bool },
}

impl Outcome {
    /// Whether the message is done with: never handled here again (whatever the server does
    /// with an ack that did not arrive). A relay resumes after such messages.
    pub(in crate::run) fn done(self) -> bool {
        match self {
            Outcome::Handled { .. } | Outcome::DeadLettered { .. } => true,
            Outcome::DeadLetterUnpublished { last } => last,
            Outcome::Retried { .. } => false,
        }
    }

    /// Records how the message at `sequence`, stored at `published`, was settled, for a
    /// consumer that delivers one message at a time (`last`; see [`LastSettled`]).
    pub(in crate::run) fn record_in(
        self,
        last: Option<&LastSettled>,
        (sequence, published): (Option<u64>, Option<std::time::SystemTime>),
    ) {
        let (Some(last), Some(sequence)) = (last, sequence) else {
            return;
        };
        match self {
            Outcome::Handled { .. } => last.handled(sequence, published),
            Outcome::DeadLettered { .. } => last.terminated(sequence, published),
            Outcome::Retried { delay, naked: true } => last.naked(sequence, published, delay),
            Outcome::Retried { naked: false, .. } | Outcome::DeadLetterUnpublished { .. } => {}
        }
    }

    /// Whether the server recorded the message as settled by this instance (acknowledged or
    /// terminated): a queue consumer resumes after such messages.
    fn settled(self) -> bool {
        matches!(
            self,
            Outcome::Handled { acked: true } | Outcome::DeadLettered { terminated: true }
        )
    }
}

/// Accounts for one consumer's messages as they start and end.
pub(in crate::run) struct Observer {
    pub(in crate::run) slot: Arc<Slot>,
    /// Telemetry: counters, duration, in flight (the `metrics` facade).
    pub(in crate::run) metrics: ConsumerMetrics,
    pub(in crate::run) record: Record,
}

impl Observer {
    /// A handler starts on the `delivered`-th delivery of the message at `sequence`: it is in
    /// flight until the returned guard drops.
    pub(in crate::run) fn started(&self, sequence: Option<u64>, delivered: u64) -> Running<'_> {
        if let (Record::Relay(progress), Some(sequence)) = (&self.record, sequence) {
            progress.started(sequence);
        }
        self.metrics.start(delivered)
    }

    /// Whether a relay's session is past `sequence`: it handled it or a later one (or began
    /// after it). Exact for a relay that handles one message at a time (a `#[kv_watch]`).
    pub(in crate::run) fn handled_past(&self, sequence: Option<u64>) -> bool {
        match (&self.record, sequence) {
            (Record::Relay(progress), Some(sequence)) => progress.handled_past(sequence),
            _ => false,
        }
    }

    /// A partition's message handled before its delivery was settled on delivery.
    pub(in crate::run) fn early(&self) {
        Slot::count(&self.slot.early);
        self.metrics.early();
    }

    /// The message at `sequence` ended so.
    pub(in crate::run) fn ended(&self, sequence: Option<u64>, outcome: Outcome) {
        let (slot, metrics) = (&self.slot, &self.metrics);
        match outcome {
            Outcome::Handled { acked: true } => {
                Slot::count(&slot.handled);
                metrics.handled();
            }
            Outcome::Handled { acked: false } => metrics.ack_failed(),
            Outcome::Retried { naked, .. } => {
                Slot::count(&slot.failed);
                metrics.failed();
                if naked {
                    Slot::count(&slot.retried);
                    metrics.retried();
                }
            }
            Outcome::DeadLettered { terminated } => {
                Slot::count(&slot.failed);
                metrics.failed();
                if terminated {
                    Slot::count(&slot.dead_lettered);
                    metrics.dead_lettered();
                } else {
                    metrics.ack_failed();
                }
            }
            Outcome::DeadLetterUnpublished { .. } => {
                Slot::count(&slot.failed);
                metrics.failed();
            }
        }
        let Some(sequence) = sequence else {
            return;
        };
        match &self.record {
            Record::Queue(settled) if outcome.settled() => settled.record(sequence),
            Record::Relay(progress) if outcome.done() => progress.settled(sequence),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queue_consumer_resumes_after_what_the_server_recorded() {
        let settled = |o: Outcome| o.settled();
        assert!(settled(Outcome::Handled { acked: true }));
        assert!(settled(Outcome::DeadLettered { terminated: true }));
        assert!(!settled(Outcome::Handled { acked: false }));
        assert!(!settled(Outcome::DeadLettered { terminated: false }));
        assert!(!settled(Outcome::DeadLetterUnpublished { last: true }));
        assert!(!settled(Outcome::Retried {
            delay: Duration::ZERO,
            naked: true
        }));
    }

    #[test]
    fn a_relay_resumes_after_what_is_never_handled_here_again() {
        assert!(Outcome::Handled { acked: false }.done());
        assert!(Outcome::DeadLettered { terminated: false }.done());
        assert!(Outcome::DeadLetterUnpublished { last: true }.done());
        assert!(
            !Outcome::DeadLetterUnpublished { last: false }.done(),
            "naked to be dead-lettered again: it comes back"
        );
        assert!(
            !Outcome::Retried {
                delay: Duration::ZERO,
                naked: false
            }
            .done()
        );
    }
}
