//! Per-consumer state and counters, readable at any time through a cheap [`Health`] handle.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::watch;

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
    /// How many times it stopped running unasked (its consumer, stream or connection lost)
    /// and was ensured again; 0 for a consumer that has run without a break since it started.
    pub restarts: u64,
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
        )
    }
}

/// One consumer's live state, shared by its supervisor, its handlers and [`Health`]. Only the
/// methods here change its state, so that every change is logged once, at a fitting level.
pub(crate) struct Slot {
    /// Wakes the supervisor out of its backoff (a relay's `ensure()`).
    pub(crate) wake: tokio::sync::Notify,
    /// Whether the consumer is running, for waiters.
    pub(crate) running: tokio::sync::watch::Sender<bool>,
    pub(crate) stream: String,
    /// The consumer's name on the server (the group, or the relay's per-instance name).
    pub(crate) consumer: String,
    handler: String,
    queue: bool,
    /// How long the consumer may be down before that is logged as an error, and how often.
    down_alarm: Duration,
    /// Wakes [`Health`] waiters on every change.
    shared: Arc<Shared>,
    state: Mutex<(ConsumerState, Instant)>,
    /// Since when it has not been running, and when that was last reported as an error.
    down: Mutex<(Option<Instant>, Option<Instant>)>,
    pub(crate) handled: AtomicU64,
    pub(crate) failed: AtomicU64,
    pub(crate) retried: AtomicU64,
    pub(crate) dead_lettered: AtomicU64,
    pub(crate) ack_floor: AtomicU64,
    pub(crate) restarts: AtomicU64,
}

impl Slot {
    pub(crate) fn new(
        stream: &str,
        consumer: &str,
        handler: &str,
        queue: bool,
        down_alarm: Duration,
        shared: Arc<Shared>,
    ) -> Self {
        Slot {
            wake: tokio::sync::Notify::new(),
            running: tokio::sync::watch::Sender::new(false),
            stream: stream.to_owned(),
            consumer: consumer.to_owned(),
            handler: handler.to_owned(),
            queue,
            down_alarm,
            shared,
            state: Mutex::new((ConsumerState::Starting, Instant::now())),
            down: Mutex::new((Some(Instant::now()), None)),
            handled: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            retried: AtomicU64::new(0),
            dead_lettered: AtomicU64::new(0),
            ack_floor: AtomicU64::new(0),
            restarts: AtomicU64::new(0),
        }
    }

    /// Sets the consumer's state and logs the change once, at a level that fits it: a
    /// consumer that has not been running for the down-alarm delay (a minute by default) is
    /// an error, repeated at most once per that delay.
    pub(crate) fn transition(&self, state: ConsumerState) {
        let previous = self.set(state.clone());
        let consumer = self.consumer.as_str();
        let mut down = self.down.lock().unwrap_or_else(|e| e.into_inner());
        match &state {
            ConsumerState::Running => *down = (None, None),
            ConsumerState::Draining | ConsumerState::Stopped { error: None } => {}
            _ => {
                let since = *down.0.get_or_insert_with(Instant::now);
                let alarm_due = since.elapsed() >= self.down_alarm
                    && down.1.is_none_or(|last| last.elapsed() >= self.down_alarm);
                if alarm_due {
                    down.1 = Some(Instant::now());
                    tracing::error!(
                        stream = %self.stream,
                        consumer,
                        down_for = ?since.elapsed(),
                        state = %state,
                        "consumer has not been running for over {:?}: nothing consumes its messages",
                        self.down_alarm
                    );
                    return;
                }
            }
        }
        drop(down);
        if std::mem::discriminant(&previous) == std::mem::discriminant(&state) {
            if let ConsumerState::Retrying { attempt, error } = &state {
                tracing::debug!(stream = %self.stream, consumer, attempt, error, "consumer still not running; retrying");
            }
            return;
        }
        match &state {
            ConsumerState::Retrying { attempt, error } => {
                tracing::warn!(stream = %self.stream, consumer, attempt, error, "consumer not running; retrying")
            }
            ConsumerState::Stopped { error: Some(error) } => {
                tracing::error!(stream = %self.stream, consumer, error, "consumer stopped")
            }
            other => {
                tracing::info!(stream = %self.stream, consumer, state = %other, "consumer state")
            }
        }
    }

