//! A pull consumer read through our own pull requests, so that the server is asked for no
//! more than the flow control (`flow`) wants.
//!
//! - [`Puller`] (here): the requests, and what they may still deliver;
//! - `refusals`: a session's first request, confirmed before the consumer is reported
//!   running, and requests refused (no responder, a full wait list: `crowded out`);
//! - `requests`: the open requests, and those forgotten while they may still deliver;
//! - `inbox`: what the server sends to the requests' inbox, and what the session makes of
//!   each (`Puller::take`: a message, or a status that updates the requests or ends the
//!   session);
//! - `priority`: the session's place in a priority group (its requests' fields, the pin);
//! - `fence`: a partition's session handles no delivery the server has moved past;
//! - `close`: how a session ends, and what it gives back;
//! - `unacked`: an ack lost with a connection, sent again (one message at a time);
//! - `liveness`: noticing silence (`stalled`), asking the consumer whether it answers,
//!   following its leader.

mod close;
mod fence;
mod grant;
mod inbox;
mod liveness;
mod priority;
mod refusals;
mod requests;
mod unacked;

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::consumer;
use futures::{FutureExt, StreamExt};
use tokio::time::Instant;

use super::ack::Fetched;
use super::flow::Flow;
use super::loss::Loss;
use crate::handler::Common;
use crate::run::Settings;
pub(in crate::run) use liveness::Watch;
use liveness::{Event, Liveness, connection_of};
pub(in crate::run) use priority::PullPriority;
use refusals::{FIRST_EXPIRES, FIRST_HEARTBEAT, REACH_WINDOW, Refused};
use requests::Requests;

/// A pull consumer read through our own pull requests on one inbox, so that the server is
/// asked for no more than the flow control wants: async-nats's `messages()` pulls a new batch
/// when half of the last one arrived, whatever the handlers' pace; those messages wait in the
/// client while their `ack_wait` runs out, then are delivered again (and handled twice), or
/// are stranded by a drain until `ack_wait`. Here what waits gets progress acks and a drain
/// hands it back.
pub(super) struct Puller {
    /// The runtime's connection and JetStream context, shared by every session.
    common: Arc<Common>,
    /// The pull request's subject, and the inbox its messages come to (cheap to clone).
    subject: async_nats::Subject,
    inbox: async_nats::Subject,
    subscriber: async_nats::Subscriber,
    /// What a session's first request asks for.
    first: usize,
    expires: Duration,
    heartbeat: Duration,
    requests: Requests,
    /// When the server last sent anything to the inbox, or when a request was sent while none
    /// was open: the start of the silence that missed heartbeats measure.
    heard: Instant,
    /// Requests refused for want of a responder (a consumer leader being elected), and
    /// because the wait list is full (`max_waiting`): since when, and when to ask again.
    refused: Option<Refused>,
    crowded: Option<Refused>,
    /// The connection the open requests were sent on (server id, client id), checked at
    /// every `reconnect_check` (when, and how often; on `next`'s one timer): a restarted
    /// server lost the open requests, so the feed asks again at once, not after heartbeats.
    connection: (String, u64),
    reconnect_check: (Instant, Duration),
    /// How long [`Puller::close`] waits for messages already on their way.
    close_wait: Duration,
    /// Messages that arrived while [`Puller::start`] confirmed its first request, not yet
    /// handed out.
    arrived: VecDeque<Fetched>,
    liveness: Liveness,
    /// The session's place in the consumer's priority group.
    priority: PullPriority,
    /// `$JS.API.CONSUMER.UNPIN.<stream>.<consumer>`: sent on close by a pinned session.
    unpin: String,
    slot: Arc<crate::health::Slot>,
    /// For the consumer's only reader (see [`Watch`]): the consumer sequence of the last
    /// delivery received (at first, of the last one the consumer made before the session).
    received: Option<u64>,
    /// A session of a consumer that delivers one message at a time (`max_ack_pending = 1`: a
    /// watch, a partition; see `unacked`): what this instance settled, and the last delivery
    /// received.
    unacked: Option<unacked::Last>,
    /// The stream and consumer names.
    names: (String, String),
    /// While the server refuses the consumer's acks or pulls: when to ask again whether the
    /// grant works (see `grant`).
    grant_check_at: Instant,
    /// A partition's session (see `fence`): what arrives after a silence, a reconnect, a new
    /// leader or a pin change is handled only once the server says it is its latest delivery.
    fence: Option<fence::Fence>,
    /// How many messages the consumer had left after the last delivery received here (its
    /// metadata's `pending`): a partition's next comes with that one's ack.
    pending_after_last: u64,
}

