//! The runtime's timings ([`Settings`]): each a value with a documented default, set through
//! [`RuntimeBuilder`], and refused at `build` when it would make the runtime misbehave.

use crate::outage::OutagePolicy;
use crate::provision::LeaderTimings;
use std::time::Duration;

use super::RuntimeBuilder;
use crate::retry::RetryPolicy;
use crate::validate::Problem;
use topology_core::model::AckMode;

/// The timings of a running runtime (all set through [`RuntimeBuilder`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settings {
    pub(crate) grace_period: Duration,
    pub(crate) heartbeat: Duration,
    pub(crate) expires: Duration,
    pub(crate) pull_batch: Option<usize>,
    pub(crate) pull_ahead: Duration,
    pub(crate) partitions_early: bool,
    pub(crate) pull_close_wait: Duration,
    pub(crate) reconnect_check: Duration,
    pub(crate) down_alarm: Duration,
    pub(crate) move_after: Duration,
    pub(crate) redelivery: RetryPolicy,
    pub(crate) dead_letter: RetryPolicy,
    pub(crate) dead_letter_attempts: u32,
    pub(crate) publish_retry: RetryPolicy,
    pub(crate) ack: AckMode,
    pub(crate) leader: LeaderTimings,
    pub(crate) outage: OutagePolicy,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            grace_period: Duration::from_secs(30),
            heartbeat: Duration::from_secs(5),
            expires: Duration::from_secs(30),
            pull_batch: None,
            pull_ahead: Duration::from_millis(10),
            partitions_early: true,
            pull_close_wait: Duration::from_secs(1),
            reconnect_check: Duration::from_secs(1),
            down_alarm: Duration::from_secs(60),
            move_after: Duration::from_secs(15),
            redelivery: RetryPolicy {
                base: Duration::from_millis(100),
                cap: Duration::from_secs(30),
                ..RetryPolicy::default()
            },
            dead_letter: RetryPolicy {
                base: Duration::from_millis(100),
                cap: Duration::from_secs(1),
                ..RetryPolicy::default()
            },
            dead_letter_attempts: 5,
            publish_retry: RetryPolicy {
                base: Duration::from_millis(100),
                cap: Duration::from_secs(1),
                deadline: Duration::from_secs(15),
                ..RetryPolicy::default()
            },
            ack: AckMode::FireAndForget,
            leader: LeaderTimings::default(),
            outage: OutagePolicy::default(),
        }
    }
}

impl RuntimeBuilder {
    /// When a queue consumer whose handlers keep failing stops taking messages (default
    /// [`OutagePolicy::default`]: 10 transient failures within 10 s that are at least half of
    /// what ended). While what the handlers depend on is down, the consumer pulls nothing and
    /// starts nothing but its probes, so what failed is delivered again only to a probe and no
    /// message nears `max_deliver`; one message probes after 1 s, then after twice as long
    /// each time (at most 10 s), and the first success resumes at full speed. Health shows
    /// [`BackingOff`](crate::ConsumerState::BackingOff) with the last error, and stays ready:
    /// the replica is healthy, its dependency is not. Permanent and decode errors do not count.
    pub fn outage(mut self, policy: OutagePolicy) -> Self {
        self.settings.outage = policy;
        self
    }

    /// How long a drain waits for in-flight handlers (default 30 s). Messages whose handler
    /// has not finished by then are left unacknowledged: the server redelivers them. Requests
    /// an endpoint received and has not answered by then are answered with a 503 (the caller
    /// sends it again, to another instance).
    pub fn grace_period(mut self, grace: Duration) -> Self {
        self.settings.grace_period = grace;
        self
    }

    /// The idle heartbeat of pull requests (default 5 s), and the pace of what watches the
    /// server:
    ///
    /// - nothing from the server for two heartbeats (plus the round trip measured when the
    ///   session started) turns a pull consumer [`Stalled`](crate::ConsumerState::Stalled):
    ///   not ready. It then asks the consumer (`CONSUMER.INFO`) every heartbeat: answered, it
    ///   pulls again (its requests were lost with an old leader); not found, it ensures the
    ///   consumer again; unanswered, it stays stalled and says why, until the server is heard;
    /// - a new leader of a consumer with replicas (its `LEADER_ELECTED` advisory) makes it
    ///   pull again at once;
    /// - JetStream is asked through the connection every heartbeat (see
    ///   [`move_server_after`](Self::move_server_after));
    /// - a queue consumer reads its ack floor (and lag) every heartbeat while it has work or
    ///   JetStream does not answer, and every fourth heartbeat while idle; when this server
    ///   leads its group and hears no majority of its peers, the connection moves at once;
    /// - every service's endpoints (and every core subscription) are proven on the server by
    ///   a round trip every heartbeat (a request to the service's own
    ///   `$SRV.PING.<name>.<id>`); no answer within a heartbeat turns them
    ///   [`Stalled`](crate::ServingState::Stalled): not ready.
    pub fn heartbeat(mut self, heartbeat: Duration) -> Self {
        self.settings.heartbeat = heartbeat;
        self
    }

