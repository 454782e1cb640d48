//! [`RuntimeBuilder`]: the topology, application state, which JetStream, the retry policy
//! and the ack mode; `timings`: every timing the runtime uses, each a value with a documented
//! default; `checks`: what `build` refuses beyond the declarations' own validation.

mod checks;
mod layers;
mod timings;

use std::borrow::Cow;
use std::sync::Arc;

use self::checks::{missing_state, unknown_spill_over};
use self::layers::Layers;
use super::relay::relay_name;
use super::{Inner, Runtime};
use crate::handler::Common;
use crate::health::{Health, ServeSlot, Served, Shared, Slot, WritesRecord};
use crate::jsapi::JetStreamApi;
use crate::provision::Provisioner;
use crate::registry::Topology;
use crate::retry::RetryPolicy;
use crate::run::Ensurer;
use crate::state::StateMap;
use crate::validate::{self, Problem, ValidationError};
use topology_core::model::{AckMode, ConsumerKind};

pub use crate::outage::OutagePolicy;
pub(crate) use timings::Settings;

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
    /// Verify instead of provisioning (see [`RuntimeBuilder::bind_only`]).
    bind_only: bool,
    /// The overflow queue consumers (by group) this instance spills over for.
    spill_over: Vec<String>,
    /// `tower` layers around handlers and endpoints (`layers.rs`).
    layers: Layers,
    #[cfg(feature = "test-hooks")]
    panic_supervisor: Option<String>,
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
            bind_only: false,
            spill_over: Vec::new(),
            layers: Layers::default(),
            #[cfg(feature = "test-hooks")]
            panic_supervisor: None,
        }
    }

    /// Verifies the streams and queue consumers instead of creating or updating them: they are
    /// provisioned by an operator (the CLI's `provision` run with the operator's credentials,
    /// or infrastructure as code), and this service's user has no right to create, update or
    /// delete them (the `bind-only` role of
    /// [`export::permissions`](crate::export::permissions)). A stream or consumer that is not
    /// there keeps its consumers waiting, not ready, with a message that says who provisions
    /// it; one that differs from the declaration is used as it is, and the difference is
    /// logged. Broadcast relays are still created by each instance (nobody else can). Health
    /// says that the runtime is bind-only.
    ///
    /// ```no_run
    /// # async fn f(client: nats_topology::async_nats::Client) -> Result<(), Box<dyn std::error::Error>> {
    /// let runtime = nats_topology::Runtime::builder(client).bind_only().build()?;
    /// assert!(runtime.health().to_string().contains("bind-only"));
    /// # Ok(()) }
    /// ```
    pub fn bind_only(mut self) -> Self {
        self.bind_only = true;
        self
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

    /// Makes this instance a spill-over instance of the queue consumer `group`, declared with
    /// `priority = "overflow"`: its pull requests carry the declared thresholds
    /// (`min_pending`, `min_ack_pending`), so the server delivers to it only while the
    /// consumer's backlog reaches one of them. Instances that do not call this take work
    /// always. [`build`](Self::build) refuses a group that is not an overflow consumer.
    ///
    /// ```no_run
    /// # async fn f(client: async_nats::Client) -> Result<(), Box<dyn std::error::Error>> {
    /// // Deployed as the burst pool, e.g. when `ROLE=spill-over` is set.
    /// let runtime = nats_topology::Runtime::builder(client).spill_over("bulk").build()?;
    /// # drop(runtime); Ok(()) }
    /// ```
    pub fn spill_over(mut self, group: impl Into<String>) -> Self {
        self.spill_over.push(group.into());
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
    pub fn topology(mut self, mut topology: Topology) -> Self {
        topology.sort_in_place();
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
        let mut topology = self.topology.unwrap_or_else(Topology::from_registry);
        if let Err(invalid) = validate::validate(&topology) {
            problems.extend(invalid.problems);
        }
        problems.extend(missing_state(&topology, &self.state));
        problems.extend(unknown_spill_over(&topology, &self.spill_over));
        problems.extend(self.layers.apply(&mut topology));
        if !problems.is_empty() {
            return Err(ValidationError { problems });
        }
        // A partitioned consumer runs as the consumers of its partitions.
        let topology = topology.partitioned();
        let instance = instance_id();
        let api = api.unwrap_or_default();
        let provisioner =
            Provisioner::with_api(self.client.clone(), self.retry, api, self.settings.leader)
                .with_version(self.version)
                .bind_only(self.bind_only);
        let ensurer = Ensurer::new(topology, provisioner);
        let unread = ensurer.unread_streams();
        let watched = ensurer
            .topology()
            .streams()
            .iter()
            .map(|s| {
                let subjects = s.subjects.iter().map(|&subject| subject.to_owned());
                (s.name.to_owned(), subjects.collect())
            })
            .collect();
        let shared = Arc::new(
            Shared::new(unread.iter().map(|s| s.name.to_owned()))
                .with_writes(WritesRecord::new(watched))
                .with_older(ensurer.provisioner().older_declarations().clone())
                .bind_only(self.bind_only),
        );
        let slots: Arc<[Arc<Slot>]> = ensurer
            .topology()
            .consumers()
            .iter()
            .enumerate()
            .map(|(index, c)| {
                let (name, queue) = match &c.decl.kind {
                    ConsumerKind::Queue(q) => (Cow::Borrowed(q.group), true),
                    ConsumerKind::Broadcast(_) => (Cow::Owned(relay_name(&instance, index)), false),
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
        let endpoints: Arc<[Arc<ServeSlot>]> = ensurer
            .topology()
            .endpoints()
            .iter()
            .map(|e| {
                let served = Served::Endpoint {
                    service: e.decl.service.name.to_owned(),
                    endpoint: e.decl.name.to_owned(),
                    queue_group: e.decl.queue_group().to_owned(),
                };
                let slot = ServeSlot::new(served, e.decl.subject, e.decl.handler, shared.clone());
                Arc::new(slot)
            })
            .collect();
        let subscriptions: Arc<[Arc<ServeSlot>]> = ensurer
            .topology()
            .subscriptions()
            .iter()
            .map(|s| {
                let served = Served::Subscription {
                    queue_group: s.decl.queue_group().map(str::to_owned),
                };
                let slot = ServeSlot::new(served, s.decl.subject, s.decl.handler, shared.clone());
                Arc::new(slot)
            })
            .collect();
        let shares = crate::run::shares::Shares::of(ensurer.topology());
        let common = Arc::new(Common {
            client: self.client,
            state: self.state,
            jetstream: ensurer.provisioner().jetstream().clone(),
            stream_missing: shared.stream_missing.clone(),
            publish_retry: self.settings.publish_retry,
            publish_unanswered: shared.writes.wake.clone(),
            refusing: {
                let shared = shared.clone();
                Arc::new(move |subject| shared.writes.refusing(subject).map(|s| s.to_string()))
            },
        });
        Ok(Runtime {
            inner: Arc::new(Inner {
                common,
                ensurer,
                settings: self.settings,
                health: Health {
                    slots,
                    endpoints,
                    subscriptions,
                    shared,
                },
                shares,
                instance,
                spill_over: self.spill_over,
                #[cfg(feature = "test-hooks")]
                panic_supervisor: std::sync::Mutex::new(self.panic_supervisor),
            }),
        })
    }
}

/// A random id per runtime: relay names must never collide between instances (in containers
/// every process may be pid 1).
fn instance_id() -> String {
    use rand::RngExt;
    format!("{:016x}", rand::rng().random::<u64>())
}
