//! The runtime: builds from a validated topology, provisions, runs one supervised task per
//! consumer, dispatches messages to handlers, and drains on shutdown.

use std::collections::HashMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::consumer::{self, FromConsumer, pull, push};
use async_nats::jetstream::{self, AckKind, stream};
use futures::{FutureExt, StreamExt};
use tracing::Instrument;
use tokio::sync::{Mutex, OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

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
#[error("the relay `{consumer}` on stream `{stream}` is not supervised: the runtime is not running (start it with `run_until`)")]
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
            self.slot.wake.notify_one();
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

    /// How many messages one pull request asks for (default: the consumer's concurrency, so
    /// that no more is fetched than can be started; the client pulls again at half).
    /// A larger batch trades prefetched messages, which wait while others are handled, for
    /// fewer round trips.
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
                Arc::new(Slot::new(c.decl.stream.name(), &name, c.decl.handler, queue))
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
        let streams = self
            .inner
            .topology
            .streams()
            .iter()
            .map(|s| self.inner.ensure_stream(s));
        futures::future::try_join_all(streams).await?;
        let queues = self
            .inner
            .topology
            .consumers()
            .iter()
            .filter(|c| c.decl.as_queue().is_some())
            .map(|c| self.inner.ensure(c, None, UpdateMode::Update));
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
        let (first_tx, first_rx) = tokio::sync::oneshot::channel::<()>();
        let signals = async move {
            shutdown_signal().await;
            let _ = first_tx.send(());
            shutdown_signal().await;
            tracing::warn!("second signal: stopping without waiting for in-flight handlers");
        };
        let first = async move {
            let _ = first_rx.await;
        };
        self.run(first, signals).await
    }

    async fn run(
        self,
        shutdown: impl Future,
        force: impl Future,
    ) -> Result<(), RunError> {
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

/// SIGINT or SIGTERM.
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

fn instance_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!("{:x}{:06x}", std::process::id(), (nanos as u64) & 0xff_ffff)
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
                mode = UpdateMode::CreateOnly;
                failures = 0;
                transition(&slot, ConsumerState::Running);
                match consume(&inner, consumer, &slot, info, &cancel).await {
                    Exit::Drained => break,
                    Exit::Lost(reason) => {
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
                transition(
                    &slot,
                    ConsumerState::Stopped {
                        error: Some(e.to_string()),
                    },
                );
                let _ = fatal.send(e);
                return;
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
    if let Some(relay) = &relay
        && let Err(e) = inner.provisioner.delete_consumer(stream, relay).await
    {
        tracing::warn!(stream, consumer = %relay, error = %e, "could not delete the relay on shutdown; the server reaps it after its inactivity threshold");
    }
    transition(&slot, ConsumerState::Stopped { error: None });
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
}

async fn consume(
    inner: &Arc<Inner>,
    consumer: &Consumer,
    slot: &Arc<Slot>,
    info: consumer::Info,
    cancel: &CancellationToken,
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
        backoff: info.config.backoff.clone(),
        dead_letter: queue.and_then(|q| q.dead_letter),
        progress_every: (info.config.ack_wait / 2).max(Duration::from_millis(100)),
    });
    let concurrency = consumer.decl.effective_concurrency().max(1) as usize;
    let push = queue.is_some_and(|q| q.delivery == Delivery::Push);
    if push {
        let handle = match push::Config::try_from_consumer_config(info.config.clone()) {
            Ok(config) => consumer::Consumer::new(config, info, js),
            Err(e) => return Exit::Lost(format!("not a push consumer: {e}")),
        };
        let messages = match handle.messages().await {
            Ok(m) => m,
            Err(e) => return Exit::Lost(format!("could not subscribe: {e}")),
        };
        let liveness = consumer_gone(inner, settle.scope.clone(), cancel);
        pump(
            messages.map(|m| m.map_err(|e| MessageError::Push(e.kind()))),
            liveness,
            settle,
            concurrency,
            inner.grace_period,
            cancel,
        )
        .await
    } else {
        let handle = match pull::Config::try_from_consumer_config(info.config.clone()) {
            Ok(config) => consumer::Consumer::new(config, info, js),
            Err(e) => return Exit::Lost(format!("not a pull consumer: {e}")),
        };
        let batch = inner.pull_batch.unwrap_or(concurrency);
        let messages = match handle
            .stream()
            .max_messages_per_batch(batch)
            .expires(inner.expires)
            .heartbeat(inner.heartbeat)
            .messages()
            .await
        {
            Ok(m) => m,
            Err(e) => return Exit::Lost(format!("could not start pulling: {e}")),
        };
        pump(
            messages.map(|m| m.map_err(|e| MessageError::Pull(e.kind()))),
            std::future::pending(),
            settle,
            concurrency,
            inner.grace_period,
            cancel,
        )
        .await
    }
}

