//! How the sessions of a consumer that delivers one message at a time last settled its
//! messages ([`LastSettled`]): what to send again for a settlement lost with its connection
//! (`pull::unacked`), how to settle again, without calling the handler, a delivery of a
//! message handled already (`dispatch::handle`), or run before its delivery (`early_run`), and
//! which deliveries wait for a handler still running (`pump`).
//!
//! It outlives the consumer's sessions (one per supervision, see `supervise`): a session lost
//! leaves its handlers running while the next one starts, and the server, whose view of the
//! consumer may have moved on meanwhile (a leader that never heard of a delivery, an ack that
//! reached it from the old session's handler), can deliver the next session that message
//! again, or a later one of its key.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use async_nats::jetstream::AckKind;
use tokio::time::Instant;

/// How a consumer that delivers one message at a time last settled a message: its stream
/// sequence and stored time (a stream deleted and created again numbers its messages anew),
/// and how; and which messages its handlers run. After a reconnection, a settlement lost with
/// the connection is sent again (`pull::unacked`); the message it acknowledged or terminated,
/// delivered again while no handler runs it, is settled the same way without calling the
/// handler (`dispatch::handle`). A delivery waits while a handler runs its message, or one of
/// its key for a partition ([`LastSettled::waits`]).
#[derive(Clone, Default)]
pub(in crate::run) struct LastSettled(Arc<Mutex<State>>);

#[derive(Default)]
struct State {
    last: Option<Last>,
    /// A partition's messages handled before their delivery (`early`), settled when it
    /// comes: two at most wait for it (`early_run`).
    early: Vec<Last>,
    /// The messages handlers run: stream sequence (`None`: unknown) and, for a partition,
    /// stored subject (a copy costs an allocation: others have no key to compare), with the
    /// number of the handler's guard ([`Running`]).
    running: Vec<(Option<u64>, Option<async_nats::Subject>, u64)>,
    /// The number of the next handler's guard.
    next_guard: u64,
    /// A partition's: where the key is in a stored subject (`Some(None)`: unknown, any two
    /// messages may share it).
    key: Option<Option<&'static [usize]>>,
}

#[derive(Clone, Copy)]
struct Last {
    sequence: u64,
    published: Option<SystemTime>,
    how: How,
}

#[derive(Clone, Copy)]
enum How {
    /// Handled: acknowledged, or an ack that could not be sent.
    Handled,
    /// Dead-lettered: terminated, or a term that could not be sent.
    Terminated,
    /// Naked asking for `delay`, at `sent`.
    Naked { delay: Duration, sent: Instant },
}

/// How many messages handled early a session keeps until their delivery: more than may wait
/// for it at once.
const EARLY_KEPT: usize = 4;

/// What to send again for a message whose settlement was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::run) enum Again {
    Ack,
    Term,
    /// A nak, with what is left of the delay it asked for.
    Nak {
        left: Duration,
    },
}

/// A handler runs until this drops (it is dropped with a handler stopped).
pub(in crate::run) struct Running<'a>(&'a LastSettled, u64);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        let mut state = self.0.lock();
        if let Some(at) = state.running.iter().position(|(.., g)| *g == self.1) {
            state.running.swap_remove(at);
        }
    }
}

impl LastSettled {
    /// A partition's, whose key is at `key` in a stored subject (`None`: unknown).
    pub(in crate::run) fn partition(key: Option<&'static [usize]>) -> LastSettled {
        let state = State {
            key: Some(key),
            ..State::default()
        };
        LastSettled(Arc::new(Mutex::new(state)))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A handler starts on the message at `sequence`, stored under `subject`: it runs until
    /// the returned guard drops.
    pub(in crate::run) fn running(
        &self,
        sequence: Option<u64>,
        subject: &async_nats::Subject,
    ) -> Running<'_> {
        let mut state = self.lock();
        let guard = state.next_guard;
        state.next_guard += 1;
        let subject = state.key.map(|_| subject.clone());
        state.running.push((sequence, subject, guard));
        Running(self, guard)
    }