/// How long past its expiry an open request is taken as lost (no 408 came: a server restart
/// or a connection loss took it): two heartbeats, and at least this.
const OVERDUE_MARGIN_FLOOR: Duration = Duration::from_secs(1);

impl Puller {
    /// Starts pulling from the consumer `info` describes, sending pull requests under
    /// `api_prefix` (the runtime's JetStream domain or API prefix, e.g. `$JS.API`). Returns
    /// once the consumer holds a first request (see [`Puller::reach`]), so that a consumer
    /// reported running is one the server delivers to. The first request asks for `first`
    /// messages (what the flow control wants of an empty session); requests expire after
    /// `expires`.
    pub(super) async fn start(
        common: Arc<Common>,
        (api_prefix, info): (&str, &consumer::Info),
        (first, expires): (usize, Duration),
        settings: &Settings,
        (watch, priority, fenced): (Watch, PullPriority, bool),
    ) -> Result<Box<Puller>, Loss> {
        let client = &common.client;
        let inbox = async_nats::Subject::from(client.new_inbox());
        let subscriber = client
            .subscribe(inbox.clone())
            .await
            .map_err(|e| Loss::Client(format!("could not subscribe to the pull inbox: {e}")))?;
        let expires = expires.max(Duration::from_millis(100));
        // The server refuses a heartbeat longer than half the expiry.
        let heartbeat = settings
            .heartbeat
            .min(expires / 2)
            .max(Duration::from_millis(10));
        let names = (api_prefix, info.stream_name.as_str(), info.name.as_str());
        let slot = watch.slot.clone();
        slot.forget_crowded();
        let received = watch
            .only_reader
            .then_some(info.delivered.consumer_sequence);
        let unacked = (watch.last.clone())
            .map(|last| unacked::Last::new(last, info.config.ack_wait, watch.only_reader));
        // Standing by until the server pins this session (reported once it is up).
        slot.standby(priority.stands_by());
        let liveness = Liveness::new(client, names, heartbeat, watch).await;
        // Boxed before its first request: the session keeps this box, and the start's
        // future, alive over a round trip for every consumer starting at once, holds only it.
        let mut puller = Box::new(Puller {
            connection: connection_of(client),
            common,
            subject: async_nats::Subject::from(format!(
                "{api_prefix}.CONSUMER.MSG.NEXT.{}.{}",
                info.stream_name, info.name
            )),
            inbox,
            subscriber,
            first: first.max(1),
            expires,
            heartbeat,
            requests: Requests::new(expires, heartbeat * 2),
            heard: Instant::now(),
            refused: None,
            crowded: None,
            reconnect_check: (
                Instant::now() + settings.reconnect_check,
                settings.reconnect_check,
            ),
            close_wait: settings.pull_close_wait,
            arrived: VecDeque::new(),
            liveness,
            priority,
            unpin: format!(
                "{api_prefix}.CONSUMER.UNPIN.{}.{}",
                info.stream_name, info.name
            ),
            slot,
            received,
            unacked,
            names: (info.stream_name.clone(), info.name.clone()),
            grant_check_at: Instant::now(),
            fence: fenced.then(|| {
                fence::Fence::new(format!(
                    "{api_prefix}.CONSUMER.INFO.{}.{}",
                    info.stream_name, info.name
                ))
            }),
            pending_after_last: 0,
        });
        puller.reach(REACH_WINDOW).await?;
        Ok(puller)
    }

    /// Asks for what `flow` wants while `held` messages are running or waiting to start.
    /// Nothing while refused requests wait to be sent again.
    async fn top_up(&mut self, flow: &Flow, held: usize) -> Result<(), Loss> {
        loop {
            let want = self.want(flow, held);
            if want == 0 {
                return Ok(());
            }
            self.send(want, self.expires, self.heartbeat).await?;
        }
    }

