//! The [`Wake`] the provisioning retries of one stream (or one of its consumers) are given.

use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::time::Duration;

use async_nats::jetstream;
use tokio::time::Instant;

use super::LeaderWatch;
use super::waking::Wake;

/// The [`Wake`] of one stream's provisioning retries.
pub(crate) struct StreamWake<'a> {
    watch: &'a LeaderWatch,
    stream: &'a str,
    /// The stream's consumer the retries are for, when they are for one.
    consumer: Option<&'a str>,
    /// Since when the attempts fail for want of a peer (10005), if the last one did.
    peer_missing_since: Mutex<Option<Instant>>,
}

impl<'a> StreamWake<'a> {
    pub(super) fn new(watch: &'a LeaderWatch, stream: &'a str, consumer: Option<&'a str>) -> Self {
        StreamWake {
            watch,
            stream,
            consumer,
            peer_missing_since: Mutex::new(None),
        }
    }

    /// Records why the last attempt failed (transiently): see
    /// [`LeaderTimings::peer_poll`](super::LeaderTimings::peer_poll).
    pub(crate) fn failed(&self, cause: &crate::provision::error::ApiError) {
        let mut since = self.peer_missing_since.lock().unwrap();
        if cause.code() == Some(jetstream::ErrorCode::CLUSTER_NO_PEERS) {
            since.get_or_insert_with(Instant::now);
        } else {
            *since = None;
        }
    }
}

impl Wake for StreamWake<'_> {
    fn next_event(&self) -> Pin<Box<dyn Future<Output = ()> + Send + 'static>> {
        Box::pin(self.watch.next_election(self.stream, self.consumer))
    }

    fn event_since(&self, since: Instant) -> Pin<Box<dyn Future<Output = ()> + Send + 'static>> {
        Box::pin(
            self.watch
                .election_since(self.stream, self.consumer, Some(since)),
        )
    }

    fn stalled(
        &self,
        started: Instant,
        grace: Duration,
    ) -> Pin<Box<dyn Future<Output = ()> + Send + 'static>> {
        Box::pin(
            self.watch
                .stalled(self.stream, self.consumer, started, grace),
        )
    }

    fn spread(&self) -> Duration {
        self.watch.inner.timings.wake_spread
    }

    fn event_seen_since(&self, since: Instant) -> bool {
        let state = self.watch.inner.state.lock().unwrap();
        state
            .lost_before(self.stream, self.consumer.is_some())
            .is_some_and(|at| at > since)
    }

    fn in_flight_grace(&self) -> Duration {
        self.watch.inner.timings.in_flight_grace
    }

    fn backoff_cap(&self) -> Option<Duration> {
        let timings = &self.watch.inner.timings;
        let since = *self.peer_missing_since.lock().unwrap();
        since
            .is_some_and(|since| since.elapsed() < timings.peer_poll_for)
            .then_some(timings.peer_poll)
    }
}
