//! What a served endpoint or core subscription is doing ([`ServingState`]), and snapshots of
//! them ([`EndpointStatus`], [`SubscriptionStatus`]) with what each served.

use std::fmt;
use std::time::Duration;

/// What an endpoint or a core subscription is doing.
///
/// ```
/// use std::time::Duration;
/// use topology_runtime::ServingState;
///
/// let stalled = ServingState::Stalled {
///     silent_for: Duration::from_secs(6),
///     cause: "no answer to the probe".to_owned(),
/// };
/// assert_eq!(stalled.to_string(), "stalled (no answer for 6.0s): no answer to the probe");
/// assert_eq!(ServingState::Running.to_string(), "running");
/// let denied = ServingState::Denied {
///     permission: "subscribe `members.get` (queue group `q`)".to_owned(),
///     cause: "the server refuses it".to_owned(),
/// };
/// assert_eq!(
///     denied.to_string(),
///     "denied (grant subscribe `members.get` (queue group `q`)): the server refuses it"
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServingState {
    /// Not started yet.
    Starting,
    /// Subscribing, or subscribed and not yet proven on the server by a round trip.
    Subscribing,
    /// Receiving: a round trip after subscribing proved the subscription on the server, and
    /// the periodic probe keeps proving the link (see [`Health::ready`](super::Health::ready)).
    Running,
    /// Subscribed, but the probe got no answer: a stalled link (TCP open, nothing flows) or
    /// a server that does not route. Running again at the next answer.
    Stalled {
        /// How long nothing has been answered.
        silent_for: Duration,
        /// What the probe found.
        cause: String,
    },
    /// The connection is down; the client reconnects and subscribes again, then a round
    /// trip proves it before it runs.
    Disconnected,
    /// The server refused its subscription (`Permissions Violation for Subscription`): nothing
    /// reaches this instance through it, whatever the probe proves of the connection. It
    /// subscribes again every heartbeat and runs once the server accepts (a configuration
    /// reload that grants it, or a reconnection). See [`Health::denials`](super::Health::denials).
    Denied {
        /// The entry of the generated permissions to grant (`subscribe `members.get` (queue
        /// group `q`)`).
        permission: String,
        /// What the runtime does meanwhile.
        cause: String,
    },
    /// Its handlers keep failing with server errors (what they depend on seems down; see
    /// [`RuntimeBuilder::outage`](crate::RuntimeBuilder::outage)): requests are answered at
    /// once with a 503 (the caller retries elsewhere or later) while one probes at a growing
    /// interval, and the first success answers normally again. Counts as running for
    /// readiness: the replica is healthy, its dependency is not.
    BackingOff {
        /// How many handlers failed, since when, the next probe, and the last error.
        cause: String,
    },
    /// Not subscribed; retrying after a failure.
    Retrying {
        /// Consecutive failed attempts.
        attempt: u32,
        /// The last failure.
        error: String,
    },
    /// Shutting down: unsubscribed, answering what it received.
    Draining,
    /// Stopped (after a drain, or a task that ended abnormally).
    Stopped {
        /// Why it stopped, if not by a drain.
        error: Option<String>,
    },
}

impl ServingState {
    /// Whether it counts as ready: running, or backing off (its dependency is down, not it).
    pub fn is_up(&self) -> bool {
        matches!(
            self,
            ServingState::Running | ServingState::BackingOff { .. }
        )
    }
}

impl fmt::Display for ServingState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServingState::Starting => f.write_str("starting"),
            ServingState::Subscribing => f.write_str("subscribing"),
            ServingState::Running => f.write_str("running"),
            ServingState::Stalled { silent_for, cause } => {
                write!(f, "stalled (no answer for {silent_for:.1?}): {cause}")
            }
            ServingState::Disconnected => f.write_str("disconnected"),
            ServingState::Denied { permission, cause } => {
                write!(f, "denied (grant {permission}): {cause}")
            }
            ServingState::BackingOff { cause } => write!(f, "backing off: {cause}"),
            ServingState::Retrying { attempt, error } => {
                write!(f, "retrying (attempt {attempt}): {error}")
            }
            ServingState::Draining => f.write_str("draining"),
            ServingState::Stopped { error: None } => f.write_str("stopped"),
            ServingState::Stopped { error: Some(e) } => write!(f, "stopped: {e}"),
        }
    }
}

/// One endpoint's health, as a snapshot ([`Health::endpoints`](super::Health::endpoints)).
///
/// ```no_run
/// # async fn f(runtime: nats_topology::Runtime) {
/// use topology_runtime::ServingState;
///
/// for endpoint in runtime.health().endpoints() {
///     if endpoint.state != ServingState::Running {
///         // endpoint members/get on members.get (queue group q, app::get_member): stalled ...
///         eprintln!("{endpoint}");
///     }
/// }
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointStatus {
    /// The service.
    pub service: String,
    /// The endpoint's name.
    pub endpoint: String,
    /// The subject its requests are sent to.
    pub subject: String,
    /// The queue group it shares with the other instances.
    pub queue_group: String,
    /// The handler's path.
    pub handler: String,
    /// Its state.
    pub state: ServingState,
    /// Requests answered by this instance (errors included).
    pub requests: u64,
    /// Requests answered with an error (the handler's, a 400, 500 or 504).
    pub errors: u64,
}

impl fmt::Display for EndpointStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "endpoint {}/{} on {} (queue group {}, {}): {}; requests {}, errors {}",
            self.service,
            self.endpoint,
            self.subject,
            self.queue_group,
            self.handler,
            self.state,
            self.requests,
            self.errors
        )
    }
}

/// One core subscription's health, as a snapshot
/// ([`Health::subscriptions`](super::Health::subscriptions)).
///
/// ```no_run
/// # async fn f(runtime: nats_topology::Runtime) {
/// let failed: u64 = runtime.health().subscriptions().iter().map(|s| s.failed).sum();
/// # let _ = failed; }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscriptionStatus {
    /// The subject.
    pub subject: String,
    /// Its queue group (`None`: every instance receives every message).
    pub queue_group: Option<String>,
    /// The handler's path.
    pub handler: String,
    /// Its state.
    pub state: ServingState,
    /// Messages whose handler returned `Ok`.
    pub handled: u64,
    /// Messages whose handler failed (an error, a panic, a payload that did not decode).
    pub failed: u64,
}

impl fmt::Display for SubscriptionStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let fanout = match &self.queue_group {
            Some(group) => format!("queue group {group}"),
            None => "each instance".to_owned(),
        };
        write!(
            f,
            "subscription {} ({fanout}, {}): {}; handled {}, failed {}",
            self.subject, self.handler, self.state, self.handled, self.failed
        )
    }
}