    /// How long one pull request waits on the server (default 30 s).
    pub fn pull_expires(mut self, expires: Duration) -> Self {
        self.settings.expires = expires;
        self
    }

    /// The most messages one pull request asks for (default: the consumer's concurrency),
    /// and, set larger than the concurrency, how many this instance holds: up to a batch,
    /// whatever the handlers' pace (instead of [`pull_ahead`](Self::pull_ahead)'s). Messages
    /// waiting to start get progress acks (their `ack_wait` does not run out here), and a
    /// drain returns them.
    pub fn pull_batch(mut self, batch: usize) -> Self {
        self.settings.pull_batch = Some(batch.max(1));
        self
    }

    /// How the leader watch, which wakes provisioning retries waiting for a JetStream leader
    /// as soon as one is elected, paces itself (default [`LeaderTimings::default`]).
    ///
    /// ```
    /// use std::time::Duration;
    /// use nats_topology::LeaderTimings;
    ///
    /// # async fn demo(client: nats_topology::async_nats::Client) -> Result<(), Box<dyn std::error::Error>> {
    /// let quick = LeaderTimings {
    ///     wake_spread: Duration::from_millis(20),
    ///     ..LeaderTimings::default()
    /// };
    /// let runtime = nats_topology::Runtime::builder(client).leader_timings(quick).build()?;
    /// # Ok(()) }
    /// ```
    pub fn leader_timings(mut self, timings: LeaderTimings) -> Self {
        self.settings.leader = timings;
        self
    }

    /// How far ahead a pull consumer fetches when no [`pull_batch`](Self::pull_batch) is set
    /// (default 10 ms): beyond its running handlers, it holds what they finish within this
    /// time at their measured pace, at most 200 messages (async-nats' own batch) or its
    /// concurrency, if larger. Fast handlers then find their next message here rather
    /// than a round trip away; slow ones hold nothing they cannot start at once, so no message
    /// waits on a busy instance while another is idle. A message fetched ahead waits about
    /// this long before it starts. `Duration::ZERO`: fetch only what can start at once.
    pub fn pull_ahead(mut self, horizon: Duration) -> Self {
        self.settings.pull_ahead = horizon;
        self
    }

    /// Whether a partition of a partitioned consumer runs its next message as soon as the one
    /// before it is handled, when their keys differ (default `true`; see docs/PARTITIONS.md,
    /// "Running ahead"): the session reads the message from the stream while the one before
    /// it runs (`$JS.API.STREAM.MSG.GET.<stream>`, granted by the exported permissions),
    /// rather than waiting a round trip for the server to deliver it after the ack. The order
    /// per key and what the server delivers are the same either way. `false`: every message
    /// waits for its delivery (about 0.76 of the throughput with 1 ms handlers, against 0.92),
    /// and the partitions need no read of the stream.
    ///
    /// ```
    /// # async fn demo(client: nats_topology::async_nats::Client) -> Result<(), Box<dyn std::error::Error>> {
    /// let runtime = nats_topology::Runtime::builder(client)
    ///     .partitions_early(false)
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn partitions_early(mut self, early: bool) -> Self {
        self.settings.partitions_early = early;
        self
    }

    /// How long a pull feed that stops (drain, or a lost consumer) waits for messages already
    /// on their way to its open requests, to hand them back at once (default 1 s). What
    /// arrives later is redelivered after its `ack_wait`.
    pub fn pull_close_wait(mut self, wait: Duration) -> Self {
        self.settings.pull_close_wait = wait;
        self
    }

    /// How often a pull feed checks whether its client reconnected (default 1 s): the open
    /// requests of a restarted server are gone, so it asks again at once instead of waiting
    /// for missed heartbeats. Endpoints and core subscriptions check their connection as
    /// often: down, they are [`Disconnected`](crate::ServingState::Disconnected) until it is
    /// back and a round trip proves them again.
    pub fn reconnect_check(mut self, every: Duration) -> Self {
        self.settings.reconnect_check = every;
        self
    }

    /// How long JetStream may go unanswered through the connection's server, while some
    /// consumer does not run, before the runtime moves the connection to another server of
    /// the client's list (default 15 s). A server cut off from its cluster by a partition keeps
    /// its clients but cannot reach the JetStream leaders on the other side; another server
    /// may. The default outlasts a leader election (4 to 9 s, during which no server answers),
    /// so that an election moves nobody. With a single server listed the runtime stays on it,
    /// unready, and [`Health::jetstream`](crate::Health::jetstream) says why.
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    ///
    /// let servers = ["nats://a:4222", "nats://b:4222", "nats://c:4222"];
    /// let client = nats_topology::connect(&servers.join(",")).await?;
    /// let runtime = nats_topology::Runtime::builder(client)
    ///     .move_server_after(Duration::from_secs(20))
    ///     .build()?;
    /// # drop(runtime); Ok(()) }
    /// ```
    pub fn move_server_after(mut self, after: Duration) -> Self {
        self.settings.move_after = after;
        self
    }