    /// Sets the state; returns the previous one.
    fn set(&self, state: ConsumerState) -> ConsumerState {
        let mut guard = self.state.lock().unwrap_or_else(|e| e.into_inner());
        self.running
            .send_replace(matches!(state, ConsumerState::Running));
        let previous = std::mem::replace(&mut *guard, (state, Instant::now())).0;
        drop(guard);
        self.shared.changed();
        previous
    }

    pub(crate) fn state(&self) -> ConsumerState {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .0
            .clone()
    }

    /// Whether the runtime this consumer belongs to was started (`run_until` called).
    pub(crate) fn runtime_started(&self) -> bool {
        self.shared.started()
    }

    pub(crate) fn count(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    fn status(&self) -> ConsumerStatus {
        ConsumerStatus {
            stream: self.stream.clone(),
            consumer: self.consumer.clone(),
            handler: self.handler.clone(),
            queue: self.queue,
            state: self.state(),
            handled: self.handled.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            retried: self.retried.load(Ordering::Relaxed),
            dead_lettered: self.dead_lettered.load(Ordering::Relaxed),
            ack_floor: self.ack_floor.load(Ordering::Relaxed),
            restarts: self.restarts.load(Ordering::Relaxed),
        }
    }
}

/// What every [`Slot`] and [`Health`] handle of one runtime share.
pub(crate) struct Shared {
    /// Counts changes (of any consumer's state, or a stream's); waiters subscribe to it.
    changes: watch::Sender<u64>,
    /// Whether `run_until` was called: until then nothing will ever run.
    started: AtomicBool,
    /// The streams no consumer reads, and whether each is ensured now.
    streams: Vec<(String, AtomicBool)>,
    /// Woken when a handler's publish finds no stream.
    pub(crate) stream_missing: Arc<tokio::sync::Notify>,
    /// Declarations older than the version stamped on the server (not applied).
    older: crate::provision::OlderDeclarations,
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
        }
    }

    /// Shows in health the older declarations `older` records.
    pub(crate) fn with_older(mut self, older: crate::provision::OlderDeclarations) -> Self {
        self.older = older;
        self
    }

    fn changed(&self) {
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
    pub(crate) shared: Arc<Shared>,
}

impl Health {
    /// True only while every consumer runs (queue consumers and broadcast relays) and every
    /// stream no consumer reads is there; a service with neither is ready once started.
    ///
    /// A consumer runs once the server delivers to this instance: a pull consumer's first
    /// pull request reached the consumer (on a cluster, a consumer another instance has just
    /// created may refuse it for a few milliseconds, until its leader is known), a push
    /// consumer's subscription is in place. From then on the server
    /// hands this instance its share of the consumer's messages.
    pub fn ready(&self) -> bool {
        self.shared.started()
            && self
                .slots
                .iter()
                .all(|s| s.state() == ConsumerState::Running)
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

    /// The streams and queue consumers whose declaration here is older than the version
    /// stamped on the server ("declared by an older version"): their editable settings were
    /// left as the newer version set them. Expected while a rolling deploy runs old and new
    /// versions side by side; an instance still listing them afterwards runs old code.
    pub fn older_declarations(&self) -> Vec<crate::provision::OlderDeclaration> {
        self.shared.older.all()
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
        writeln!(f)?;
        for status in self.consumers() {
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
        for older in self.older_declarations() {
            writeln!(f, "  {older}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Health {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Health")
            .field("ready", &self.ready())
            .field("consumers", &self.consumers())
            .field("streams", &self.streams())
            .finish()
    }
}
