//! What a consumer is doing ([`ConsumerState`]) and a snapshot of its counters
//! ([`ConsumerStatus`]).

use std::fmt;
use std::time::Duration;

/// What a consumer is doing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConsumerState {
    /// Not started yet.
    Starting,
    /// Ensuring its stream and consumer on the server.
    Provisioning,
    /// Consuming: the server delivers to this instance (see [`Health::ready`]).
    ///
    /// [`Health::ready`]: super::Health::ready
    Running,
    /// Ready, and standing by: a queue consumer with `priority = "pinned_client"` whose pull
    /// requests the server holds while another instance is pinned. It counts as ready (see
    /// [`Health::ready`]): it takes over, without a restart, as soon as the server pins it
    /// (the pinned instance stopped pulling for `pinned_ttl`, or drained and unpinned). A
    /// green probe thus means "this replica consumes now, or stands ready to".
    ///
    /// [`Health::ready`]: super::Health::ready
    Standby,
    /// An ordered replay (`#[broadcast(ordered)]`) catching up: it consumes, but has not yet
    /// handled every message the stream held when its session began. Not ready (see
    /// [`Health::ready`]): the read model it builds is not complete. It runs once it has
    /// handled a message with nothing left after it.
    ///
    /// [`Health::ready`]: super::Health::ready
    Replaying {
        /// Messages left to handle after the last one handled (the consumer's pending count).
        behind: u64,
    },
    /// Its session is open, but nothing has come from the server for more than two idle
    /// heartbeats: a stalled link, a partition, or a consumer whose leader is lost. Not
    /// running: nothing says that this instance consumes now. It runs again as soon as the
    /// server is heard (the runtime pulls again when the consumer answers, and moves to
    /// another listed server when this one cannot reach JetStream; see docs/FAULTS.md).
    Stalled {
        /// How long nothing had come from the server when this was last updated (at least
        /// every heartbeat while it lasts).
        silent_for: Duration,
        /// What the runtime found, and what it does about it.
        cause: String,
    },
    /// Its handlers fail transiently at a high rate, so what they depend on must be down (see
    /// [`RuntimeBuilder::outage`](crate::RuntimeBuilder::outage)): it takes no messages but
    /// one probe at a growing interval (what failed is delivered again only to a probe, so no
    /// message nears `max_deliver`); the first success resumes at full speed. Counts as ready: the replica is healthy, its dependency is not.
    BackingOff {
        /// How many handlers failed, since when, the next probe, and the last error.
        cause: String,
    },
    /// The consumer's wait list is full: as many pull requests as its `max_waiting` (512 by
    /// the server's default) wait there already, other replicas' requests, so the server
    /// refuses this replica's ("Exceeded MaxWaiting") and delivers it nothing. Not ready: it
    /// asks again at a growing interval (at most every 5 s), and runs once a request of its
    /// own is admitted. A fleet larger than the wait list leaves some replicas here: declare
    /// a larger `max_waiting` (through `migrate_from` on an existing consumer; the server
    /// cannot change it in place).
    Crowded {
        /// What the server said, and what to do.
        cause: String,
    },
    /// The server refuses what this consumer needs to take messages (its acks, its pull
    /// requests, or the requests that create or read it): it takes no message it could not
    /// settle, and is not ready, until the grant works again (checked every heartbeat; a
    /// server that reloaded its configuration is noticed then, or at the reconnection).
    Denied {
        /// The entry of the generated permissions to grant (`publish $JS.ACK.ORDERS.billing.>`).
        permission: String,
        /// What the runtime does meanwhile.
        cause: String,
    },
    /// Not running; retrying after a failure.
    Retrying {
        /// Consecutive failed attempts.
        attempt: u32,
        /// The last failure.
        error: String,
    },
    /// Shutting down: no new messages, in-flight ones finishing.
    Draining,
    /// The consumer a partitioned group migrated from (`migrate_from` on a partitioned
    /// consumer), read to its end and deleted: nothing is left to consume from it, and the
    /// group's partitions took over. Counts as ready.
    Retired,
    /// Stopped (after a drain, or a failure that retrying cannot fix).
    Stopped {
        /// Why it stopped, if not by a drain.
        error: Option<String>,
    },
}

impl ConsumerState {
    /// Whether it counts as ready: running, or a ready standby.
    pub fn is_up(&self) -> bool {
        matches!(
            self,
            ConsumerState::Running
                | ConsumerState::Standby
                | ConsumerState::BackingOff { .. }
                | ConsumerState::Retired
        )
    }
}