    /// Whether a delivery of the message at `sequence`, stored under `subject`, waits: a
    /// handler runs that message (a delivery of it an earlier session still handles), or, for
    /// a partition, a message of its key (delivered to an earlier session, which the server
    /// took as settled: see the module documentation).
    pub(in crate::run) fn waits(&self, sequence: Option<u64>, subject: &str) -> bool {
        let state = self.lock();
        state.running.iter().any(|(running, its_subject, _)| {
            let same_message = running.is_some() && *running == sequence;
            let same_key = match (state.key, its_subject) {
                (None, _) => false,
                (Some(Some(key)), Some(its)) => !other_key(key, subject, its.as_str()),
                (Some(_), _) => true,
            };
            same_message || same_key
        })
    }

    /// The message at `sequence`, stored at `published`, was handled (its ack sent, or not).
    pub(in crate::run) fn handled(&self, sequence: u64, published: Option<SystemTime>) {
        self.set(sequence, published, How::Handled);
    }

    /// The message at `sequence`, stored at `published`, was dead-lettered (its term sent, or
    /// not).
    pub(in crate::run) fn terminated(&self, sequence: u64, published: Option<SystemTime>) {
        self.set(sequence, published, How::Terminated);
    }

    /// The message at `sequence`, stored at `published`, was naked now, asking for `delay`.
    pub(in crate::run) fn naked(
        &self,
        sequence: u64,
        published: Option<SystemTime>,
        delay: Duration,
    ) {
        let sent = Instant::now();
        self.set(sequence, published, How::Naked { delay, sent });
    }

    /// The message at `sequence`, stored at `published`, was handled before its delivery:
    /// its delivery is acknowledged without calling the handler again.
    pub(in crate::run) fn handled_early(&self, sequence: u64, published: Option<SystemTime>) {
        let mut state = self.lock();
        if state.early.len() >= EARLY_KEPT {
            state.early.remove(0);
        }
        state.early.push(Last {
            sequence,
            published,
            how: How::Handled,
        });
    }

    /// Whether the message at `sequence`, stored at `published`, was handled before its
    /// delivery and not settled since.
    pub(in crate::run) fn ran_early(&self, sequence: u64, published: Option<SystemTime>) -> bool {
        let state = self.lock();
        (state.early.iter()).any(|l| l.sequence == sequence && l.published == published)
    }

    fn set(&self, sequence: u64, published: Option<SystemTime>, how: How) {
        let mut state = self.lock();
        state.last = Some(Last {
            sequence,
            published,
            how,
        });
        state.early.retain(|early| early.sequence > sequence);
    }

    /// If the last message settled was the one at `sequence` stored at `published`: what to
    /// send again.
    pub(in crate::run) fn again(
        &self,
        sequence: u64,
        published: Option<SystemTime>,
    ) -> Option<Again> {
        let state = self.lock();
        let is = |last: &Last| last.sequence == sequence && last.published == published;
        let last = state.last.iter().chain(&state.early).find(|l| is(l))?;
        Some(match last.how {
            How::Handled => Again::Ack,
            How::Terminated => Again::Term,
            How::Naked { delay, sent } => Again::Nak {
                left: delay.saturating_sub(sent.elapsed()),
            },
        })
    }

    /// How to settle a redelivery of the message at `sequence` stored at `published` without
    /// calling its handler: as it was settled last, if it was handled or dead-lettered, and no
    /// handler of the session runs it (one that runs could be running another delivery of it,
    /// which the settlement would cut short, freeing the consumer's next message beside it).
    pub(in crate::run) fn settle_again(
        &self,
        sequence: u64,
        published: Option<SystemTime>,
    ) -> Option<AckKind> {
        let runs_it = (self.lock().running.iter()).any(|(s, ..)| s.is_none_or(|s| s == sequence));
        if runs_it {
            return None;
        }
        match self.again(sequence, published)? {
            Again::Ack => Some(AckKind::Ack),
            Again::Term => Some(AckKind::Term),
            Again::Nak { .. } => None,
        }
    }
}

