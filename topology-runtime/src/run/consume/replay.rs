//! Ordered replays (`#[broadcast(ordered)]`): one relay session reads the stream in order and
//! hands each message to the handler once, one at a time. The server delivers first
//! deliveries in stream order and numbers every delivery (its consumer sequence), so a
//! delivery whose number is not the next one means that one was lost on the way (a pull
//! response dropped with a connection). The consumer takes no acks (the session keeps its own
//! place), so the server would never deliver that one again: the session ends and its
//! supervisor deletes the consumer and creates it again after the last message handled, as an
//! ordered consumer does. A handler failure does the same after a backoff.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use super::meta::MessageMeta;

use super::loss::Loss;

/// The order checks of one ordered replay session.
pub(in crate::run) struct Replay {
    /// The consumer sequence of the last delivery received.
    last: AtomicU64,
    /// Why the session must end and restart after its last handled message, once set.
    restart: Mutex<Option<Loss>>,
}

impl Replay {
    /// A session on a consumer that has delivered `delivered` messages so far.
    pub(in crate::run) fn new(delivered: u64) -> Self {
        Replay {
            last: AtomicU64::new(delivered),
            restart: Mutex::new(None),
        }
    }

    /// Checks that the delivery `meta` describes is the one after the last one received.
    pub(in crate::run) fn received(&self, meta: &MessageMeta) -> Result<(), Loss> {
        let Some(stream_sequence) = meta.stream_sequence else {
            return Err(Loss::Replay {
                why: "a delivery without its sequence numbers arrived".to_owned(),
                at_once: true,
            });
        };
        let expected = self.last.load(Ordering::Relaxed) + 1;
        self.last.store(meta.consumer_sequence, Ordering::Relaxed);
        if meta.consumer_sequence == expected {
            return Ok(());
        }
        Err(Loss::Replay {
            why: format!(
                "delivery {} arrived where {expected} was next (stream sequence {}): a delivery \
                 was lost on the way",
                meta.consumer_sequence, stream_sequence
            ),
            at_once: true,
        })
    }

    /// The handler failed on the message at `sequence`, which it will see again first.
    pub(in crate::run) fn failed(&self, sequence: Option<u64>) {
        let at = sequence.map_or_else(String::new, |s| format!(" at stream sequence {s}"));
        let mut restart = self.restart.lock().unwrap_or_else(|e| e.into_inner());
        restart.get_or_insert(Loss::Replay {
            why: format!(
                "the handler failed on the message{at}, handled again before any later one"
            ),
            at_once: false,
        });
    }

    /// Whether the session must restart (its handler failed).
    pub(in crate::run) fn must_restart(&self) -> bool {
        self.restart
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }

    /// Why the session must restart, if it must (taken once).
    pub(in crate::run) fn take_restart(&self) -> Option<Loss> {
        self.restart
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }
}
