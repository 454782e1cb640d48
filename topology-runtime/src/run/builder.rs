//! [`RuntimeBuilder`]: the topology, application state, and every timing the runtime uses,
//! each a value with a documented default.

use std::sync::Arc;
use std::time::Duration;

use super::relay::relay_name;
use super::{Inner, Runtime};
use crate::handler::StateMap;
use crate::health::{Health, Shared, Slot};
use crate::jsapi::JetStreamApi;
use crate::provision::{Ensurer, Provisioner};
use crate::registry::Topology;
use crate::retry::RetryPolicy;
use crate::validate::{self, Problem, ValidationError};
use topology_core::model::{AckMode, ConsumerKind};

/// Configures a [`Runtime`]; see [`Runtime::builder`].
///
/// ```no_run
/// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use nats_topology::{RetryPolicy, Runtime};
///
/// let client = async_nats::connect("nats://127.0.0.1:4222").await?;
/// let runtime = Runtime::builder(client)
///     .retry(RetryPolicy { deadline: Duration::from_secs(120), ..RetryPolicy::default() })
///     .grace_period(Duration::from_secs(10))
///     .build()?;
/// # drop(runtime); Ok(()) }
/// ```
pub struct RuntimeBuilder {
    client: async_nats::Client,
    topology: Option<Topology>,
    state: StateMap,
    retry: RetryPolicy,
    settings: Settings,
    /// Stamped on what this runtime creates or updates (see [`RuntimeBuilder::version`]).
    version: Option<Arc<str>>,
    /// Set by `domain` and `api_prefix` (both set is refused at `build`).
    domain: Option<String>,
    api_prefix: Option<String>,
    #[cfg(feature = "test-hooks")]
    panic_supervisor: Option<String>,
}

/// The timings of a running runtime (all set through [`RuntimeBuilder`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settings {
    pub(crate) grace_period: Duration,
    pub(crate) heartbeat: Duration,
    pub(crate) expires: Duration,
    pub(crate) pull_batch: Option<usize>,
    pub(crate) pull_close_wait: Duration,
    pub(crate) reconnect_check: Duration,
    pub(crate) down_alarm: Duration,
    pub(crate) move_after: Duration,
    pub(crate) redelivery: RetryPolicy,
    pub(crate) dead_letter: RetryPolicy,
    pub(crate) dead_letter_attempts: u32,
    pub(crate) publish_retry: RetryPolicy,
    pub(crate) ack: AckMode,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            grace_period: Duration::from_secs(30),
            heartbeat: Duration::from_secs(5),
            expires: Duration::from_secs(30),
            pull_batch: None,
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
        }
    }
}

impl RuntimeBuilder {
    pub(super) fn new(client: async_nats::Client) -> Self {
        RuntimeBuilder {
            client,
            topology: None,
            state: StateMap::default(),
            retry: RetryPolicy::default(),
            settings: Settings::default(),
            version: None,
            domain: None,
            api_prefix: None,
            #[cfg(feature = "test-hooks")]
            panic_supervisor: None,
        }
    }

    /// The version of this service, stamped on the streams and queue consumers it creates or
    /// updates (metadata key `nats-topology.version`), overriding each declaration's own (the
    /// macros use the declaring crate's `CARGO_PKG_VERSION`). An instance never applies an
    /// editable change declared by an older version than the one stamped on the server
    /// (semver precedence; see docs/DEPLOYS.md).
    ///
    /// ```no_run
    /// # async fn f(client: async_nats::Client) -> Result<(), Box<dyn std::error::Error>> {
    /// let runtime = nats_topology::Runtime::builder(client)
    ///     .version(env!("CARGO_PKG_VERSION"))
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn version(mut self, version: impl Into<String>) -> Self {
        self.version = Some(version.into().into());
        self
    }

    /// Test hook (feature `test-hooks`, not public API): the supervisor of the consumer whose
    /// handler is `handler` (its full path) panics once, as soon as the consumer runs.
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn __panic_supervisor_once(mut self, handler: &str) -> Self {
        self.panic_supervisor = Some(handler.to_owned());
        self
    }

    /// Runs this topology instead of the one the macros registered.
    pub fn topology(mut self, topology: Topology) -> Self {
        self.topology = Some(topology);
        self
    }

    /// Makes `value` available to handlers as a [`State<T>`](crate::State) argument and as
    /// `cx.state::<T>()`; one value per type. A handler taking `State<T>` makes [`build`](Self::build)
    /// fail unless a `T` was given here.
    pub fn state<T: std::any::Any + Send + Sync>(mut self, value: T) -> Self {
        self.state.insert(value);
        self
    }