/// Resolves when the consumer is gone from the server (push consumers never report it).
async fn consumer_gone(inner: &Arc<Inner>, scope: Arc<Scope>, cancel: &CancellationToken) -> String {
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

enum MessageError {
    Pull(pull::MessagesErrorKind),
    Push(push::MessagesErrorKind),
}

/// Reads messages and dispatches them, at most `concurrency` at once, until shutdown or loss.
/// With a concurrency of one, handlers run inline (no task per message).
async fn pump<S>(
    messages: S,
    liveness: impl Future<Output = String>,
    settle: Arc<Settle>,
    concurrency: usize,
    grace: Duration,
    cancel: &CancellationToken,
) -> Exit
where
    S: futures::Stream<Item = Result<jetstream::Message, MessageError>> + Unpin,
{
    let mut messages = messages;
    let mut liveness = pin!(liveness);
    let permits = Arc::new(Semaphore::new(concurrency));
    let mut in_flight = JoinSet::new();
    let mut missed_heartbeats = 0u32;
    let exit = loop {
        let permit = if concurrency > 1 {
            while in_flight.try_join_next().is_some() {}
            // Take a permit before reading: never more read than can be started.
            Some(tokio::select! {
                p = permits.clone().acquire_owned() => p.expect("the semaphore is never closed"),
                _ = cancel.cancelled() => break Exit::Drained,
            })
        } else {
            None
        };
        let next = tokio::select! {
            biased;
            _ = cancel.cancelled() => break Exit::Drained,
            reason = &mut liveness => break Exit::Lost(reason),
            next = messages.next() => next,
        };
        match next {
            Some(Ok(message)) => {
                missed_heartbeats = 0;
                match permit {
                    Some(permit) => {
                        in_flight.spawn(dispatch(message, settle.clone(), Some(permit)));
                    }
                    None => {
                        let overdue = async {
                            cancel.cancelled().await;
                            tokio::time::sleep(grace).await;
                        };
                        tokio::select! {
                            _ = dispatch(message, settle.clone(), None) => {}
                            _ = overdue => {
                                warn_overdue(&settle, 1, grace);
                                break Exit::Drained;
                            }
                        }
                    }
                }
            }
            Some(Err(MessageError::Pull(kind))) => match kind {
                pull::MessagesErrorKind::MissingHeartbeat => {
                    missed_heartbeats += 1;
                    if missed_heartbeats >= 3 {
                        break Exit::Lost("three idle heartbeats missed".to_owned());
                    }
                }
                pull::MessagesErrorKind::Other => {
                    tracing::debug!(stream = %settle.scope.stream, consumer = %settle.scope.consumer, "transient pull error")
                }
                other => break Exit::Lost(format!("pull failed: {other}")),
            },
            Some(Err(MessageError::Push(kind))) => match kind {
                push::MessagesErrorKind::ConsumerDeleted
                | push::MessagesErrorKind::PullBasedConsumer => {
                    break Exit::Lost(format!("push delivery failed: {kind}"));
                }
                _ => {}
            },
            None => break Exit::Lost("the message stream ended".to_owned()),
        }
    };
    if matches!(exit, Exit::Drained) {
        transition(&settle.slot, ConsumerState::Draining);
        // Hand back what was fetched but not started, so another instance takes it at once.
        while let Some(Some(Ok(message))) = messages.next().now_or_never() {
            if let Err(e) = message.ack_with(AckKind::Nak(None)).await {
                tracing::warn!(error = %e, "could not return an unstarted message");
            }
        }
    }
    drop(messages);
    let finished = tokio::time::timeout(grace, async {
        while in_flight.join_next().await.is_some() {}
    })
    .await;
    if finished.is_err() {
        warn_overdue(&settle, in_flight.len(), grace);
        in_flight.abort_all();
    }
    exit
}

fn warn_overdue(settle: &Settle, still_running: usize, grace: Duration) {
    tracing::warn!(
        stream = %settle.scope.stream,
        consumer = %settle.scope.consumer,
        still_running,
        ?grace,
        "handlers still running after the grace period; their messages will be redelivered"
    );
}

/// Runs the handler on one message and settles it: ack, nak with a delay, or dead-letter
/// and terminate. Every message ends in exactly one of the three.
async fn dispatch(
    message: jetstream::Message,
    settle: Arc<Settle>,
    permit: Option<OwnedSemaphorePermit>,
) {
    let (delivered, stream_sequence) = match message.info() {
        Ok(info) => (u64::try_from(info.delivered).unwrap_or(1), info.stream_sequence),
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
    settle_message(message, settle, permit, delivered, stream_sequence)
        .instrument(span)
        .await
}

async fn settle_message(
    message: jetstream::Message,
    settle: Arc<Settle>,
    permit: Option<OwnedSemaphorePermit>,
    delivered: u64,
    stream_sequence: u64,
) {
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
    drop(permit);
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
            Err(e) => tracing::warn!(error = %e, "could not nak a failed message; it is redelivered after ack_wait"),
        }
    }
}

