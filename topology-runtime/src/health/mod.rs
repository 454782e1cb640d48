//! Per-consumer state and counters, readable at any time through a cheap [`Health`] handle.
//!
//! - `consumer`: [`ConsumerState`] and the [`ConsumerStatus`] snapshot;
//! - `slot`: one consumer's live state, as its supervisor and handlers change it;
//! - `jetstream`: whether JetStream answers through the connection's server;
//! - `denials`: the permission violations the server reported, and who needs each entry;
//! - `older`: declarations older than the version stamped on the server (provisioning
//!   records them);
//! - `serving`: each endpoint's and core subscription's state ([`ServingState`]) and
//!   counters;
//! - `serve_slot`: one endpoint's or core subscription's live state and tally, as its
//!   supervisor and dispatch change them;
//! - `writes`: whether each declared stream takes writes ([`Writes`]), as the stream watch
//!   last read it.

mod consumer;
mod denials;
mod jetstream;
mod older;
mod serve_slot;
mod serving;
mod slot;
mod writes;

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::watch;

pub use consumer::{ConsumerState, ConsumerStatus};
pub(crate) use denials::Denials;
pub use denials::PermissionDenial;
pub use jetstream::JetStreamStatus;
pub use older::OlderDeclaration;
pub(crate) use older::OlderDeclarations;
pub(crate) use serve_slot::{ServeSlot, Served};
pub use serving::{EndpointStatus, ServingState, SubscriptionStatus};
pub(crate) use slot::Slot;
pub(crate) use writes::WritesRecord;
pub use writes::{StreamWrites, Writes};

/// What every [`Slot`] and [`Health`] handle of one runtime share.
pub(crate) struct Shared {
    /// Counts changes (of any consumer's state, or a stream's); waiters subscribe to it.
    pub(super) changes: watch::Sender<u64>,
    /// Whether `run_until` was called: until then nothing will ever run.
    started: AtomicBool,
    /// The streams no consumer reads, and whether each is ensured now.
    streams: Vec<(String, AtomicBool)>,
    /// Woken when a handler's publish finds no stream.
    pub(crate) stream_missing: Arc<tokio::sync::Notify>,
    /// Declarations older than the version stamped on the server (not applied).
    older: OlderDeclarations,
    /// Whether JetStream answers through the connection's server.
    pub(crate) reach: jetstream::Reach,
    /// Permission violations the server reported, with who needs the subject.
    pub(crate) denials: Denials,
    /// Whether each declared stream takes writes, as the stream watch last read it.
    pub(crate) writes: WritesRecord,
    /// Whether the runtime verifies instead of provisioning.
    bind_only: bool,
    /// When the runtime was built.
    pub(crate) built: tokio::time::Instant,
}

impl Shared {
    pub(crate) fn new(unread_streams: impl IntoIterator<Item = String>) -> Self {
        Shared {
            changes: watch::Sender::new(0),
            started: AtomicBool::new(false),
            streams: unread_streams
                .into_iter()
                .map(|name| (name, AtomicBool::new(false)))
                .collect(),
            stream_missing: Arc::default(),
            older: Default::default(),
            reach: Default::default(),
            denials: Default::default(),
            writes: Default::default(),
            bind_only: false,
            built: tokio::time::Instant::now(),
        }
    }

    /// Shows in health that the runtime verifies instead of provisioning.
    pub(crate) fn bind_only(mut self, bind_only: bool) -> Self {
        self.bind_only = bind_only;
        self
    }

    /// Watches whether the streams `writes` names take writes.
    pub(crate) fn with_writes(mut self, writes: WritesRecord) -> Self {
        self.writes = writes;
        self
    }

    /// Shows in health the older declarations `older` records.
    pub(crate) fn with_older(mut self, older: OlderDeclarations) -> Self {
        self.older = older;
        self
    }

    pub(crate) fn changed(&self) {
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Records that `run_until` was called.
    pub(crate) fn start(&self) {
        self.started.store(true, Ordering::Relaxed);
        self.changed();
    }

    pub(crate) fn started(&self) -> bool {
        self.started.load(Ordering::Relaxed)
    }

    /// Records whether the stream `name` (one no consumer reads) is there now.
    pub(crate) fn set_stream_ensured(&self, name: &str, ensured: bool) {
        if let Some((_, flag)) = self.streams.iter().find(|(n, _)| n == name)
            && flag.swap(ensured, Ordering::Relaxed) != ensured
        {
            self.changed();
        }
    }
}

/// A stream no consumer of this service reads (it only publishes to it): whether it is there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamStatus {
    /// The stream.
    pub stream: String,
    /// Whether it was ensured and has not been found missing since.
    pub ensured: bool,
}

