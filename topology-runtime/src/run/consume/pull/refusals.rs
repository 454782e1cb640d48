//! The server's refusals of a pull session's requests, and what the session does about them:
//! its first request, which proves that the consumer takes them (`reach`); no responder (a
//! consumer leader being elected: asked again after a pause, for at most [`REACH_WINDOW`]);
//! and a full wait list (the consumer's `max_waiting` reached by other replicas' requests:
//! refused with a 409, or dropped without a word by nats-server 2.15), which leaves this
//! replica `crowded out` until a request of its own is admitted.

use std::time::Duration;

use futures::StreamExt;
use tokio::time::Instant;

use super::super::loss::Loss;
use super::Puller;

/// Requests refused: since when, the pause before the next is sent, and when that is.
pub(super) struct Refused {
    since: Instant,
    pause: Duration,
    pub(super) again_at: Instant,
}

impl Refused {
    fn new(first: Duration) -> Refused {
        let now = Instant::now();
        Refused {
            since: now,
            pause: first,
            again_at: now,
        }
    }

    /// One more refusal: the next request waits the pause, which doubles up to `longest`.
    fn again(&mut self, longest: Duration) {
        self.again_at = Instant::now() + self.pause;
        self.pause = (self.pause * 2).min(longest);
    }
}

/// How long a session keeps asking while its requests find no responder. A consumer that was
/// just created, when another instance's create found it, is answered before its leader is
/// known to every node: on a 3-node cluster its first pull requests get a 503 for 10 to
/// 40 ms; a consumer whose leader changes refuses them until the new leader subscribes. A
/// refusal here means a leader to wait for, not a missing consumer (a deleted one ends the
/// open requests with a 409, and answers probes with "not found"); the window leaves room for
/// a slow election on a loaded cluster.
pub(super) const REACH_WINDOW: Duration = Duration::from_secs(5);

/// The first and the longest pause before a refused request is sent again.
const REFUSED_PAUSE: (Duration, Duration) = (Duration::from_millis(5), Duration::from_millis(250));

/// The first and the longest pause before a request refused for a full wait list is sent
/// again: a slot frees when another replica's request ends (it is served, or expires).
const CROWDED_PAUSE: (Duration, Duration) = (Duration::from_millis(100), Duration::from_secs(5));

/// The idle heartbeat of a session's first pull request: the longest the consumer takes to
/// answer it when it has nothing to deliver.
pub(super) const FIRST_HEARTBEAT: Duration = Duration::from_millis(50);

/// The expiry of a session's first pull request (the server wants at least two heartbeats):
/// the requests that follow it are the usual ones.
pub(super) const FIRST_EXPIRES: Duration = Duration::from_millis(100);

impl Puller {
    /// Confirms that the consumer takes this instance's pull requests: sends a first request
    /// that expires after [`FIRST_EXPIRES`] with idle heartbeats every [`FIRST_HEARTBEAT`],
    /// which the consumer answers within a heartbeat whatever its state (with messages, or a
    /// heartbeat when it has none to give: idle, paused, or at its `max_ack_pending`) and the
    /// server refuses with a 503 while no responder is known. Refused requests are sent again
    /// after a short pause ([`REFUSED_PAUSE`]) for at most `window`; messages
    /// delivered meanwhile wait in `arrived`. The answer's delay is the round trip that
    /// silence is measured beyond. The answer travels the path every later request takes,
    /// and needs no permission beyond pulling.
    pub(super) async fn reach(&mut self, window: Duration) -> Result<(), Loss> {
        let until = Instant::now() + window;
        let mut pause = REFUSED_PAUSE.0;
        loop {
            let sent = Instant::now();
            self.send(self.first, FIRST_EXPIRES, FIRST_HEARTBEAT)
                .await?;
            let first = match tokio::time::timeout_at(until, self.subscriber.next()).await {
                Ok(Some(message)) => message,
                Ok(None) => return Err(Loss::SubscriptionEnded("pull")),
                // Unanswered, not refused: the request or its answer is slow or lost, which
                // the heartbeats of the requests that follow watch like any other silence; or
                // the consumer's wait list is full, and the server dropped it without a word.
                Err(_) => {
                    self.requests.forget(|_| true);
                    // Boxed: rare, and inline its request would widen every session's start.
                    if let Some(full) =
                        Box::pin(self.liveness.wait_list_full(&self.common.client)).await
                    {
                        self.crowd(&full);
                    }
                    return Ok(());
                }
            };
            self.heard = Instant::now();
            if first.status != Some(async_nats::StatusCode::NO_RESPONDERS) {
                self.liveness
                    .measured(sent.elapsed().saturating_sub(FIRST_HEARTBEAT));
                if let Some(fetched) = self.take(first)? {
                    self.arrived.push_back(fetched);
                }
                return Ok(());
            }
            self.requests.oldest_ended();
            if Instant::now() + pause >= until {
                return Err(Loss::NoResponders(window));
            }
            tracing::debug!(subject = %self.subject, ?pause, "no responder to the first pull request yet; asking again");
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(REFUSED_PAUSE.1);
        }
    }

    /// No responder took the newest request (no consumer leader subscribes now: an election,
    /// a consumer being deleted): it is asked again after a pause; a refusal that lasts
    /// [`REACH_WINDOW`] is a lost consumer.
    pub(super) fn no_responder(&mut self) -> Result<(), Loss> {
        self.requests.newest_refused();
        let refused = self
            .refused
            .get_or_insert_with(|| Refused::new(REFUSED_PAUSE.0));
        if refused.since.elapsed() >= REACH_WINDOW {
            return Err(Loss::NoResponders(REACH_WINDOW));
        }
        refused.again(REFUSED_PAUSE.1);
        Ok(())
    }

    /// The server refused the newest request for a full wait list (`said`: its answer): asked
    /// again after a growing pause; crowded out while no request of its own waits there.
    pub(super) fn wait_list_refused(&mut self, said: &str) {
        self.requests.newest_refused();
        self.crowded
            .get_or_insert_with(|| Refused::new(CROWDED_PAUSE.0))
            .again(CROWDED_PAUSE.1);
        if self.requests.is_empty() {
            self.crowd(said);
        }
    }

    /// The consumer's wait list is full (`said`: what says so): this session's requests are
    /// refused or dropped, and nothing is delivered here until one is admitted.
    pub(super) fn crowd(&mut self, said: &str) {
        self.crowded
            .get_or_insert_with(|| Refused::new(CROWDED_PAUSE.0));
        let (stream, consumer) = &self.names;
        self.slot.crowded(Some(format!(
            "the consumer's wait list is full ({said}): the server refuses this replica's \
             pull requests (or drops them) while other replicas' requests fill `{stream}` > \
             `{consumer}`'s `max_waiting`, so nothing is delivered here; it asks again until \
             one is admitted. Declare a larger `max_waiting` on the queue consumer (more than \
             the replicas times the requests each keeps open; through `migrate_from`, since \
             the server cannot change it in place)"
        )));
    }

    /// A request of this session is admitted (something came to it): no longer crowded out.
    pub(super) fn admitted(&mut self) {
        if self.crowded.take().is_some() {
            tracing::debug!(subject = %self.subject, "a pull request was admitted to the consumer's wait list");
            self.slot.crowded(None);
        }
    }
}