    /// What [`Puller::top_up`] would ask for now: nothing while acks or pulls are refused
    /// (what it took could not be settled) or refused requests wait to be sent again.
    fn want(&self, flow: &Flow, held: usize) -> usize {
        if self.slot.is_denied() {
            return 0;
        }
        if [&self.refused, &self.crowded]
            .iter()
            .any(|r| r.as_ref().is_some_and(|r| Instant::now() < r.again_at))
        {
            return 0;
        }
        flow.want(held, self.requests.asked())
    }

    /// The next message if one has arrived and no request needs sending first, without
    /// waiting: `None` when [`Puller::next`] has to (it asks, or waits for the inbox).
    pub(super) fn ready(&mut self, flow: &Flow, held: usize) -> Option<Result<Fetched, Loss>> {
        if self.fence.as_ref().is_some_and(fence::Fence::is_suspect) {
            return None; // the next delivery is checked with the server first (`next`)
        }
        if let Some(fetched) = self.arrived.pop_front() {
            return Some(Ok(fetched));
        }
        if self.want(flow, held) > 0 {
            return None;
        }
        loop {
            match self.subscriber.next().now_or_never()? {
                Some(message) => match self.take(message) {
                    Ok(Some(fetched)) => return Some(Ok(fetched)),
                    Ok(None) => {}
                    Err(loss) => return Some(Err(loss)),
                },
                None => return Some(Err(Loss::SubscriptionEnded("pull"))),
            }
        }
    }

    /// Sends a pull request for `want` messages that the server ends after `expires`, with
    /// idle heartbeats every `heartbeat` meanwhile.
    async fn send(
        &mut self,
        want: usize,
        expires: Duration,
        heartbeat: Duration,
    ) -> Result<(), Loss> {
        let nanos = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        // Written directly: one allocation a request, where a JSON map took several.
        let mut request = format!(
            "{{\"batch\":{want},\"expires\":{},\"idle_heartbeat\":{}",
            nanos(expires),
            nanos(heartbeat)
        );
        self.priority.fields(&mut request);
        request.push('}');
        let payload = bytes::Bytes::from(request);
        self.common
            .client
            .publish_with_reply(self.subject.clone(), self.inbox.clone(), payload)
            .await
            .map_err(|e| Loss::Client(format!("could not send a pull request: {e}")))?;
        // Silence counts from a request sent while none was open, but not while requests are
        // refused for want of a responder: the consumer has said nothing since before.
        if self.requests.is_empty() && self.refused.is_none() {
            self.heard = Instant::now();
        }
        self.requests.sent(want, expires);
        Ok(())
    }