/// Why [`Health::wait_ready`] returned without readiness: the state at its deadline.
#[derive(Debug, Clone, thiserror::Error)]
#[error("not ready after {waited:?}; {state}")]
pub struct NotReady {
    waited: Duration,
    state: String,
}

/// A cheap, cloneable view of every consumer's state, for readiness probes and dashboards.
///
/// ```no_run
/// # async fn f(runtime: nats_topology::Runtime) -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
///
/// let health = runtime.health();
/// tokio::spawn(runtime.run_until(tokio::signal::ctrl_c()));
/// health.wait_ready(Duration::from_secs(30)).await?; // every consumer runs
/// tokio::spawn(async move {
///     loop {
///         health.changed().await;
///         if !health.ready() {
///             eprintln!("{health}");
///         }
///     }
/// });
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Health {
    pub(crate) slots: Arc<[Arc<Slot>]>,
    /// One per endpoint, in the topology's order.
    pub(crate) endpoints: Arc<[Arc<ServeSlot>]>,
    /// One per core subscription, in the topology's order.
    pub(crate) subscriptions: Arc<[Arc<ServeSlot>]>,
    pub(crate) shared: Arc<Shared>,
}

impl Health {
    /// True only while every consumer runs (queue consumers and broadcast relays), every
    /// endpoint and core subscription runs, and every stream no consumer reads is there; a
    /// service with none of them is ready once started.
    ///
    /// A consumer runs once the server delivers to this instance: a pull consumer's first
    /// pull request reached the consumer (on a cluster, a consumer another instance has just
    /// created may refuse it for a few milliseconds, until its leader is known), a push
    /// consumer's subscription is in place. From then on the server
    /// hands this instance its share of the consumer's messages. A pinned-client consumer
    /// that stands by (`standby`: another instance is pinned) counts as ready: its requests
    /// are held by the server, and it takes over when the pin moves.
    ///
    /// An endpoint or subscription runs once a round trip through the server after
    /// subscribing (a request to this instance's own `$SRV.PING.<service>.<id>`, or to a
    /// probe subject of its own) proved the subscription there; a probe every heartbeat keeps
    /// proving it, so a stalled link or a lost connection makes it not ready.
    pub fn ready(&self) -> bool {
        self.shared.started()
            && self.shared.denials.all().is_empty()
            && self.slots.iter().all(|s| s.state().is_up())
            && self
                .endpoints
                .iter()
                .chain(self.subscriptions.iter())
                .all(|s| s.state().is_up())
            && self
                .shared
                .streams
                .iter()
                .all(|(_, ensured)| ensured.load(Ordering::Relaxed))
    }

    /// Waits for the next change of any consumer's state or stream's presence.
    pub async fn changed(&self) {
        let mut changes = self.shared.changes.subscribe();
        // The sender lives as long as this handle: `changed` fails only if it is dropped.
        let _ = changes.changed().await;
    }

    /// Waits until [`Health::ready`], at most `timeout`; the error shows the state then.
    pub async fn wait_ready(&self, timeout: Duration) -> Result<(), NotReady> {
        let waited = tokio::time::timeout(timeout, async {
            let mut changes = self.shared.changes.subscribe();
            // Subscribed before checking: a change between the check and the wait wakes it.
            while !self.ready() {
                let _ = changes.changed().await;
            }
        })
        .await;
        waited.map_err(|_| NotReady {
            waited: timeout,
            state: self.to_string(),
        })
    }

    /// A snapshot of every consumer.
    pub fn consumers(&self) -> Vec<ConsumerStatus> {
        self.slots.iter().map(|s| s.status()).collect()
    }

    /// A snapshot of every endpoint of the services this runtime serves, in the topology's
    /// order (by service, then subject).
    ///
    /// ```no_run
    /// # async fn f(runtime: nats_topology::Runtime) {
    /// let health = runtime.health();
    /// let answered: u64 = health.endpoints().iter().map(|e| e.requests).sum();
    /// # let _ = answered; }
    /// ```
    pub fn endpoints(&self) -> Vec<EndpointStatus> {
        self.endpoints
            .iter()
            .filter_map(|s| s.endpoint_status())
            .collect()
    }

    /// A snapshot of every core subscription this runtime serves, in the topology's order (by
    /// subject).
    pub fn subscriptions(&self) -> Vec<SubscriptionStatus> {
        self.subscriptions
            .iter()
            .filter_map(|s| s.subscription_status())
            .collect()
    }

