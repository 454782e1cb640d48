//! The runtime: builds from a validated topology, provisions, runs one supervised task per
//! consumer, dispatches messages to handlers, and drains on shutdown.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::consumer::{self, FromConsumer, push};
use async_nats::jetstream::{self, AckKind, stream};
use futures::{FutureExt, StreamExt};
use tokio::sync::{Mutex, mpsc};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::handler::{Context, HandlerError, Incoming, Scope, StateMap};
use crate::health::{ConsumerState, Health, Slot};
use crate::provision::{ProvisionError, ProvisionErrorKind, Provisioner, UpdateMode};
use crate::registry::{Consumer, SharedHandler, Topology};
use crate::retry::{RetryPolicy, full_jitter};
use crate::validate::{self, ValidationError};
use topology_core::model::{ConsumerKind, Delivery, StreamDecl};

/// Why [`Runtime::run_until`] returned an error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// A consumer could not be provisioned and retrying cannot fix it (a configuration
    /// conflict, or a declaration the server refuses).
    #[error(transparent)]
    Provision(#[from] ProvisionError),
}

/// A handle on one broadcast relay; see [`Runtime::relay`].
#[derive(Clone)]
pub struct Relay {
    slot: Arc<Slot>,
}

/// Why [`Relay::ensure`] failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the relay `{consumer}` on stream `{stream}` is not supervised: the runtime is not running (start it with `run_until`)"
)]
pub struct RelayError {
    stream: String,
    consumer: String,
}

impl Relay {
    /// Makes sure the relay runs. While it runs this returns at once, with no round trip.
    /// Otherwise its supervisor is woken to re-create it now (skipping any backoff) and this
    /// waits until it runs; concurrent callers share that one re-creation. Fails if the
    /// runtime has stopped or is draining.
    pub async fn ensure(&self) -> Result<(), RelayError> {
        let mut running = self.slot.running.subscribe();
        if *running.borrow_and_update() {
            return Ok(());
        }
        // One wake-up per call: waking on every state change would cut every backoff short
        // and spin against a stream that is not there yet.
        self.slot.wake.notify_one();
        loop {
            if *running.borrow_and_update() {
                return Ok(());
            }
            if matches!(
                self.slot.state(),
                ConsumerState::Draining | ConsumerState::Stopped { .. }
            ) {
                return Err(self.not_running());
            }
            if running.changed().await.is_err() {
                return Err(self.not_running());
            }
        }
    }

    /// Whether the relay is running now.
    pub fn is_running(&self) -> bool {
        *self.slot.running.borrow()
    }

    /// The relay's consumer name on the server (unique per instance).
    pub fn consumer(&self) -> String {
        self.slot
            .consumer
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn not_running(&self) -> RelayError {
        RelayError {
            stream: self.slot.stream.clone(),
            consumer: self.consumer(),
        }
    }
}

/// What [`Runtime::provision`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProvisionReport {
    /// Provisioning attempts made (one per stream and consumer when nothing failed).
    pub attempts: u32,
    /// How long it took.
    pub elapsed: Duration,
}

/// Configures a [`Runtime`]; see [`Runtime::builder`].
pub struct RuntimeBuilder {
    client: async_nats::Client,
    topology: Option<Topology>,
    state: StateMap,
    retry: RetryPolicy,
    grace_period: Duration,
    heartbeat: Duration,
    expires: Duration,
    pull_batch: Option<usize>,
}

impl RuntimeBuilder {
    /// Runs this topology instead of the one the macros registered.
    pub fn topology(mut self, topology: Topology) -> Self {
        self.topology = Some(topology);
        self
    }

    /// Makes `value` available to handlers as `cx.state::<T>()`; one value per type.
    pub fn state<T: std::any::Any + Send + Sync>(mut self, value: T) -> Self {
        self.state.insert(value);
        self
    }

    /// How provisioning retries transient failures (default: [`RetryPolicy::default`]).
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    /// How long a drain waits for in-flight handlers (default 30 s). Messages whose handler
    /// has not finished by then are left unacknowledged: the server redelivers them.
    pub fn grace_period(mut self, grace: Duration) -> Self {
        self.grace_period = grace;
        self
    }

    /// The idle heartbeat of pull requests (default 5 s): three missed heartbeats make a
    /// consumer re-ensure itself (the consumer or its stream may be gone).
    pub fn heartbeat(mut self, heartbeat: Duration) -> Self {
        self.heartbeat = heartbeat;
        self
    }

    /// How long one pull request waits on the server (default 30 s).
    pub fn pull_expires(mut self, expires: Duration) -> Self {
        self.expires = expires;
        self
    }

    /// The most messages one pull request asks for (default: the consumer's concurrency).
    /// The runtime asks only for what it can start now, so by default nothing waits in this
    /// instance while its `ack_wait` runs. A batch larger than the concurrency trades that for
    /// fewer round trips: up to a batch of messages is fetched ahead and waits here (their
    /// `ack_wait` running, no progress acks) while others are handled.
    pub fn pull_batch(mut self, batch: usize) -> Self {
        self.pull_batch = Some(batch.max(1));
        self
    }

    /// Validates the topology (every problem at once) and builds the runtime.
    pub fn build(self) -> Result<Runtime, ValidationError> {
        let topology = self.topology.unwrap_or_else(Topology::from_registry);
        validate::validate(&topology)?;
        let instance = instance_id();
        let slots: Vec<Arc<Slot>> = topology
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
                ))
            })
            .collect();
        let streams = topology
            .streams()
            .iter()
            .map(|s| (s.name.to_owned(), Arc::new(Mutex::new(None))))
            .collect();
        let provisioner = Provisioner::new(self.client.clone(), self.retry);
        Ok(Runtime {
            inner: Arc::new(Inner {
                client: self.client,
                topology,
                state: self.state,
                retry: self.retry,
                grace_period: self.grace_period,
                heartbeat: self.heartbeat,
                expires: self.expires,
                pull_batch: self.pull_batch,
                health: Health {
                    slots: slots.into(),
                },
                instance,
                provisioner,
                streams,
            }),
        })
    }
}