    /// The next message, or why the consumer is lost. `held`: how many messages this
    /// instance is running or holding; `flow` says how many more to ask for. Cancel-safe.
    ///
    /// No delivery is held across an await: this future lives in the session's for as long as
    /// the consumer, and would reserve room for one (docs/PERFORMANCE.md, "memory and idle
    /// traffic per consumer").
    pub(super) async fn next(&mut self, flow: &Flow, held: usize) -> Result<Fetched, Loss> {
        loop {
            // What waits here first; a partition's fence may check it with the server.
            if let Some(fetched) = self.next_arrived().await {
                return Ok(fetched);
            }
            // Boxed when there is something to ask for (inline, it would widen this future).
            if self.want(flow, held) > 0 {
                Box::pin(self.top_up(flow, held)).await?;
            }
            // What has arrived already needs no timer.
            if let Some(arrived) = self.subscriber.next().now_or_never() {
                let Some(message) = arrived else {
                    return Err(Loss::SubscriptionEnded("pull"));
                };
                if let Some(fetched) = self.take(message)?.and_then(|f| self.hand_out(f)) {
                    return Ok(fetched);
                }
                continue;
            }
            // A request the server should have ended by now (with a 408) was lost with a
            // server restart or a connection loss: forget it, and ask again.
            let margin = (self.heartbeat * 2).max(OVERDUE_MARGIN_FLOOR);
            let overdue = self.requests.oldest_expiry().map(|at| at + margin);
            // A refused request is asked again at the top of the loop once its pause is over.
            let refused_until = [&self.refused, &self.crowded]
                .iter()
                .filter_map(|r| r.as_ref().map(|r| r.again_at))
                .filter(|at| *at > Instant::now())
                .max();
            let open = !self.requests.is_empty();
            let denied = self.slot.denied();
            let grant_check = denied.as_ref().map(|_| self.grant_check_at);
            // One timer for the four: each timer has room of its own in this future.
            let wake = [overdue, refused_until, grant_check]
                .into_iter()
                .flatten()
                .fold(self.reconnect_check.0, Instant::min);
            tokio::select! {
                biased;
                message = self.subscriber.next() => {
                    let Some(message) = message else {
                        return Err(Loss::SubscriptionEnded("pull"));
                    };
                    if let Some(fetched) = self.take(message)?.and_then(|f| self.hand_out(f)) {
                        return Ok(fetched);
                    }
                },
                event = self.liveness.next_event(&self.common.client, self.heard, open) => match event {
                    Event::LeaderElected => {
                        tracing::debug!(subject = %self.subject, "the consumer has a new leader; pulling again");
                        self.requests.forget(|_| true);
                        self.suspect();
                    }
                    Event::Answered { full: Some(full) } if self.liveness.is_stalled() => {
                        // The server drops requests beyond the wait list without a word.
                        self.crowd(&full);
                        self.requests.forget(|_| true);
                    }
                    Event::Answered { .. } if open && self.liveness.is_stalled() => {
                        self.liveness.pulling_again(self.heard);
                        self.requests.forget(|_| true);
                    }
                    Event::Answered { .. } => {
                        self.heard = Instant::now();
                        self.liveness.heard();
                    }
                    Event::Gone(why) => return Err(why),
                },
                () = tokio::time::sleep_until(wake) => {
                    let now = Instant::now();
                    if overdue.is_some_and(|at| at <= now) {
                        self.requests.forget(|r| r.expires_at + margin <= now);
                    }
                    // A refused request's pause is over: asked again at the top of the loop.
                    if let Some(permission) = denied.filter(|_| self.grant_check_at <= now) {
                        let (stream, consumer) = &self.names;
                        let ask = grant::Ask::of(
                            &permission,
                            (stream, consumer),
                            (&self.subject, &self.inbox),
                        );
                        // Boxed, as the reconnect's request below: rare, and inline they would
                        // stay in the session's future for its lifetime.
                        if Box::pin(grant::works(&self.common.client, ask, self.heartbeat)).await {
                            tracing::info!(subject = %self.subject, permission, "the refused permission works again; pulling");
                            self.slot.granted();
                        }
                        self.grant_check_at = Instant::now() + self.heartbeat;
                    }
                    if self.reconnect_check.0 <= now {
                        self.reconnect_check.0 = now + self.reconnect_check.1;
                        Box::pin(self.reconnected(held)).await?;
                    }
                }
            }
        }
    }

    /// Checks the connection (see `connection`). Reconnected: a restarted server lost the
    /// open requests (a server that kept them delivers a little ahead; those messages wait
    /// here), so they are forgotten and asked again; `held`: how many messages this instance
    /// runs or holds. Boxed by its caller: rare, and inline it would stay in the session's
    /// future for its lifetime.
    async fn reconnected(&mut self, held: usize) -> Result<(), Loss> {
        let connection = connection_of(&self.common.client);
        if connection == self.connection {
            return Ok(());
        }
        tracing::debug!(subject = %self.subject, "reconnected; pulling again");
        self.connection = connection;
        self.requests.forget(|_| true);
        self.suspect();
        self.heard = Instant::now();
        // The consumer's only reader asks first with a short heartbeat: the heartbeat names
        // the consumer's last delivery, so one lost with the old connection is noticed now
        // (see `take`), not a heartbeat later.
        if self.received.is_some() {
            self.send(self.first, FIRST_EXPIRES, FIRST_HEARTBEAT)
                .await?;
            self.liveness.reconnected(self.heard);
        }
        self.ack_lost(held).await;
        Ok(())
    }

    /// `fetched`, unless a partition's fence is to check it with the server first: then it
    /// waits in `arrived` for [`Puller::next`]'s check, which holds it in memory of its own.
    fn hand_out(&mut self, fetched: Fetched) -> Option<Fetched> {
        if self.fence.as_ref().is_some_and(fence::Fence::is_suspect) {
            self.arrived.push_back(fetched);
            return None;
        }
        Some(fetched)
    }
}