    /// Every endpoint's and subscription's slot.
    pub(crate) fn serve_slots(&self) -> impl Iterator<Item = &Arc<ServeSlot>> {
        self.endpoints.iter().chain(self.subscriptions.iter())
    }

    /// The streams and queue consumers whose declaration here is older than the version
    /// stamped on the server ("declared by an older version"): their editable settings were
    /// left as the newer version set them. Expected while a rolling deploy runs old and new
    /// versions side by side; an instance still listing them afterwards runs old code.
    pub fn older_declarations(&self) -> Vec<OlderDeclaration> {
        self.shared.older.all()
    }

    /// Whether JetStream answers through the server the runtime's connection is on, and
    /// what the runtime did about it when it did not.
    pub fn jetstream(&self) -> JetStreamStatus {
        self.shared.reach.status()
    }

    /// The permission violations the server reported on the runtime's connection, each with
    /// the permission that is missing and the declarations that need it; while there is one
    /// the runtime is not [`ready`](Health::ready). The server reports a denied subject once
    /// per connection, so a denial stays until the connection is established again (then
    /// what still is denied is reported again). Known only on a
    /// connection made by [`connect`](crate::connect()) (or its siblings), whose event callback
    /// the runtime reads.
    pub fn denials(&self) -> Vec<PermissionDenial> {
        self.shared.denials.all()
    }

    /// Whether the runtime only verifies its streams and queue consumers (an operator
    /// provisions them): [`RuntimeBuilder::bind_only`](crate::RuntimeBuilder::bind_only).
    pub fn bind_only(&self) -> bool {
        self.shared.bind_only
    }

    /// Whether each declared stream takes writes, as the runtime last read it (its info,
    /// every two heartbeats, and at once when a handler's publish gets no acknowledgement).
    /// A stream without a leader, or whose leader reaches too few of its replicas, takes no
    /// writes: a handler's publish there waits, and fails after the publish retry with an
    /// error that names the stream and this state. It does not make the runtime not
    /// [`ready`](Health::ready): the replica is healthy, the stream is not, and another
    /// replica would see the same.
    ///
    /// ```no_run
    /// # fn f(health: nats_topology::Health) {
    /// for stream in health.stream_writes() {
    ///     if !stream.writes.taken() {
    ///         eprintln!("{stream}"); // what it says, for how long, and what an operator does
    ///     }
    /// }
    /// # }
    /// ```
    pub fn stream_writes(&self) -> Vec<StreamWrites> {
        self.shared.writes.all()
    }

    /// The streams no consumer reads, and whether each is there.
    pub fn streams(&self) -> Vec<StreamStatus> {
        self.shared
            .streams
            .iter()
            .map(|(stream, ensured)| StreamStatus {
                stream: stream.clone(),
                ensured: ensured.load(Ordering::Relaxed),
            })
            .collect()
    }
}

impl fmt::Display for Health {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ready: {}", self.ready())?;
        if !self.shared.started() {
            write!(f, " (not started: call `run_until`)")?;
        }
        if self.shared.bind_only {
            write!(
                f,
                " (bind-only: streams and queue consumers are verified, not provisioned)"
            )?;
        }
        writeln!(f)?;
        for status in self.consumers() {
            writeln!(f, "  {status}")?;
        }
        for status in self.endpoints() {
            writeln!(f, "  {status}")?;
        }
        for status in self.subscriptions() {
            writeln!(f, "  {status}")?;
        }
        for status in self.streams() {
            let state = if status.ensured {
                "ensured"
            } else {
                "NOT THERE"
            };
            writeln!(
                f,
                "  stream {} (published to, not consumed): {state}",
                status.stream
            )?;
        }
        for stream in self.stream_writes() {
            if !stream.writes.taken() {
                writeln!(f, "  {stream}")?;
            }
        }
        for older in self.older_declarations() {
            writeln!(f, "  {older}")?;
        }
        for denial in self.denials() {
            writeln!(f, "  {denial}")?;
        }
        let jetstream = self.jetstream();
        if !jetstream.reachable || jetstream.moves > 0 {
            writeln!(f, "  {jetstream}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Health {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Health")
            .field("ready", &self.ready())
            .field("consumers", &self.consumers())
            .field("endpoints", &self.endpoints())
            .field("subscriptions", &self.subscriptions())
            .field("streams", &self.streams())
            .field("stream_writes", &self.stream_writes())
            .field("jetstream", &self.jetstream())
            .field("denials", &self.denials())
            .finish()
    }
}