    /// How provisioning retries transient failures (default: [`RetryPolicy::default`]). Its
    /// window also paces a supervised consumer's re-ensures, which never give up.
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    /// How long a drain waits for in-flight handlers (default 30 s). Messages whose handler
    /// has not finished by then are left unacknowledged: the server redelivers them.
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
    /// - a new leader of the consumer (its `LEADER_ELECTED` advisory) makes it pull again at
    ///   once;
    /// - JetStream is asked through the connection every heartbeat (see
    ///   [`move_server_after`](Self::move_server_after));
    /// - a queue consumer reads its ack floor every two heartbeats.
    pub fn heartbeat(mut self, heartbeat: Duration) -> Self {
        self.settings.heartbeat = heartbeat;
        self
    }

    /// How long one pull request waits on the server (default 30 s).
    pub fn pull_expires(mut self, expires: Duration) -> Self {
        self.settings.expires = expires;
        self
    }

    /// The most messages one pull request asks for (default: the consumer's concurrency).
    /// The runtime asks only for what it can start now, so by default nothing waits in this
    /// instance while its `ack_wait` runs. A batch larger than the concurrency trades that for
    /// fewer round trips: up to a batch of messages is held and asked for, so that a handler
    /// that finishes finds its next message here rather than a round trip away. Those waiting
    /// get progress acks (their `ack_wait` does not run out here), and a drain returns them.
    pub fn pull_batch(mut self, batch: usize) -> Self {
        self.settings.pull_batch = Some(batch.max(1));
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
    /// for missed heartbeats.
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
    /// election, 4 to 9 s); each attempt waits for its acknowledgement at most the retry
    /// policy's `request_timeout`. The handler's message is kept alive with progress acks
    /// meanwhile; when the deadline passes, the publish fails (and so, with `?`, does the
    /// handler, whose message is redelivered).
    pub fn publish_retry(mut self, policy: RetryPolicy) -> Self {
        self.settings.publish_retry = policy;
        self
    }

    /// Sends every JetStream request of the runtime (provisioning, reads, [`Runtime::plan`],
    /// [`Runtime::inspect`], pull requests) to the JetStream domain `domain`, under the API
    /// prefix `$JS.<domain>.API`: for streams that live in another domain than the one this
    /// connection's server belongs to, for example an edge site's leaf node seen from a hub.
    /// Acknowledgements need nothing (they are replies, routed back to the JetStream that sent
    /// the message).
    ///
    /// Exclusive with [`api_prefix`](Self::api_prefix): setting both makes
    /// [`build`](Self::build) fail. A domain that no server answers for makes provisioning fail
    /// at its retry deadline with an error naming the domain.
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
    /// use nats_topology::Runtime;
    ///
    /// // Connected to the hub; the streams live on the edge site's leaf node (domain `edge`).
    /// let client = async_nats::connect("nats://hub.example:4222").await?;
    /// let runtime = Runtime::builder(client).domain("edge").build()?;
    /// # drop(runtime); Ok(()) }
    /// ```
    pub fn domain(mut self, domain: impl Into<String>) -> Self {
        self.domain = Some(domain.into());
        self
    }

    /// Sends every JetStream request of the runtime under the API prefix `prefix` instead of
    /// `$JS.API`: for a JetStream API imported from another account under a prefix of its own
    /// (for example `JS.hub.API`). A JetStream domain is the prefix `$JS.<domain>.API`; prefer
    /// [`domain`](Self::domain) for it.
    ///
    /// Exclusive with [`domain`](Self::domain): setting both makes [`build`](Self::build) fail.
    /// With a prefix, the leader watch cannot tell whose leader advisories it would see, so it
    /// relies on probing the API's `INFO` through the prefix alone.
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
    /// use nats_topology::Runtime;
    ///
    /// let client = async_nats::connect("nats://127.0.0.1:4222").await?;
    /// let runtime = Runtime::builder(client).api_prefix("JS.hub.API").build()?;
    /// # drop(runtime); Ok(()) }
    /// ```
    pub fn api_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.api_prefix = Some(prefix.into());
        self
    }

    /// Which JetStream the runtime talks to, or why the builder's choice is refused.
    fn jetstream_api(&self) -> Result<JetStreamApi, Problem> {
        let api = match (&self.domain, &self.api_prefix) {
            (Some(domain), Some(prefix)) => {
                return Err(Problem {
                    location: "runtime builder `domain` and `api_prefix`".to_owned(),
                    message: format!(
                        "both are set (domain `{domain}`, API prefix `{prefix}`), but requests \
                         have one prefix: a domain is the prefix `$JS.{domain}.API`; set only \
                         one of them"
                    ),
                });
            }
            (Some(domain), None) => JetStreamApi::Domain(domain.clone()),
            (None, Some(prefix)) => JetStreamApi::Prefix(prefix.clone()),
            (None, None) => JetStreamApi::Local,
        };
        match api.problem() {
            Some(message) => Err(Problem {
                location: format!(
                    "runtime builder `{}`",
                    if self.domain.is_some() {
                        "domain"
                    } else {
                        "api_prefix"
                    }
                ),
                message,
            }),
            None => Ok(api),
        }
    }