impl ConsumerState {
    /// Logs the change from `previous` to this state once, at a level that fits it (a state
    /// repeated with new details only at DEBUG).
    pub(crate) fn log_change(&self, previous: &ConsumerState, stream: &str, consumer: &str) {
        let state = self;
        if std::mem::discriminant(previous) == std::mem::discriminant(state) {
            match state {
                ConsumerState::Retrying { attempt, error } => {
                    tracing::debug!(stream = %stream, consumer, attempt, error, "consumer still not running; retrying");
                }
                ConsumerState::Stalled { silent_for, cause } if previous != state => {
                    tracing::debug!(stream = %stream, consumer, ?silent_for, cause, "consumer still stalled");
                }
                _ => {}
            }
            return;
        }
        match state {
            ConsumerState::Retrying { attempt, error } => {
                tracing::warn!(stream = %stream, consumer, attempt, error, "consumer not running; retrying")
            }
            ConsumerState::Stopped { error: Some(error) } => {
                tracing::error!(stream = %stream, consumer, error, "consumer stopped")
            }
            ConsumerState::Stalled { silent_for, cause } => {
                tracing::warn!(stream = %stream, consumer, ?silent_for, cause, "consumer stalled: nothing from the server")
            }
            ConsumerState::BackingOff { cause } => {
                tracing::warn!(stream = %stream, consumer, cause, "consumer backing off: its handlers keep failing; taking no new messages, probing with one")
            }
            ConsumerState::Denied { permission, cause } => {
                tracing::error!(stream = %stream, consumer, permission, cause, "consumer denied: grant the permission")
            }
            ConsumerState::Crowded { cause } => {
                tracing::warn!(stream = %stream, consumer, cause, "consumer crowded out: the server refuses its pull requests")
            }
            other => {
                tracing::info!(stream = %stream, consumer, state = %other, "consumer state")
            }
        }
    }
}

impl fmt::Display for ConsumerState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConsumerState::Starting => f.write_str("starting"),
            ConsumerState::Provisioning => f.write_str("provisioning"),
            ConsumerState::Running => f.write_str("running"),
            ConsumerState::Standby => f.write_str("standby"),
            ConsumerState::Retired => f.write_str("retired"),
            ConsumerState::Replaying { behind } => write!(f, "replaying ({behind} behind)"),
            ConsumerState::Stalled { silent_for, cause } => {
                write!(
                    f,
                    "stalled (nothing from the server for {silent_for:.1?}): {cause}"
                )
            }
            ConsumerState::BackingOff { cause } => write!(f, "backing off: {cause}"),
            ConsumerState::Crowded { cause } => write!(f, "crowded out: {cause}"),
            ConsumerState::Denied { permission, cause } => {
                write!(f, "denied (grant {permission}): {cause}")
            }
            ConsumerState::Retrying { attempt, error } => {
                write!(f, "retrying (attempt {attempt}): {error}")
            }
            ConsumerState::Draining => f.write_str("draining"),
            ConsumerState::Stopped { error: None } => f.write_str("stopped"),
            ConsumerState::Stopped { error: Some(e) } => write!(f, "stopped: {e}"),
        }
    }
}

/// One consumer's health, as a snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerStatus {
    /// The stream.
    pub stream: String,
    /// The consumer (the group of a queue consumer, the relay name of a broadcast).
    pub consumer: String,
    /// The handler's path.
    pub handler: String,
    /// Whether this is a queue consumer (readiness depends on queue consumers only).
    pub queue: bool,
    /// Its state.
    pub state: ConsumerState,
    /// Messages handled successfully (acked).
    pub handled: u64,
    /// Handler failures (each naked or dead-lettered).
    pub failed: u64,
    /// Failures redelivered later (naked with a delay).
    pub retried: u64,
    /// Messages dead-lettered and terminated.
    pub dead_lettered: u64,
    /// Of `handled`, the messages a partition ran before the server delivered them (see
    /// `RuntimeBuilder::partitions_early`); 0 for other consumers.
    pub early: u64,
    /// The queue consumer's ack floor (every stream sequence up to it is acknowledged) when
    /// last read from the server; 0 for relays and before the first read.
    pub ack_floor: u64,
    /// How many times it stopped running unasked (its consumer, stream or connection lost)
    /// and was ensured again; 0 for a consumer that has run without a break since it started.
    pub restarts: u64,
    /// A permission the server denied on the current connection that this consumer (or its
    /// stream, or every replica) needs: the subject and the missing permission, named. While there
    /// is one, the consumer does not count as working, whatever its state says.
    pub denied: Option<String>,
}

impl fmt::Display for ConsumerStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{} ({}): {}; handled {}, failed {}, retried {}, dead-lettered {}, restarts {}",
            self.stream,
            self.consumer,
            self.handler,
            self.state,
            self.handled,
            self.failed,
            self.retried,
            self.dead_lettered,
            self.restarts
        )?;
        if let Some(denied) = &self.denied {
            write!(f, "; FAILING: {denied}")?;
        }
        Ok(())
    }
}
