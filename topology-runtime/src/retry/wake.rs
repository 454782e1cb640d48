//! [`Wake`]: what a retry may wait for besides its backoff.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use tokio::time::Instant;

/// An event after which a retry is worth making before its backoff ends: for provisioning,
/// "a JetStream leader was elected" (see `provision::leader`). A retry given one
/// ([`Backoff::run_waking`](super::Backoff::run_waking)) waits for the event beside its backoff sleep, and beside an
/// attempt that has been in flight longer than [`Wake::in_flight_grace`] (a request sent
/// while there was no leader is never answered: it would wait out its whole timeout). After
/// the event it waits a random delay in `[0, spread]` and tries again; the full-jitter
/// backoff stays the net when no event comes.
pub trait Wake: Send + Sync {
    /// Starts waiting: the future resolves at the first event after this call. Whatever the
    /// source needs to see events (a subscription) lives while some such future does.
    fn next_event(&self) -> Pin<Box<dyn Future<Output = ()> + Send + 'static>>;
    /// The spread after an event: retries of many replicas woken by one event start over
    /// `[0, spread]` instead of at one instant.
    fn spread(&self) -> Duration;
    /// How long a first attempt may be in flight before it also waits for an event (a
    /// healthy request is answered well within it).
    fn in_flight_grace(&self) -> Duration;
    /// As [`Wake::next_event`], but also resolves at once when an event the source saw came
    /// at or after `since` (an attempt's start): an event during an attempt's grace, or
    /// while it was being answered with a failure, still ends the wait that follows. The
    /// default sees only events after the call.
    fn event_since(&self, since: Instant) -> Pin<Box<dyn Future<Output = ()> + Send + 'static>> {
        let _ = since;
        self.next_event()
    }
    /// Resolves when an attempt started at `started` and still in flight looks lost: the one
    /// decision that gives up an attempt in flight (an event that wakes a sleeping retry
    /// need not lose a request already sent). The default: an event after its first `grace`
    /// (see [`Wake::event_since`] for a source that remembers events).
    fn stalled(
        &self,
        started: Instant,
        grace: Duration,
    ) -> Pin<Box<dyn Future<Output = ()> + Send + 'static>> {
        let event = self.event_since(started);
        Box::pin(async move {
            tokio::time::sleep_until(started + grace).await;
            event.await;
        })
    }
    /// Whether the source saw an event at or after `since`, asked when an attempt started
    /// at `since` is abandoned. With an event, the attempt was lost to it (an election: the
    /// replicas it woke retry over [`Wake::spread`]). Without one, [`Wake::stalled`] gave it
    /// up as merely unanswered: it is made again at once, and the next attempt's grace
    /// doubles (up to 8 times) in case the server is slow rather than deaf. The default,
    /// `true`, fits the default [`Wake::stalled`], which resolves on events only.
    fn event_seen_since(&self, since: Instant) -> bool {
        let _ = since;
        true
    }
    /// The longest the wait after the last failure may be, when the source knows that
    /// failure clears without an event it could see (a peer rejoining the cluster): the wait
    /// is then a random delay within it instead of the backoff's (when shorter). The
    /// default, `None`: the backoff's.
    fn backoff_cap(&self) -> Option<Duration> {
        None
    }
}
