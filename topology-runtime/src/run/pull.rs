//! A pull consumer read through our own pull requests, so that the server is never asked for
//! more messages than this instance can start.

use std::collections::VecDeque;
use std::time::Duration;

use async_nats::jetstream::{self, consumer};
use futures::{FutureExt, StreamExt};

use super::Settings;

/// A pull consumer read through our own pull requests on one inbox, so that the server is
/// never asked for more messages than this instance can start: async-nats's `messages()`
/// pulls a new batch when half of the last one arrived, which fetches up to a batch more than
/// can be handled; those messages wait in the client while their `ack_wait` runs out, then
/// are delivered again (and handled twice), or are stranded by a drain until `ack_wait`.
///
/// Server statuses on the inbox: 100 idle heartbeat (liveness), 408 a request expired, 409 a
/// request ended (the consumer was deleted, a leader changed, a limit was exceeded), 503 no
/// responders (the consumer or JetStream is unavailable). The 408/409 of a request carry how
/// many of its messages it did not deliver (`Nats-Pending-Messages`).
pub(super) struct Puller {
    client: async_nats::Client,
    context: jetstream::Context,
    subject: String,
    inbox: async_nats::Subject,
    subscriber: async_nats::Subscriber,
    /// The most one request asks for.
    batch: usize,
    expires: Duration,
    heartbeat: Duration,
    /// Open pull requests, oldest first (the server serves and expires them in that order).
    requests: VecDeque<PullRequest>,
    /// When the server last sent anything to the inbox, or when a request was sent while none
    /// was open: the start of the silence that missed heartbeats measure.
    heard: tokio::time::Instant,
    /// The connection the open requests were sent on (server id, client id), checked at
    /// every tick of `reconnect_check`: a restarted server lost the open requests, so the
    /// feed asks again at once instead of waiting for missed heartbeats.
    connection: (String, u64),
    reconnect_check: tokio::time::Interval,
    /// How long [`Puller::close`] waits for messages already on their way.
    close_wait: Duration,
    /// Messages that arrived while [`Puller::start`] confirmed its first request, not yet
    /// handed out.
    arrived: VecDeque<jetstream::Message>,
}

fn connection_of(client: &async_nats::Client) -> (String, u64) {
    let info = client.server_info();
    (info.server_id, info.client_id)
}

struct PullRequest {
    /// Messages it may still deliver.
    remaining: usize,
    /// When the server ends it.
    expires_at: tokio::time::Instant,
}

/// How long [`Puller::start`] keeps asking while its requests find no responder. A consumer
/// that was just created, when another instance's create found it, is answered before its
/// leader is known to every node: on a 3-node cluster its first pull requests get a 503 for
/// 10 to 40 ms. It was found a moment ago, so a refusal here means a leader to wait for, not
/// a missing consumer; the window leaves room for a slow election on a loaded cluster.
const REACH_WINDOW: Duration = Duration::from_secs(5);

/// The idle heartbeat of a session's first pull request: the longest the consumer takes to
/// answer it when it has nothing to deliver.
const FIRST_HEARTBEAT: Duration = Duration::from_millis(50);

/// The expiry of a session's first pull request (the server wants at least two heartbeats):
/// the requests that follow it are the usual ones.
const FIRST_EXPIRES: Duration = Duration::from_millis(100);

/// Missed idle heartbeats (of two heartbeat intervals each, as async-nats counts them) after
/// which the consumer, its stream or the server is presumed lost and ensured again.
const MISSED_HEARTBEATS: u32 = 3;

impl Puller {
    /// Starts pulling from the consumer `info` describes, sending pull requests under
    /// `api_prefix` (the runtime's JetStream domain or API prefix, e.g. `$JS.API`). Returns
    /// once the consumer holds a first request (see [`Puller::reach`]), so that a consumer
    /// reported running is one the server delivers to.
    pub(super) async fn start(
        client: &async_nats::Client,
        context: jetstream::Context,
        api_prefix: &str,
        info: &consumer::Info,
        batch: usize,
        settings: &Settings,
    ) -> Result<Puller, String> {
        let inbox = async_nats::Subject::from(client.new_inbox());
        let subscriber = client
            .subscribe(inbox.clone())
            .await
            .map_err(|e| format!("could not subscribe to the pull inbox: {e}"))?;
        let expires = settings.expires.max(Duration::from_millis(100));
        let mut puller = Puller {
            client: client.clone(),
            context,
            subject: format!(
                "{api_prefix}.CONSUMER.MSG.NEXT.{}.{}",
                info.stream_name, info.name
            ),
            inbox,
            subscriber,
            batch: batch.max(1),
            expires,
            // The server refuses a heartbeat longer than half the expiry.
            heartbeat: settings
                .heartbeat
                .min(expires / 2)
                .max(Duration::from_millis(10)),
            requests: VecDeque::new(),
            heard: tokio::time::Instant::now(),
            connection: connection_of(client),
            reconnect_check: {
                let mut every = tokio::time::interval(settings.reconnect_check);
                every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                every
            },
            close_wait: settings.pull_close_wait,
            arrived: VecDeque::new(),
        };
        puller.reach(REACH_WINDOW).await?;
        Ok(puller)
    }

