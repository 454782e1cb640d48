//! Per-consumer state and counters, readable at any time through a cheap [`Health`] handle.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// What a consumer is doing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConsumerState {
    /// Not started yet.
    Starting,
    /// Ensuring its stream and consumer on the server.
    Provisioning,
    /// Consuming.
    Running,
    /// Not running; retrying after a failure.
    Retrying {
        /// Consecutive failed attempts.
        attempt: u32,
        /// The last failure.
        error: String,
    },
    /// Shutting down: no new messages, in-flight ones finishing.
    Draining,
    /// Stopped (after a drain, or a failure that retrying cannot fix).
    Stopped {
        /// Why it stopped, if not by a drain.
        error: Option<String>,
    },
}

impl fmt::Display for ConsumerState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConsumerState::Starting => f.write_str("starting"),
            ConsumerState::Provisioning => f.write_str("provisioning"),
            ConsumerState::Running => f.write_str("running"),
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
    /// The queue consumer's ack floor (every stream sequence up to it is acknowledged) when
    /// last read from the server; 0 for relays and before the first read.
    pub ack_floor: u64,
}

impl fmt::Display for ConsumerStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{} ({}): {}; handled {}, failed {}, retried {}, dead-lettered {}",
            self.stream,
            self.consumer,
            self.handler,
            self.state,
            self.handled,
            self.failed,
            self.retried,
            self.dead_lettered
        )
    }
}

pub(crate) struct Slot {
    /// Wakes the supervisor out of its backoff (a relay's `ensure()`).
    pub(crate) wake: tokio::sync::Notify,
    /// Whether the consumer is running, for waiters.
    pub(crate) running: tokio::sync::watch::Sender<bool>,
    /// Since when it has not been running, and when that was last reported as an error.
    pub(crate) down: Mutex<(Option<Instant>, Option<Instant>)>,
    pub(crate) stream: String,
    pub(crate) consumer: Mutex<String>,
    pub(crate) handler: String,
    pub(crate) queue: bool,
    state: Mutex<(ConsumerState, Instant)>,
    pub(crate) handled: AtomicU64,
    pub(crate) failed: AtomicU64,
    pub(crate) retried: AtomicU64,
    pub(crate) dead_lettered: AtomicU64,
    pub(crate) ack_floor: AtomicU64,
}

impl Slot {
    pub(crate) fn new(stream: &str, consumer: &str, handler: &str, queue: bool) -> Self {
        Slot {
            wake: tokio::sync::Notify::new(),
            running: tokio::sync::watch::Sender::new(false),
            down: Mutex::new((Some(Instant::now()), None)),
            stream: stream.to_owned(),
            consumer: Mutex::new(consumer.to_owned()),
            handler: handler.to_owned(),
            queue,
            state: Mutex::new((ConsumerState::Starting, Instant::now())),
            handled: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            retried: AtomicU64::new(0),
            dead_lettered: AtomicU64::new(0),
            ack_floor: AtomicU64::new(0),
        }
    }

    /// Sets the state; returns the previous one and how long it lasted.
    pub(crate) fn set(&self, state: ConsumerState) -> (ConsumerState, std::time::Duration) {
        let mut guard = self.state.lock().unwrap_or_else(|e| e.into_inner());
        self.running
            .send_replace(matches!(state, ConsumerState::Running));
        let previous = std::mem::replace(&mut *guard, (state, Instant::now()));
        (previous.0, previous.1.elapsed())
    }

    pub(crate) fn state(&self) -> ConsumerState {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .0
            .clone()
    }

    pub(crate) fn count(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    fn status(&self) -> ConsumerStatus {
        ConsumerStatus {
            stream: self.stream.clone(),
            consumer: self
                .consumer
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
            handler: self.handler.clone(),
            queue: self.queue,
            state: self.state(),
            handled: self.handled.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            retried: self.retried.load(Ordering::Relaxed),
            dead_lettered: self.dead_lettered.load(Ordering::Relaxed),
            ack_floor: self.ack_floor.load(Ordering::Relaxed),
        }
    }
}

/// A cheap, cloneable view of every consumer's state, for readiness probes and dashboards.
///
/// ```no_run
/// # async fn f(runtime: nats_topology::Runtime) {
/// let health = runtime.health();
/// tokio::spawn(async move {
///     loop {
///         if !health.ready() {
///             eprintln!("{health}");
///         }
///         tokio::time::sleep(std::time::Duration::from_secs(5)).await;
///     }
/// });
/// # }
/// ```
#[derive(Clone)]
pub struct Health {
    pub(crate) slots: Arc<[Arc<Slot>]>,
}

impl Health {
    /// True only while every queue consumer is running.
    pub fn ready(&self) -> bool {
        self.slots
            .iter()
            .filter(|s| s.queue)
            .all(|s| s.state() == ConsumerState::Running)
    }

    /// A snapshot of every consumer.
    pub fn consumers(&self) -> Vec<ConsumerStatus> {
        self.slots.iter().map(|s| s.status()).collect()
    }
}

impl fmt::Display for Health {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "ready: {}", self.ready())?;
        for status in self.consumers() {
            writeln!(f, "  {status}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Health {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Health")
            .field("ready", &self.ready())
            .field("consumers", &self.consumers())
            .finish()
    }
}