    /// When a handled message of a queue consumer that declares no `ack` counts as handled
    /// (default [`AckMode::FireAndForget`]). [`AckMode::Confirmed`]: the ack waits for the
    /// server's confirmation, each attempt bounded by the retry policy's `request_timeout`, and
    /// is sent again on a timeout until the consumer's `ack_wait` has passed; only a confirmed
    /// message counts as handled, and a drain waits for the confirmations (within the grace
    /// period). It costs a round trip per message before the handler's slot is free again
    /// (measured in `docs/PERFORMANCE.md`). Relays (`#[broadcast]`) always fire and forget.
    ///
    /// ```no_run
    /// # async fn f(client: async_nats::Client) -> Result<(), Box<dyn std::error::Error>> {
    /// use nats_topology::{Runtime, model::AckMode};
    ///
    /// let runtime = Runtime::builder(client).ack(AckMode::Confirmed).build()?;
    /// # drop(runtime); Ok(()) }
    /// ```
    pub fn ack(mut self, mode: AckMode) -> Self {
        self.settings.ack = mode;
        self
    }

    /// Validates the topology and the builder's settings (every problem at once) and builds
    /// the runtime.
    pub fn build(self) -> Result<Runtime, ValidationError> {
        let mut problems = self.settings_problems();
        let api = self.jetstream_api();
        if let Err(problem) = &api {
            problems.push(problem.clone());
        }
        let topology = self.topology.unwrap_or_else(Topology::from_registry);
        if let Err(invalid) = validate::validate(&topology) {
            problems.extend(invalid.problems);
        }
        problems.extend(missing_state(&topology, &self.state));
        if !problems.is_empty() {
            return Err(ValidationError { problems });
        }
        let instance = instance_id();
        let api = api.unwrap_or_default();
        let provisioner =
            Provisioner::with_api(self.client.clone(), self.retry, api).with_version(self.version);
        let ensurer = Ensurer::new(topology, provisioner);
        let unread = ensurer.unread_streams();
        let shared = Arc::new(
            Shared::new(unread.iter().map(|s| s.name.to_owned()))
                .with_older(ensurer.provisioner().older_declarations().clone()),
        );
        let slots: Vec<Arc<Slot>> = ensurer
            .topology()
            .consumers()
            .iter()
            .enumerate()
            .map(|(index, c)| {
                let (name, queue) = match &c.decl.kind {
                    ConsumerKind::Queue(q) => (q.group.to_owned(), true),
                    ConsumerKind::Broadcast(_) => (relay_name(&instance, index), false),
                };
                Arc::new(Slot::new(
                    c.decl.stream.name(),
                    &name,
                    c.decl.handler,
                    queue,
                    self.settings.down_alarm,
                    shared.clone(),
                ))
            })
            .collect();
        Ok(Runtime {
            inner: Arc::new(Inner {
                client: self.client,
                ensurer,
                state: self.state,
                settings: self.settings,
                health: Health {
                    slots: slots.into(),
                    shared,
                },
                instance,
                #[cfg(feature = "test-hooks")]
                panic_supervisor: std::sync::Mutex::new(self.panic_supervisor),
            }),
        })
    }
}

impl RuntimeBuilder {
    /// The settings that would make the runtime misbehave (spin, or never notice a loss),
    /// each named with the fix.
    fn settings_problems(&self) -> Vec<Problem> {
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

/// A random id per runtime: relay names must never collide between instances (in containers
/// every process may be pid 1).
fn instance_id() -> String {
    use rand::RngExt;
    format!("{:016x}", rand::rng().random::<u64>())
}

/// A problem for each `State<T>` argument of a handler whose `T` the builder was not given.
fn missing_state(topology: &Topology, state: &StateMap) -> Vec<Problem> {
    let mut problems = Vec::new();
    for consumer in topology.consumers() {
        for key in consumer.states {
            if !state.contains(key.type_id()) {
                problems.push(Problem {
                    location: validate::consumer_at(&consumer.decl),
                    message: format!(
                        "the handler takes `State<{ty}>`, but the runtime was given no `{ty}`: add `.state(value)` with a `{ty}` to `Runtime::builder(..)`",
                        ty = key.type_name()
                    ),
                });
            }
        }
    }
    problems
}