    /// Confirms that the consumer takes this instance's pull requests: sends a first request
    /// that expires after [`FIRST_EXPIRES`] with idle heartbeats every [`FIRST_HEARTBEAT`],
    /// which the consumer answers within a heartbeat whatever its state (with messages, or a
    /// heartbeat when it has none to give: idle, paused, or at its `max_ack_pending`) and the
    /// server refuses with a 503 while no responder is known. Refused requests are sent again
    /// after a short pause (5 ms, doubling up to 250 ms) for at most `window`; messages
    /// delivered meanwhile wait in `arrived`.
    ///
    /// The answer travels the path every later request takes and needs no permission beyond
    /// pulling (a marker published to our own inbox would need echo on and a publish
    /// permission on the inbox). A `no_wait` request would be answered at once only while
    /// the consumer can deliver: at its `max_ack_pending` it is held until an ack frees room.
    async fn reach(&mut self, window: Duration) -> Result<(), String> {
        let until = tokio::time::Instant::now() + window;
        let mut pause = Duration::from_millis(5);
        loop {
            self.send(self.batch, FIRST_EXPIRES, FIRST_HEARTBEAT)
                .await?;
            let first = match tokio::time::timeout_at(until, self.subscriber.next()).await {
                Ok(Some(message)) => message,
                Ok(None) => return Err("the pull subscription ended".to_owned()),
                // Unanswered, not refused: the request or its answer is slow or lost, which
                // the heartbeats of the requests that follow watch like any other silence.
                Err(_) => {
                    self.requests.clear();
                    return Ok(());
                }
            };
            self.heard = tokio::time::Instant::now();
            if first.status != Some(async_nats::StatusCode::NO_RESPONDERS) {
                if let Some(message) = self.receive(first)? {
                    self.arrived.push_back(message);
                }
                return Ok(());
            }
            self.requests.pop_front();
            if tokio::time::Instant::now() + pause >= until {
                return Err(format!(
                    "no responders to the pull requests for {window:?}: the consumer, its stream or JetStream is unavailable"
                ));
            }
            tracing::debug!(subject = %self.subject, ?pause, "no responder to the first pull request yet; asking again");
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(250));
        }
    }

    /// The most one request asks for.
    pub(super) fn batch(&self) -> usize {
        self.batch
    }

    fn requested(&self) -> usize {
        self.requests.iter().map(|r| r.remaining).sum()
    }

    /// Asks for what `room` allows beyond what is already asked for, in requests of at most a
    /// batch: at once when nothing is asked for, else once half a batch can be asked for (not a
    /// request per finished handler).
    async fn top_up(&mut self, room: usize) -> Result<(), String> {
        loop {
            let asked = self.requested();
            let want = room.saturating_sub(asked).min(self.batch);
            if want == 0 || (asked > 0 && want < self.batch.div_ceil(2)) {
                return Ok(());
            }
            self.send(want, self.expires, self.heartbeat).await?;
        }
    }

    /// Sends a pull request for `want` messages that the server ends after `expires`, with
    /// idle heartbeats every `heartbeat` meanwhile.
    async fn send(
        &mut self,
        want: usize,
        expires: Duration,
        heartbeat: Duration,
    ) -> Result<(), String> {
        let nanos = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let request = serde_json::json!({
            "batch": want,
            "expires": nanos(expires),
            "idle_heartbeat": nanos(heartbeat),
        });
        let payload = bytes::Bytes::from(request.to_string());
        self.client
            .publish_with_reply(self.subject.clone(), self.inbox.clone(), payload)
            .await
            .map_err(|e| format!("could not send a pull request: {e}"))?;
        let now = tokio::time::Instant::now();
        if self.requests.is_empty() {
            self.heard = now;
        }
        self.requests.push_back(PullRequest {
            remaining: want,
            expires_at: now + expires,
        });
        Ok(())
    }

    pub(super) async fn next(&mut self, room: usize) -> Result<jetstream::Message, String> {
        if let Some(message) = self.arrived.pop_front() {
            return Ok(message);
        }
        loop {
            self.top_up(room).await?;
            // What has arrived already needs no timer.
            if let Some(arrived) = self.subscriber.next().now_or_never() {
                self.heard = tokio::time::Instant::now();
                match arrived {
                    Some(message) => match self.receive(message)? {
                        Some(message) => return Ok(message),
                        None => continue,
                    },
                    None => return Err("the pull subscription ended".to_owned()),
                }
            }
            let silence = self.heartbeat * 2 * MISSED_HEARTBEATS;
            // A request the server should have ended by now (with a 408) was lost with a
            // server restart or a connection loss: forget it, and ask again.
            let margin = (self.heartbeat * 2).max(Duration::from_secs(1));
            let overdue = self.requests.front().map(|r| r.expires_at + margin);
            let open = !self.requests.is_empty();
            tokio::select! {
                biased;
                message = self.subscriber.next() => {
                    self.heard = tokio::time::Instant::now();
                    match message {
                        Some(message) => {
                            if let Some(message) = self.receive(message)? {
                                return Ok(message);
                            }
                        }
                        None => return Err("the pull subscription ended".to_owned()),
                    }
                }
                _ = tokio::time::sleep_until(self.heard + silence), if open => {
                    return Err(format!(
                        "{MISSED_HEARTBEATS} idle heartbeats missed (nothing from the server for {silence:?})"
                    ));
                }
                _ = tokio::time::sleep_until(overdue.unwrap_or_else(tokio::time::Instant::now)), if overdue.is_some() => {
                    let now = tokio::time::Instant::now();
                    self.requests.retain(|r| r.expires_at + margin > now);
                }
                _ = self.reconnect_check.tick() => {
                    let connection = connection_of(&self.client);
                    if connection != self.connection {
                        // Reconnected: a restarted server lost the open requests (a server
                        // that kept them delivers a little ahead; those messages wait here).
                        tracing::debug!(subject = %self.subject, "reconnected; pulling again");
                        self.connection = connection;
                        self.requests.clear();
                        self.heard = tokio::time::Instant::now();
                    }
                }
            }
        }
    }

    /// Accounts for one thing the server sent to the inbox: a message is returned; a status
    /// updates the open requests, or reports the consumer lost.
    fn receive(
        &mut self,
        message: async_nats::Message,
    ) -> Result<Option<jetstream::Message>, String> {
        use async_nats::StatusCode;
        let status = message.status.unwrap_or(StatusCode::OK);
        if status == StatusCode::OK {
            if let Some(front) = self.requests.front_mut() {
                front.remaining -= 1;
                if front.remaining == 0 {
                    self.requests.pop_front();
                }
            }
            return Ok(Some(jetstream::Message {
                message,
                context: self.context.clone(),
            }));
        }
        if status == StatusCode::IDLE_HEARTBEAT {
            return Ok(None);
        }
        if status == StatusCode::NO_RESPONDERS {
            return Err("no responders to the pull request: the consumer, its stream or JetStream is unavailable".to_owned());
        }
        let description = message.description.as_deref().unwrap_or_default();
        if description == "Consumer Deleted"
            || description == "Consumer is push based"
            || description.starts_with("Exceeded MaxRequest")
        {
            return Err(format!("pull request ended: {status} {description}"));
        }
        let ended_one = message
            .headers
            .as_ref()
            .is_some_and(|h| h.get("Nats-Pending-Messages").is_some());
        if ended_one || status == StatusCode::TIMEOUT || status == StatusCode::NOT_FOUND {
            // The oldest open request ended (expired, or ended by the server) without
            // delivering the rest of its batch.
            self.requests.pop_front();
        } else if description.starts_with("Exceeded MaxWaiting") {
            // The newest request was refused.
            self.requests.pop_back();
        } else {
            // Asking again at once could repeat the refusal in a hot loop: let the supervisor
            // ensure the consumer again, with its backoff.
            return Err(format!(
                "unexpected answer to a pull request: {status} {description}"
            ));
        }
        Ok(None)
    }

    /// Unsubscribes, so the server stops delivering to the open requests (it drops requests
    /// nobody listens to), and returns what arrived but was not handed out, including what
    /// arrives before the unsubscription takes effect.
    pub(super) async fn close(mut self) -> Vec<jetstream::Message> {
        let mut unstarted: Vec<_> = self.arrived.drain(..).collect();
        while let Some(Some(message)) = self.subscriber.next().now_or_never() {
            if let Ok(Some(message)) = self.receive(message) {
                unstarted.push(message);
            }
        }
        if self.requests.is_empty() {
            // Nothing is asked for: nothing more can arrive.
            return unstarted;
        }
        if self.subscriber.drain().await.is_err() {
            return unstarted;
        }
        let deadline = tokio::time::Instant::now() + self.close_wait;
        while let Ok(Some(message)) =
            tokio::time::timeout_at(deadline, self.subscriber.next()).await
        {
            if let Ok(Some(message)) = self.receive(message) {
                unstarted.push(message);
            }
        }
        unstarted
    }
}