/// Publishes the message to the dead-letter subject (if declared), then terminates it. If the
/// dead letter cannot be published, the message is naked instead: nothing is lost.
async fn terminate(message: &jetstream::Message, settle: &Settle, delivered: u64, error: &HandlerError) {
    if let Some(subject) = settle.dead_letter {
        let mut headers = message.headers.clone().unwrap_or_default();
        headers.insert("Nats-Topology-Subject", message.subject.as_str());
        headers.insert("Nats-Topology-Stream", settle.scope.stream.as_str());
        headers.insert("Nats-Topology-Consumer", settle.scope.consumer.as_str());
        if let Ok(info) = message.info() {
            headers.insert("Nats-Topology-Sequence", info.stream_sequence.to_string().as_str());
        }
        headers.insert("Nats-Topology-Delivered", delivered.to_string().as_str());
        headers.insert("Nats-Topology-Error", error.to_string().replace(['\r', '\n'], " ").as_str());
        let published = async {
            settle
                .scope
                .jetstream
                .publish_with_headers(subject.to_owned(), headers, message.payload.clone())
                .await?
                .await
        };
        if let Err(e) = published.await {
            tracing::error!(dead_letter = subject, error = %e, "could not publish a dead letter; the message is redelivered instead");
            let _ = message.ack_with(AckKind::Nak(Some(Duration::from_secs(1)))).await;
            return;
        }
    }
    tracing::warn!(subject = %message.subject, stream = %settle.scope.stream, consumer = %settle.scope.consumer, delivered, %error, "message terminated");
    match message.ack_with(AckKind::Term).await {
        Ok(()) => Slot::count(&settle.slot.dead_lettered),
        Err(e) => tracing::warn!(error = %e, "could not terminate a message"),
    }
}

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