/// Whether the stored subjects `a` and `b` differ at a token of the key, at `key`: their
/// messages have different keys.
pub(in crate::run) fn other_key(key: &[usize], a: &str, b: &str) -> bool {
    key.iter()
        .any(|&at| a.split('.').nth(at) != b.split('.').nth(at))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_last_settlement_tells_what_to_send_again_for_its_message_alone_and_when() {
        let at = |ms| Some(SystemTime::UNIX_EPOCH + Duration::from_millis(ms));
        let last = LastSettled::default();
        assert_eq!(last.again(7, at(1)), None, "nothing settled yet");
        last.naked(7, at(1), Duration::from_secs(60));
        tokio::time::advance(Duration::from_secs(10)).await;
        assert_eq!(
            last.again(7, at(1)),
            Some(Again::Nak {
                left: Duration::from_secs(50)
            })
        );
        assert_eq!(last.again(8, at(1)), None, "another message's");
        assert_eq!(
            last.again(7, at(2)),
            None,
            "the same sequence stored at another time: a stream created again"
        );
        tokio::time::advance(Duration::from_secs(60)).await;
        assert_eq!(
            last.again(7, at(1)),
            Some(Again::Nak {
                left: Duration::ZERO
            }),
            "its delay is over"
        );
        assert!(
            last.settle_again(7, at(1)).is_none(),
            "a nak is not settled again"
        );
        last.handled(8, at(3));
        assert_eq!(last.again(7, at(1)), None, "no longer the last settled");
        assert_eq!(last.again(8, at(3)), Some(Again::Ack));
        assert!(matches!(last.settle_again(8, at(3)), Some(AckKind::Ack)));
        let subject = async_nats::Subject::from("orders.1.paid");
        let running = last.running(Some(8), &subject);
        assert!(
            last.settle_again(8, at(3)).is_none(),
            "not while a handler of the session runs it"
        );
        let other = last.running(Some(12), &subject);
        drop(running);
        assert!(
            matches!(last.settle_again(8, at(3)), Some(AckKind::Ack)),
            "while a handler of the session runs another message"
        );
        drop(other);
        last.terminated(9, at(4));
        assert_eq!(last.again(9, at(4)), Some(Again::Term));
        assert!(matches!(last.settle_again(9, at(4)), Some(AckKind::Term)));
    }

    #[test]
    fn a_delivery_waits_while_a_handler_runs_its_message_or_a_partitions_its_key() {
        let subject = |s: &'static str| async_nats::Subject::from(s);
        let queue = LastSettled::default();
        let running = queue.running(Some(8), &subject("orders.1.paid"));
        assert!(queue.waits(Some(8), "orders.1.paid"), "its message runs");
        assert!(
            !queue.waits(Some(9), "orders.1.paid"),
            "not a partition: keys do not count"
        );
        drop(running);
        assert!(!queue.waits(Some(8), "orders.1.paid"), "it ended");
        // `{{partition(16,1)}}.orders.{{wildcard(1)}}.paid`, keyed by the wildcard.
        let partition = LastSettled::partition(Some(&[2]));
        let running = partition.running(Some(8), &subject("3.orders.m1.paid"));
        assert!(partition.waits(Some(9), "3.orders.m1.paid"), "its key runs");
        assert!(!partition.waits(Some(9), "3.orders.m2.paid"), "another key");
        drop(running);
        assert!(!partition.waits(Some(9), "3.orders.m1.paid"), "it ended");
        let unknown = LastSettled::partition(None);
        let _running = unknown.running(Some(8), &subject("3.orders.m1.paid"));
        assert!(
            unknown.waits(Some(9), "3.orders.m2.paid"),
            "the key unknown: any runs"
        );
    }

    #[test]
    fn keys_differ_only_at_their_tokens() {
        // `{{partition(16,1)}}.orders.{{wildcard(1)}}.{{wildcard(2)}}`, keyed by the first.
        let key = [2];
        assert!(!other_key(&key, "3.orders.m1.paid", "3.orders.m1.refunded"));
        assert!(other_key(&key, "3.orders.m1.paid", "3.orders.m2.paid"));
        // Keyed by both, named in the other order.
        let key = [3, 2];
        assert!(!other_key(&key, "3.orders.m1.paid", "3.orders.m1.paid"));
        assert!(other_key(&key, "3.orders.m1.paid", "3.orders.m1.refunded"));
        // A subject too short to have the token is no proof of another key.
        assert!(!other_key(&[9], "3.orders", "3.orders"));
    }
}