/// Runs a topology: provisions it, supervises every consumer, drains on shutdown.
///
/// ```no_run
/// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
/// let client = async_nats::connect("nats://127.0.0.1:4222").await?;
/// let runtime = nats_topology::Runtime::builder(client).build()?;
/// let health = runtime.health(); // for a readiness probe
/// runtime.run_until(tokio::signal::ctrl_c()).await?;
/// # Ok(()) }
/// ```
pub struct Runtime {
    inner: Arc<Inner>,
}

struct Inner {
    client: async_nats::Client,
    topology: Topology,
    state: StateMap,
    retry: RetryPolicy,
    grace_period: Duration,
    heartbeat: Duration,
    expires: Duration,
    pull_batch: Option<usize>,
    health: Health,
    instance: String,
    provisioner: Provisioner,
    /// Per stream: its info once ensured. The mutex makes ensuring single-flight.
    streams: HashMap<String, Arc<Mutex<Option<async_nats::jetstream::stream::Info>>>>,
}

impl Runtime {
    /// A builder for a runtime on `client`, running what the macros registered.
    pub fn builder(client: async_nats::Client) -> RuntimeBuilder {
        RuntimeBuilder {
            client,
            topology: None,
            state: StateMap::default(),
            retry: RetryPolicy::default(),
            grace_period: Duration::from_secs(30),
            heartbeat: Duration::from_secs(5),
            expires: Duration::from_secs(30),
            pull_batch: None,
        }
    }

    /// A cheap handle on every consumer's state.
    pub fn health(&self) -> Health {
        self.inner.health.clone()
    }

    /// The topology this runtime runs.
    pub fn topology(&self) -> &Topology {
        &self.inner.topology
    }

    /// The broadcast relay handled by `handler` (its function name, or its full path when
    /// several relays share a name), as a cheap handle that stays valid while
    /// [`Runtime::run_until`] runs.
    ///
    /// ```no_run
    /// # async fn f(runtime: nats_topology::Runtime) {
    /// let relay = runtime.relay("relay_status").expect("a #[broadcast] fn relay_status");
    /// tokio::spawn(runtime.run_until(tokio::signal::ctrl_c()));
    /// // When a local session subscribes:
    /// relay.ensure().await.expect("the runtime is running");
    /// # }
    /// ```
    pub fn relay(&self, handler: &str) -> Option<Relay> {
        let suffix = format!("::{handler}");
        let mut found = self
            .inner
            .topology
            .consumers()
            .iter()
            .zip(self.inner.health.slots.iter())
            .filter(|(c, _)| matches!(c.decl.kind, ConsumerKind::Broadcast(_)))
            .filter(|(c, _)| c.decl.handler == handler || c.decl.handler.ends_with(&suffix));
        let (_, slot) = found.next()?;
        if found.next().is_some() {
            return None;
        }
        Some(Relay { slot: slot.clone() })
    }

    /// Provisions every stream and queue consumer once, without consuming: streams
    /// single-flight, consumers concurrently, transient failures retried under the retry
    /// policy's deadline. Useful for an init job, and to measure provisioning.
    /// [`Runtime::run_until`] does the same for each consumer before consuming.
    pub async fn provision(&self) -> Result<ProvisionReport, ProvisionError> {
        let started = std::time::Instant::now();
        let deadline = tokio::time::Instant::now() + self.inner.retry.deadline;
        let streams = self.inner.topology.streams().iter().map(|s| {
            self.inner
                .until_deadline(deadline, || self.inner.ensure_stream(s))
        });
        futures::future::try_join_all(streams).await?;
        let queues = self
            .inner
            .topology
            .consumers()
            .iter()
            .filter(|c| c.decl.as_queue().is_some())
            .map(|c| {
                self.inner
                    .until_deadline(deadline, || self.inner.ensure(c, None, UpdateMode::Update))
            });
        futures::future::try_join_all(queues).await?;
        Ok(ProvisionReport {
            attempts: self.inner.provisioner.attempts(),
            elapsed: started.elapsed(),
        })
    }

    /// What provisioning would do (create, update which fields, nothing, conflict), read
    /// from the server without changing anything.
    pub async fn plan(&self) -> Result<crate::report::Plan, ProvisionError> {
        crate::report::plan(&self.inner.client, &self.inner.topology).await
    }

    /// For every declared queue consumer: does it exist, is anyone consuming, what is
    /// pending, where is its ack floor.
    pub async fn inspect(&self) -> Result<crate::report::Inspection, ProvisionError> {
        crate::report::inspect(&self.inner.client, &self.inner.topology).await
    }

    /// Provisions and runs every consumer until `shutdown` completes, then drains: stops
    /// fetching, lets in-flight handlers finish (within the grace period), flushes acks,
    /// deletes relays.
    ///
    /// Transient failures (broker down, timeouts, a deleted consumer) are retried forever.
    /// Returns an error only for a failure no retry can fix, such as a configuration conflict
    /// with what the server holds; the other consumers are drained first.
    pub async fn run_until<F: Future>(self, shutdown: F) -> Result<(), RunError> {
        self.run(shutdown, std::future::pending::<()>()).await
    }