    /// How long a consumer may be down (not running) before that is logged as an error, and
    /// how often the error is repeated while it stays down (default 60 s).
    pub fn down_alarm(mut self, after: Duration) -> Self {
        self.settings.down_alarm = after;
        self
    }

    /// The delay before a failed message is redelivered when its consumer declares no
    /// `backoff`: full jitter over the policy's window for the delivery's attempt (default
    /// base 100 ms, cap 30 s). Only `base` and `cap` are used.
    pub fn redelivery(mut self, policy: RetryPolicy) -> Self {
        self.settings.redelivery = policy;
        self
    }

    /// How publishing a dead letter is retried while its message is held with progress acks:
    /// at most `attempts` attempts (at least one) under `policy` (default: 5 attempts, full
    /// jitter from 100 ms, cap 1 s, within the policy's deadline). When every attempt fails,
    /// the message is naked with a delay of the policy's `cap` (or, on its last delivery, left
    /// unacknowledged: the server emits a MAX_DELIVERIES advisory).
    pub fn dead_letter_retry(mut self, policy: RetryPolicy, attempts: u32) -> Self {
        self.settings.dead_letter = policy;
        self.settings.dead_letter_attempts = attempts.max(1);
        self
    }

    /// How a handler's publish ([`Context::publish`](crate::Context::publish) and the other
    /// publishing methods) is sent again while the target stream does not answer: no
    /// responder (its leader being elected, after a partition or a node loss; the stream being
    /// created again), or no acknowledgement in time for a publish with a message id, which the
    /// stream's duplicate window drops if the first one was stored after all. Full jitter from
    /// `base`, within `deadline` (default: from 100 ms, cap 1 s, for 15 s: longer than a leader
    /// election, 4 to 9 s); each attempt waits for its acknowledgement at most the request
    /// timeout of [`retry`](Self::retry) (this policy's own `request_timeout` is not used). The
    /// handler's message is kept alive with progress acks
    /// meanwhile; when the deadline passes, the publish fails (and so, with `?`, does the
    /// handler, whose message is redelivered).
    pub fn publish_retry(mut self, policy: RetryPolicy) -> Self {
        self.settings.publish_retry = policy;
        self
    }
}

impl RuntimeBuilder {
    /// The settings that would make the runtime misbehave (spin, or never notice a loss),
    /// each named with the fix.
    pub(super) fn settings_problems(&self) -> Vec<Problem> {
        let mut problems = Vec::new();
        let mut refuse = |setting: &str, message: String| {
            problems.push(Problem {
                location: format!("runtime builder `{setting}`"),
                message,
            })
        };
        let s = &self.settings;
        let positive = [
            (
                "heartbeat",
                s.heartbeat,
                "missed heartbeats are how a lost consumer is noticed",
            ),
            (
                "pull_expires",
                s.expires,
                "a pull request that expires at once asks again in a loop",
            ),
            (
                "reconnect_check",
                s.reconnect_check,
                "a zero interval checks in a loop",
            ),
            (
                "down_alarm",
                s.down_alarm,
                "a zero delay logs every state change as an error",
            ),
            (
                "move_server_after",
                s.move_after,
                "a zero delay moves the connection at the first unanswered request, even during a leader election",
            ),
        ];
        for (setting, value, why) in positive {
            if value.is_zero() {
                refuse(
                    setting,
                    format!("is zero; {why}: give it a positive duration"),
                );
            }
        }
        for (setting, policy) in [
            ("retry", &self.retry),
            ("redelivery", &s.redelivery),
            ("dead_letter_retry", &s.dead_letter),
            ("publish_retry", &s.publish_retry),
        ] {
            if policy.base.is_zero() || policy.cap.is_zero() {
                refuse(
                    setting,
                    format!(
                        "has a zero `base` or `cap` ({:?}, {:?}): retries would spin against a \
                         failure that returns at once; give both a positive duration",
                        policy.base, policy.cap
                    ),
                );
            } else if policy.cap < policy.base {
                refuse(
                    setting,
                    format!(
                        "has `cap` {:?} below `base` {:?}: the window never grows; make `cap` at \
                         least `base`",
                        policy.cap, policy.base
                    ),
                );
            }
        }
        if self.retry.request_timeout.is_zero() {
            refuse(
                "retry",
                "has a zero `request_timeout`: every request would time out; give it a positive \
                 duration (the default is 5 s)"
                    .to_owned(),
            );
        }
        problems
    }
}