    /// Like [`Runtime::run_until`], on the process's signals: the first SIGINT (Ctrl-C) or
    /// SIGTERM drains; a second one during the drain stops waiting for handlers at once
    /// (their messages are redelivered by the server).
    pub async fn run_until_signal(self) -> Result<(), RunError> {
        // Listen before anything else: a signal that arrives while provisioning must drain,
        // not kill the process with the default action.
        let mut signals = ShutdownSignals::listen();
        let (first_tx, first_rx) = tokio::sync::oneshot::channel::<()>();
        let (second_tx, second_rx) = tokio::sync::oneshot::channel::<()>();
        let listener = tokio::spawn(async move {
            signals.next().await;
            let _ = first_tx.send(());
            signals.next().await;
            tracing::warn!("second signal: stopping without waiting for in-flight handlers");
            let _ = second_tx.send(());
        });
        let outcome = self
            .run(
                async move {
                    let _ = first_rx.await;
                },
                async move {
                    let _ = second_rx.await;
                },
            )
            .await;
        listener.abort();
        outcome
    }

    async fn run(self, shutdown: impl Future, force: impl Future) -> Result<(), RunError> {
        let cancel = CancellationToken::new();
        let (fatal_tx, mut fatal_rx) = mpsc::unbounded_channel();
        let mut tasks = JoinSet::new();
        for index in 0..self.inner.topology.consumers().len() {
            tasks.spawn(supervise(
                self.inner.clone(),
                index,
                cancel.clone(),
                fatal_tx.clone(),
            ));
        }
        // Streams no consumer reads (this service only publishes to them) are ensured too.
        let unread: Vec<StreamDecl> = self
            .inner
            .topology
            .streams()
            .iter()
            .filter(|s| {
                !self
                    .inner
                    .topology
                    .consumers()
                    .iter()
                    .any(|c| c.decl.stream.name() == s.name)
            })
            .copied()
            .collect();
        for stream in unread {
            tasks.spawn(ensure_unread_stream(
                self.inner.clone(),
                stream,
                cancel.clone(),
                fatal_tx.clone(),
            ));
        }
        drop(fatal_tx);
        let fatal = tokio::select! {
            _ = shutdown => None,
            Some(error) = fatal_rx.recv() => Some(error),
        };
        tracing::info!("draining consumers");
        cancel.cancel();
        let drained = async {
            while let Some(joined) = tasks.join_next().await {
                if let Err(e) = joined {
                    tracing::error!(error = %e, "a consumer supervisor ended abnormally");
                }
            }
        };
        tokio::select! {
            _ = drained => {}
            _ = force => tasks.abort_all(),
        }
        if let Err(e) = self.inner.client.flush().await {
            tracing::warn!(error = %e, "could not flush acknowledgements on shutdown");
        }
        match fatal {
            Some(error) => Err(error.into()),
            None => Ok(()),
        }
    }
}

/// SIGINT (Ctrl-C) and SIGTERM, listened to from creation on.
struct ShutdownSignals {
    #[cfg(unix)]
    interrupt: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    terminate: Option<tokio::signal::unix::Signal>,
}

impl ShutdownSignals {
    fn listen() -> Self {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let listen = |kind| match signal(kind) {
                Ok(signal) => Some(signal),
                Err(e) => {
                    tracing::error!(error = %e, "cannot listen for a shutdown signal");
                    None
                }
            };
            ShutdownSignals {
                interrupt: listen(SignalKind::interrupt()),
                terminate: listen(SignalKind::terminate()),
            }
        }
        #[cfg(not(unix))]
        ShutdownSignals {}
    }

    /// The next SIGINT or SIGTERM.
    async fn next(&mut self) {
        #[cfg(unix)]
        {
            async fn recv(signal: &mut Option<tokio::signal::unix::Signal>) {
                match signal {
                    Some(signal) => {
                        signal.recv().await;
                    }
                    None => std::future::pending().await,
                }
            }
            tokio::select! {
                _ = recv(&mut self.interrupt) => {}
                _ = recv(&mut self.terminate) => {}
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// A random id per runtime: relay names must never collide between instances (in containers
/// every process may be pid 1).
fn instance_id() -> String {
    use rand::RngExt;
    format!("{:016x}", rand::rng().random::<u64>())
}

fn relay_name(instance: &str, index: usize) -> String {
    format!("relay_{instance}_{index}")
}

impl Inner {
    fn stream_decl(&self, consumer: &Consumer) -> StreamDecl {
        let name = consumer.decl.stream.name();
        // Validation guarantees a declaration for every stream a consumer names.
        *self
            .topology
            .find_stream(name)
            .expect("validated: every consumer's stream is declared")
    }

    /// Repeats `ensure` while it fails in a way that waiting fixes (an external stream not
    /// deployed yet, a stream that vanished or is still being created) until `deadline`.
    async fn until_deadline<T, F, Fut>(
        &self,
        deadline: tokio::time::Instant,
        mut ensure: F,
    ) -> Result<T, ProvisionError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, ProvisionError>>,
    {
        let mut attempt = 0;
        loop {
            match ensure().await {
                Err(e)
                    if matches!(
                        e.kind(),
                        ProvisionErrorKind::StreamMissing | ProvisionErrorKind::ExternalNotReady
                    ) =>
                {
                    let delay = self.retry.delay(attempt);
                    if tokio::time::Instant::now() + delay >= deadline {
                        return Err(e);
                    }
                    attempt += 1;
                    tokio::time::sleep(delay).await;
                }
                other => return other,
            }
        }
    }

    /// Ensures a stream once (single-flight): later calls reuse the first success.
    async fn ensure_stream(&self, stream: &StreamDecl) -> Result<stream::Info, ProvisionError> {
        let mut ensured = self.streams[stream.name].lock().await;
        if let Some(info) = &*ensured {
            return Ok(info.clone());
        }
        let consumed: Vec<&str> = self
            .topology
            .consumers()
            .iter()
            .filter(|c| c.decl.stream.name() == stream.name)
            .flat_map(|c| c.decl.subjects.iter().copied())
            .collect();
        let info = self.provisioner.ensure_stream(stream, &consumed).await?;
        *ensured = Some(info.clone());
        Ok(info)
    }

    /// Ensures the consumer's stream, then the consumer.
    async fn ensure(
        &self,
        consumer: &Consumer,
        relay: Option<&str>,
        mode: UpdateMode,
    ) -> Result<consumer::Info, ProvisionError> {
        let stream = self.stream_decl(consumer);
        let info = self.ensure_stream(&stream).await?;
        let result = self
            .provisioner
            .ensure_consumer(&info, &consumer.decl, relay, mode)
            .await;
        if let Err(e) = &result
            && e.kind() == ProvisionErrorKind::StreamMissing
        {
            *self.streams[stream.name].lock().await = None;
        }
        result
    }
}

/// Ensures a stream that no consumer reads, retrying transient failures until it succeeds.
async fn ensure_unread_stream(
    inner: Arc<Inner>,
    stream: StreamDecl,
    cancel: CancellationToken,
    fatal: mpsc::UnboundedSender<ProvisionError>,
) {
    let mut failures = 0u32;
    loop {
        let result = tokio::select! {
            r = inner.ensure_stream(&stream) => r,
            _ = cancel.cancelled() => return,
        };
        match result {
            Ok(_) => return,
            Err(e) if e.is_transient() => {
                failures += 1;
                tracing::warn!(stream = stream.name, attempt = failures, error = %e, "stream not provisioned yet; retrying");
            }
            Err(e) => {
                let _ = fatal.send(e);
                return;
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(inner.retry.delay(failures - 1)) => {}
            _ = cancel.cancelled() => return,
        }
    }
}

/// Why consuming stopped.
enum Exit {
    /// Shutdown: drained.
    Drained,
    /// The consumer, its stream or the connection was lost: ensure again and resume.
    Lost(String),
}

async fn supervise(
    inner: Arc<Inner>,
    index: usize,
    cancel: CancellationToken,
    fatal: mpsc::UnboundedSender<ProvisionError>,
) {
    let consumer = &inner.topology.consumers()[index];
    let slot = inner.health.slots[index].clone();
    let relay = match consumer.decl.kind {
        ConsumerKind::Broadcast(_) => Some(relay_name(&inner.instance, index)),
        ConsumerKind::Queue(_) => None,
    };
    let stream = consumer.decl.stream.name();
    let mut mode = UpdateMode::Update;
    let mut failures = 0u32;
    // Handlers outlive the session that started them: a lost consumer is re-ensured at once,
    // while they finish and settle their messages (their acks go to the same durable).
    let mut in_flight = JoinSet::new();
    let abandoned = Abandoned::default();
    // A failure no retry can fix ends the loop too, through the same drain.
    let mut stopped_by: Option<ProvisionError> = None;
    loop {
        transition(&slot, ConsumerState::Provisioning);
        let ensured = tokio::select! {
            r = inner.ensure(consumer, relay.as_deref(), mode) => r,
            _ = cancel.cancelled() => break,
        };
        match ensured {
            Ok(info) => {
                // Updates happen at start-up only; a re-ensure after a loss creates but never
                // updates, so an old instance cannot revert a newer one's configuration.
                let floor = &slot.ack_floor;
                floor.fetch_max(
                    info.ack_floor.stream_sequence,
                    std::sync::atomic::Ordering::Relaxed,
                );
                let (stream_name, name) = (info.stream_name.clone(), info.name.clone());
                transition(&slot, ConsumerState::Running);
                let session = std::time::Instant::now();
                let exit = tokio::select! {
                    exit = consume(
                        &inner,
                        consumer,
                        &slot,
                        info,
                        &cancel,
                        &mut in_flight,
                        &abandoned,
                    ) => exit,
                    never = follow_ack_floor(&inner, &stream_name, &name, floor), if relay.is_none() => match never {},
                };
                mode = UpdateMode::CreateOnly {
                    resume_after: Some(floor.load(std::sync::atomic::Ordering::Relaxed)),
                };
                match exit {
                    Exit::Drained => break,
                    Exit::Lost(reason) => {
                        // A session that ran for a while starts the backoff afresh; one lost
                        // at once keeps backing off.
                        if session.elapsed() >= inner.retry.cap {
                            failures = 0;
                        }
                        failures += 1;
                        transition(
                            &slot,
                            ConsumerState::Retrying {
                                attempt: failures,
                                error: reason,
                            },
                        );
                    }
                }
            }
            Err(e) if e.is_transient() => {
                failures += 1;
                transition(
                    &slot,
                    ConsumerState::Retrying {
                        attempt: failures,
                        error: e.to_string(),
                    },
                );
            }
            Err(e) => {
                stopped_by = Some(e);
                break;
            }
        }
        let delay = inner.retry.delay(failures.saturating_sub(1));
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            // A relay's ensure(): retry at once.
            _ = slot.wake.notified() => {}
            _ = cancel.cancelled() => break,
        }
    }
    match &stopped_by {
        Some(e) => transition(
            &slot,
            ConsumerState::Stopped {
                error: Some(e.to_string()),
            },
        ),
        None => transition(&slot, ConsumerState::Draining),
    }
    finish_in_flight(&mut in_flight, inner.grace_period, &slot).await;
    // Handlers stopped by the grace period settled nothing: return their messages now rather
    // than after their ack_wait.
    let abandoned = std::mem::take(&mut *abandoned.lock().unwrap_or_else(|e| e.into_inner()));
    for reply in abandoned {
        if let Err(e) = inner
            .client
            .publish(reply, bytes::Bytes::from_static(b"-NAK"))
            .await
        {
            tracing::warn!(error = %e, "could not return a message whose handler was stopped");
        }
    }
    if let Some(relay) = &relay
        && let Err(e) = inner.provisioner.delete_consumer(stream, relay).await
    {
        tracing::warn!(stream, consumer = %relay, error = %e, "could not delete the relay on shutdown; the server reaps it after its inactivity threshold");
    }
    match stopped_by {
        Some(e) => {
            let _ = fatal.send(e);
        }
        None => transition(&slot, ConsumerState::Stopped { error: None }),
    }
}

/// Keeps `floor` at the consumer's ack floor on the server, read every two heartbeats (10 s by
/// default), so that a consumer deleted out of band is re-created where it was acknowledged,
/// not at the start of its stream. Never returns.
async fn follow_ack_floor(
    inner: &Inner,
    stream: &str,
    consumer: &str,
    floor: &std::sync::atomic::AtomicU64,
) -> std::convert::Infallible {
    let mut every = tokio::time::interval(inner.heartbeat * 2);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    every.tick().await;
    loop {
        every.tick().await;
        if let Ok(Some(info)) = inner.provisioner.read_consumer(stream, consumer).await {
            floor.fetch_max(
                info.ack_floor.stream_sequence,
                std::sync::atomic::Ordering::Relaxed,
            );
        }
    }
}

/// How long a consumer may be down before it is reported as an error, and how often.
const DOWN_ALARM_AFTER: Duration = Duration::from_secs(60);

/// Sets a consumer's state and logs the change once, at a level that fits it: a consumer that
/// has not been running for a minute is an error, repeated at most once a minute.
fn transition(slot: &Slot, state: ConsumerState) {
    let consumer = slot
        .consumer
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let (previous, _) = slot.set(state.clone());
    let mut down = slot.down.lock().unwrap_or_else(|e| e.into_inner());
    match &state {
        ConsumerState::Running => *down = (None, None),
        ConsumerState::Draining | ConsumerState::Stopped { error: None } => {}
        _ => {
            let since = *down.0.get_or_insert_with(std::time::Instant::now);
            let alarm_due = since.elapsed() >= DOWN_ALARM_AFTER
                && down.1.is_none_or(|last| last.elapsed() >= DOWN_ALARM_AFTER);
            if alarm_due {
                down.1 = Some(std::time::Instant::now());
                tracing::error!(
                    stream = %slot.stream,
                    consumer,
                    down_for = ?since.elapsed(),
                    state = %state,
                    "consumer has not been running for over a minute: nothing consumes its messages"
                );
                return;
            }
        }
    }
    drop(down);
    if std::mem::discriminant(&previous) == std::mem::discriminant(&state) {
        if let ConsumerState::Retrying { attempt, error } = &state {
            tracing::debug!(stream = %slot.stream, consumer, attempt, error, "consumer still not running; retrying");
        }
        return;
    }
    match &state {
        ConsumerState::Retrying { attempt, error } => {
            tracing::warn!(stream = %slot.stream, consumer, attempt, error, "consumer not running; retrying")
        }
        ConsumerState::Stopped { error: Some(error) } => {
            tracing::error!(stream = %slot.stream, consumer, error, "consumer stopped")
        }
        other => tracing::info!(stream = %slot.stream, consumer, state = %other, "consumer state"),
    }
}

/// What dispatching needs to settle a message.
struct Settle {
    handler: SharedHandler,
    scope: Arc<Scope>,
    slot: Arc<Slot>,
    /// The consumer's redelivery limit (`None`: unlimited).
    max_deliver: Option<u64>,
    backoff: Vec<Duration>,
    dead_letter: Option<&'static str>,
    /// Progress acks are sent at this interval while a handler runs.
    progress_every: Duration,
    /// Where handlers stopped before they finished record their message (see [`Unsettled`]).
    abandoned: Abandoned,
}

/// The reply subjects of messages whose handler was stopped before it finished (a drain's
/// grace period ran out): nothing settled them, so the drain naks them.
type Abandoned = Arc<std::sync::Mutex<Vec<async_nats::Subject>>>;

/// Records its message as abandoned if dropped before [`Unsettled::handled`]: a handler task
/// aborted, or an inline handler dropped, at the end of a drain's grace period. Once the
/// handler has returned, settling is under way (ack, nak or dead letter and term), and a
/// drop no longer records anything: a message is never settled twice.
struct Unsettled {
    reply: Option<async_nats::Subject>,
    abandoned: Abandoned,
}

impl Unsettled {
    fn handled(&mut self) {
        self.reply = None;
    }
}

impl Drop for Unsettled {
    fn drop(&mut self) {
        if let Some(reply) = self.reply.take() {
            self.abandoned
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(reply);
        }
    }
}

async fn consume(
    inner: &Arc<Inner>,
    consumer: &Consumer,
    slot: &Arc<Slot>,
    info: consumer::Info,
    cancel: &CancellationToken,
    in_flight: &mut JoinSet<()>,
    abandoned: &Abandoned,
) -> Exit {
    let js = inner.provisioner.jetstream().clone();
    let queue = consumer.decl.as_queue();
    let settle = Arc::new(Settle {
        handler: consumer.handler.clone(),
        scope: Arc::new(Scope {
            stream: info.stream_name.clone(),
            consumer: info.name.clone(),
            state: inner.state.clone(),
            jetstream: js.clone(),
        }),
        slot: slot.clone(),
        max_deliver: u64::try_from(info.config.max_deliver)
            .ok()
            .filter(|n| *n > 0),
        // The declared backoff (never sent to the server: there it would replace ack_wait).
        backoff: queue.map(|q| q.backoff.to_vec()).unwrap_or_default(),
        dead_letter: queue.and_then(|q| q.dead_letter),
        progress_every: (info.config.ack_wait / 2).max(Duration::from_millis(100)),
        abandoned: abandoned.clone(),
    });
    let concurrency = consumer.decl.effective_concurrency().max(1) as usize;
    let push = queue.is_some_and(|q| q.delivery == Delivery::Push);
    let feed = if push {
        let handle = match push::Config::try_from_consumer_config(info.config.clone()) {
            Ok(config) => consumer::Consumer::new(config, info, js),
            Err(e) => return Exit::Lost(format!("not a push consumer: {e}")),
        };
        // A queue subscription on the deliver subject, in the consumer's deliver group.
        let messages = match handle.messages().await {
            Ok(m) => m,
            Err(e) => return Exit::Lost(format!("could not subscribe: {e}")),
        };
        Feed::Push(Pusher {
            messages,
            gone: Box::pin(consumer_gone(
                inner.clone(),
                settle.scope.clone(),
                cancel.clone(),
            )),
        })
    } else {
        let batch = inner.pull_batch.unwrap_or(concurrency);
        match Puller::start(
            &inner.client,
            js,
            &info,
            batch,
            inner.expires,
            inner.heartbeat,
        )
        .await
        {
            Ok(puller) => Feed::Pull(puller),
            Err(e) => return Exit::Lost(format!("could not start pulling: {e}")),
        }
    };
    pump(
        feed,
        settle,
        concurrency,
        cancel,
        in_flight,
        inner.grace_period,
    )
    .await
}

/// Resolves when the consumer is gone from the server (push consumers never report it).
async fn consumer_gone(inner: Arc<Inner>, scope: Arc<Scope>, cancel: CancellationToken) -> String {
    let mut every = tokio::time::interval(inner.expires.max(Duration::from_secs(1)));
    every.tick().await;
    loop {
        tokio::select! {
            _ = every.tick() => {}
            _ = cancel.cancelled() => return std::future::pending().await,
        }
        let js = inner.provisioner.jetstream();
        if let Ok(stream) = js.get_stream_no_info(&scope.stream).await
            && let Err(e) = stream.consumer_info(&scope.consumer).await
            && matches!(
                e.kind(),
                jetstream::context::ConsumerInfoErrorKind::NotFound
                    | jetstream::context::ConsumerInfoErrorKind::StreamNotFound
            )
        {
            return format!("the consumer disappeared from the server: {e}");
        }
    }
}

/// Where a consumer's messages come from.
enum Feed {
    Pull(Puller),
    Push(Pusher),
}

impl Feed {
    /// How many messages this consumer may hold (in flight and waiting to start) at once.
    fn capacity(&self, concurrency: usize) -> usize {
        match self {
            Feed::Pull(puller) => puller.batch.max(concurrency),
            Feed::Push(_) => concurrency,
        }
    }

    /// The next message, or why the consumer is lost. `room` is how many more messages this
    /// instance can take now: a pull feed asks the server for no more than that. Cancel-safe.
    async fn next(&mut self, room: usize) -> Result<jetstream::Message, String> {
        match self {
            Feed::Pull(puller) => puller.next(room).await,
            Feed::Push(pusher) => pusher.next().await,
        }
    }

    /// Stops receiving; returns what was received but not handed out (to be returned to the
    /// server).
    async fn close(self) -> Vec<jetstream::Message> {
        match self {
            Feed::Pull(puller) => puller.close().await,
            Feed::Push(pusher) => pusher.close(),
        }
    }
}

/// A push consumer's queue subscription, and a poll that notices the consumer's deletion
/// (a push subscription never reports it).
struct Pusher {
    messages: push::Messages,
    gone: std::pin::Pin<Box<dyn Future<Output = String> + Send>>,
}

impl Pusher {
    async fn next(&mut self) -> Result<jetstream::Message, String> {
        loop {
            let next = tokio::select! {
                biased;
                next = self.messages.next() => next,
                reason = &mut self.gone => return Err(reason),
            };
            match next {
                Some(Ok(message)) => return Ok(message),
                Some(Err(e)) => match e.kind() {
                    push::MessagesErrorKind::ConsumerDeleted
                    | push::MessagesErrorKind::PullBasedConsumer => {
                        return Err(format!("push delivery failed: {e}"));
                    }
                    // Grouped members see spurious missed heartbeats; deletion is polled.
                    _ => {}
                },
                None => return Err("the push subscription ended".to_owned()),
            }
        }
    }

    fn close(mut self) -> Vec<jetstream::Message> {
        let mut unstarted = Vec::new();
        while let Some(Some(next)) = self.messages.next().now_or_never() {
            if let Ok(message) = next {
                unstarted.push(message);
            }
        }
        unstarted
    }
}

/// The JetStream API prefix of the runtime's context (the default one).
const API_PREFIX: &str = "$JS.API";

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
struct Puller {
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
    /// The connection the open requests were sent on (server id, client id), checked every
    /// [`RECONNECT_CHECK`].
    connection: (String, u64),
    reconnect_check: tokio::time::Interval,
}

/// How often a pull feed checks whether its client reconnected (then its open requests may be
/// gone with a restarted server: it asks again at once instead of waiting for missed
/// heartbeats).
const RECONNECT_CHECK: Duration = Duration::from_secs(1);

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

/// Missed idle heartbeats (of two heartbeat intervals each, as async-nats counts them) after
/// which the consumer, its stream or the server is presumed lost and ensured again.
const MISSED_HEARTBEATS: u32 = 3;

impl Puller {
    async fn start(
        client: &async_nats::Client,
        context: jetstream::Context,
        info: &consumer::Info,
        batch: usize,
        expires: Duration,
        heartbeat: Duration,
    ) -> Result<Puller, async_nats::SubscribeError> {
        let inbox = async_nats::Subject::from(client.new_inbox());
        let subscriber = client.subscribe(inbox.clone()).await?;
        let expires = expires.max(Duration::from_millis(100));
        Ok(Puller {
            client: client.clone(),
            context,
            subject: format!(
                "{API_PREFIX}.CONSUMER.MSG.NEXT.{}.{}",
                info.stream_name, info.name
            ),
            inbox,
            subscriber,
            batch: batch.max(1),
            expires,
            // The server refuses a heartbeat longer than half the expiry.
            heartbeat: heartbeat.min(expires / 2).max(Duration::from_millis(10)),
            requests: VecDeque::new(),
            heard: tokio::time::Instant::now(),
            connection: connection_of(client),
            reconnect_check: {
                let mut every = tokio::time::interval(RECONNECT_CHECK);
                every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                every
            },
        })
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
            self.request(want).await?;
        }
    }

    async fn request(&mut self, want: usize) -> Result<(), String> {
        let request = serde_json::json!({
            "batch": want,
            "expires": u64::try_from(self.expires.as_nanos()).unwrap_or(u64::MAX),
            "idle_heartbeat": u64::try_from(self.heartbeat.as_nanos()).unwrap_or(u64::MAX),
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
            expires_at: now + self.expires,
        });
        Ok(())
    }

    async fn next(&mut self, room: usize) -> Result<jetstream::Message, String> {
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
    async fn close(mut self) -> Vec<jetstream::Message> {
        let mut unstarted = Vec::new();
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
        let deadline = tokio::time::Instant::now() + Duration::from_secs(1);
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

/// Reads messages and dispatches them, at most `concurrency` at once, until shutdown or loss.
/// With a concurrency of one, handlers run inline (no task per message). Handlers started
/// here go into `in_flight`, which outlives this session.
async fn pump(
    mut feed: Feed,
    settle: Arc<Settle>,
    concurrency: usize,
    cancel: &CancellationToken,
    in_flight: &mut JoinSet<()>,
    grace: Duration,
) -> Exit {
    let capacity = feed.capacity(concurrency);
    // Received and not started (only when a pull batch larger than the concurrency is set).
    let mut waiting: VecDeque<jetstream::Message> = VecDeque::new();
    let exit = 'session: loop {
        while in_flight.try_join_next().is_some() {}
        while in_flight.len() < concurrency
            && let Some(message) = waiting.pop_front()
        {
            if concurrency == 1 {
                if run_inline(message, &settle, cancel, grace).await.is_err() {
                    break 'session Exit::Drained;
                }
            } else {
                in_flight.spawn(dispatch(message, settle.clone()));
            }
        }
        let room = capacity.saturating_sub(in_flight.len() + waiting.len());
        let readable = matches!(feed, Feed::Pull(_)) || in_flight.len() < concurrency;
        let next = tokio::select! {
            biased;
            _ = cancel.cancelled() => break Exit::Drained,
            // A handler finished: there is room for more.
            Some(_) = in_flight.join_next(), if !in_flight.is_empty() => continue,
            next = feed.next(room), if readable => next,
        };
        match next {
            Ok(message) if waiting.is_empty() && in_flight.len() < concurrency => {
                if concurrency == 1 {
                    if run_inline(message, &settle, cancel, grace).await.is_err() {
                        break Exit::Drained;
                    }
                } else {
                    in_flight.spawn(dispatch(message, settle.clone()));
                }
            }
            Ok(message) => waiting.push_back(message),
            Err(reason) => break Exit::Lost(reason),
        }
    };
    if matches!(exit, Exit::Drained) {
        transition(&settle.slot, ConsumerState::Draining);
    }
    // Hand back what was received but not started, so that another instance takes it at once.
    waiting.extend(feed.close().await);
    for message in waiting {
        if let Err(e) = message.ack_with(AckKind::Nak(None)).await {
            tracing::warn!(error = %e, "could not return an unstarted message");
        }
    }
    exit
}

/// Runs one handler inline; `Err` when a drain's grace period ran out first (the handler is
/// dropped; its message is recorded as abandoned and returned by the drain).
async fn run_inline(
    message: jetstream::Message,
    settle: &Arc<Settle>,
    cancel: &CancellationToken,
    grace: Duration,
) -> Result<(), ()> {
    let overdue = async {
        cancel.cancelled().await;
        // Visible at once, even while this handler keeps the consumer busy.
        transition(&settle.slot, ConsumerState::Draining);
        tokio::time::sleep(grace).await;
    };
    tokio::select! {
        _ = dispatch(message, settle.clone()) => Ok(()),
        _ = overdue => {
            warn_overdue(settle, 1, grace);
            Err(())
        }
    }
}

/// Waits (within the grace period) for the handlers still running; the ones still running
/// after it are stopped (their messages are recorded as abandoned, see [`Unsettled`]).
async fn finish_in_flight(in_flight: &mut JoinSet<()>, grace: Duration, slot: &Slot) {
    let finished = tokio::time::timeout(grace, async {
        while in_flight.join_next().await.is_some() {}
    })
    .await;
    if finished.is_err() {
        tracing::warn!(
            stream = %slot.stream,
            still_running = in_flight.len(),
            ?grace,
            "handlers still running after the grace period; stopping them and returning their messages"
        );
        in_flight.abort_all();
        while in_flight.join_next().await.is_some() {}
    }
}

fn warn_overdue(settle: &Settle, still_running: usize, grace: Duration) {
    tracing::warn!(
        stream = %settle.scope.stream,
        consumer = %settle.scope.consumer,
        still_running,
        ?grace,
        "handlers still running after the grace period; stopping them and returning their messages"
    );
}

/// Runs the handler on one message and settles it: ack, nak with a delay, or dead-letter
/// and terminate. Every message ends in exactly one of the three.
async fn dispatch(message: jetstream::Message, settle: Arc<Settle>) {
    let (delivered, stream_sequence) = match message.info() {
        Ok(info) => (
            u64::try_from(info.delivered).unwrap_or(1),
            info.stream_sequence,
        ),
        Err(_) => (1, 0),
    };
    let span = tracing::info_span!(
        "message",
        stream = %settle.scope.stream,
        consumer = %settle.scope.consumer,
        subject = %message.subject,
        sequence = stream_sequence,
        delivered,
    );
    settle_message(message, settle, delivered, stream_sequence)
        .instrument(span)
        .await
}

async fn settle_message(
    message: jetstream::Message,
    settle: Arc<Settle>,
    delivered: u64,
    stream_sequence: u64,
) {
    let mut unsettled = Unsettled {
        reply: message.reply.clone(),
        abandoned: settle.abandoned.clone(),
    };
    let incoming = Incoming {
        payload: message.payload.clone(),
        context: Context {
            subject: message.subject.clone(),
            headers: message.headers.clone(),
            delivered,
            stream_sequence,
            scope: settle.scope.clone(),
        },
    };
    let outcome = {
        let handler = &settle.handler;
        let call = std::panic::catch_unwind(AssertUnwindSafe(|| handler(incoming)));
        match call {
            Ok(future) => {
                let mut future = pin!(AssertUnwindSafe(future).catch_unwind());
                // Most handlers finish without waiting: no timer for them.
                match future.as_mut().now_or_never() {
                    Some(outcome) => outcome,
                    None => loop {
                        tokio::select! {
                            r = &mut future => break r,
                            _ = tokio::time::sleep(settle.progress_every) => {
                                let _ = message.ack_with(AckKind::Progress).await;
                            }
                        }
                    },
                }
            }
            Err(panic) => Err(panic),
        }
    };
    unsettled.handled();
    let error = match outcome {
        Ok(Ok(())) => {
            match message.ack().await {
                Ok(()) => Slot::count(&settle.slot.handled),
                Err(e) => tracing::warn!(error = %e, "could not acknowledge a handled message"),
            }
            return;
        }
        Ok(Err(error)) => error,
        Err(panic) => HandlerError::new(format!("the handler panicked: {}", panic_message(&panic))),
    };
    Slot::count(&settle.slot.failed);
    let last = settle.max_deliver.is_some_and(|max| delivered >= max);
    if error.is_permanent() || last {
        terminate(&message, &settle, delivered, &error).await;
    } else {
        let delay = redelivery_delay(&settle.backoff, delivered);
        tracing::debug!(subject = %message.subject, delivered, ?delay, %error, "handler failed; redelivering later");
        match message.ack_with(AckKind::Nak(Some(delay))).await {
            Ok(()) => Slot::count(&settle.slot.retried),
            Err(e) => {
                tracing::warn!(error = %e, "could not nak a failed message; it is redelivered after ack_wait")
            }
        }
    }
}

/// Publishes the message to the dead-letter subject (if declared), then terminates it. If the
/// dead letter cannot be published, the message is naked instead: nothing is lost.
async fn terminate(
    message: &jetstream::Message,
    settle: &Settle,
    delivered: u64,
    error: &HandlerError,
) {
    if let Some(subject) = settle.dead_letter {
        let mut headers = message.headers.clone().unwrap_or_default();
        headers.insert("Nats-Topology-Subject", message.subject.as_str());
        headers.insert("Nats-Topology-Stream", settle.scope.stream.as_str());
        headers.insert("Nats-Topology-Consumer", settle.scope.consumer.as_str());
        if let Ok(info) = message.info() {
            headers.insert(
                "Nats-Topology-Sequence",
                info.stream_sequence.to_string().as_str(),
            );
        }
        headers.insert("Nats-Topology-Delivered", delivered.to_string().as_str());
        headers.insert(
            "Nats-Topology-Error",
            error.to_string().replace(['\r', '\n'], " ").as_str(),
        );
        let publish = || async {
            settle
                .scope
                .jetstream
                .publish_with_headers(subject.to_owned(), headers.clone(), message.payload.clone())
                .await?
                .await
        };
        // A failed publish is retried while the message is held (progress acks): on its last
        // delivery a nak would not bring it back.
        let mut attempt = 0u32;
        let failure = loop {
            match publish().await {
                Ok(_) => break None,
                Err(e) if attempt + 1 >= DEAD_LETTER_ATTEMPTS => break Some(e),
                Err(_) => {
                    let _ = message.ack_with(AckKind::Progress).await;
                    tokio::time::sleep(full_jitter(
                        Duration::from_millis(100).saturating_mul(1 << attempt),
                    ))
                    .await;
                    attempt += 1;
                }
            }
        };
        if let Some(e) = failure {
            let last = settle.max_deliver.is_some_and(|max| delivered >= max);
            if last {
                tracing::error!(
                    dead_letter = subject,
                    stream = %settle.scope.stream,
                    consumer = %settle.scope.consumer,
                    error = %e,
                    "could not publish a dead letter after {DEAD_LETTER_ATTEMPTS} attempts; this was the last \
                     delivery, so the message stays unacknowledged in the stream (the server emits a \
                     MAX_DELIVERIES advisory): check that a stream captures the dead-letter subject"
                );
            } else {
                tracing::error!(dead_letter = subject, error = %e, "could not publish a dead letter; the message is redelivered instead");
                let _ = message
                    .ack_with(AckKind::Nak(Some(Duration::from_secs(1))))
                    .await;
            }
            return;
        }
    }
    tracing::warn!(subject = %message.subject, stream = %settle.scope.stream, consumer = %settle.scope.consumer, delivered, %error, "message terminated");
    match message.ack_with(AckKind::Term).await {
        Ok(()) => Slot::count(&settle.slot.dead_lettered),
        Err(e) => tracing::warn!(error = %e, "could not terminate a message"),
    }
}

/// How often publishing a dead letter is tried (with full jitter over 0.1 s .. 1.6 s) before
/// the message is given back.
const DEAD_LETTER_ATTEMPTS: u32 = 5;

/// The delay before redelivery: the declared backoff for this attempt (the last entry
/// repeats), or full jitter over a doubling window when none is declared.
fn redelivery_delay(backoff: &[Duration], delivered: u64) -> Duration {
    let attempt = usize::try_from(delivered.saturating_sub(1)).unwrap_or(usize::MAX);
    match backoff {
        [] => {
            let window = Duration::from_millis(100)
                .saturating_mul(1u32 << attempt.min(9))
                .min(Duration::from_secs(30));
            full_jitter(window)
        }
        delays => delays[attempt.min(delays.len() - 1)],
    }
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}
