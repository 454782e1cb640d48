//! The runtime: builds from a validated topology, provisions, runs one supervised task per
//! consumer and per service and core subscription, dispatches messages and requests to
//! handlers, and drains on shutdown.
//!
//! - [`Runtime`] (here): the public handle and its lifecycle (run, drain).
//! - `builder`: [`RuntimeBuilder`] and the runtime's timings.
//! - `ensure`: the runtime's provisioning of its topology (each stream once, then consumers).
//! - `signals`: SIGINT/SIGTERM for [`Runtime::run_until_signal`].
//! - `relay`: [`Relay`] handles and relay names.
//! - `tasks`: the supervised tasks of a running runtime, restarted if they panic, drained
//!   (in the background if the run is dropped).
//! - `consume`: one supervised task per consumer, from pull to settle (its `mod.rs` lists
//!   the steps).
//! - `serve`: the declared services (NATS micro protocol endpoints) and core subscriptions.
//! - `watchers`: what the runtime watches beside its consumers: JetStream's reach through the
//!   connection, the permission violations the server reports, the streams no consumer reads.

mod builder;
mod consume;
mod ensure;
mod relay;
mod serve;
mod shares;
mod signals;
mod tasks;
mod watchers;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use crate::health::Health;
use crate::provision::ProvisionError;
use crate::registry::Topology;
use crate::report::{self, Inspection, Plan, ProvisionReport};

pub(crate) use builder::Settings;
pub use builder::{OutagePolicy, RuntimeBuilder};
pub(crate) use ensure::{Ensured, Ensurer};
pub(crate) use relay::relay_name;
pub use relay::{Relay, RelayError};
use tasks::Tasks;

/// Why [`Runtime::run_until`] returned an error.
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// A consumer could not be provisioned and retrying cannot fix it (a configuration
    /// conflict, or a declaration the server refuses).
    #[error(transparent)]
    Provision(#[from] ProvisionError),
}

/// How long a drain waits, after the handlers, for each clean-up that needs the broker: the
/// final flush of acknowledgements, and the deletion of a relay (which the server also reaps
/// after its inactivity threshold). With the broker gone, these would otherwise wait for a
/// reconnection that may never come.
pub const CLEANUP_WAIT: Duration = Duration::from_secs(5);

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

/// What every task of a running runtime shares.
pub(crate) struct Inner {
    /// The connection, the application state, and what else the handlers of every consumer
    /// share.
    pub(crate) common: Arc<crate::handler::Common>,
    pub(crate) ensurer: Ensurer,
    pub(crate) settings: Settings,
    pub(crate) health: Health,
    /// A random id of this runtime, in its relays' names.
    pub(crate) instance: String,
    /// The overflow queue consumers (by group) this instance spills over for.
    pub(crate) spill_over: Vec<String>,
    /// The partitioned groups, and which of their partitions this replica holds.
    pub(crate) shares: shares::Shares,
    /// The handler whose supervisor a test wants to panic once it runs.
    #[cfg(feature = "test-hooks")]
    pub(crate) panic_supervisor: std::sync::Mutex<Option<String>>,
}

impl Runtime {
    /// A builder for a runtime on `client`, running what the macros registered.
    pub fn builder(client: async_nats::Client) -> RuntimeBuilder {
        RuntimeBuilder::new(client)
    }

    /// A cheap handle on every consumer's state.
    pub fn health(&self) -> Health {
        self.inner.health.clone()
    }

    /// The topology this runtime runs.
    pub fn topology(&self) -> &Topology {
        self.inner.ensurer.topology()
    }

    /// A JetStream context on this runtime's connection that talks to the JetStream the
    /// runtime does (its [`domain`](RuntimeBuilder::domain) or
    /// [`api_prefix`](RuntimeBuilder::api_prefix), else the connection's own), each request
    /// bounded by the retry policy's `request_timeout`: for the application's own reads and
    /// publishes next to the runtime's.
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = async_nats::connect("nats://127.0.0.1:4222").await?;
    /// let runtime = nats_topology::Runtime::builder(client).domain("edge").build()?;
    /// // `$JS.edge.API.STREAM.INFO.ORDERS`
    /// let info = runtime.jetstream().get_stream("ORDERS").await?.cached_info().clone();
    /// # let _ = info; Ok(()) }
    /// ```
    pub fn jetstream(&self) -> async_nats::jetstream::Context {
        self.inner.ensurer.provisioner().jetstream().clone()
    }

    /// Provisions every stream and queue consumer once, without consuming: streams
    /// single-flight, consumers concurrently, transient failures retried under the retry
    /// policy's deadline. Useful for an init job, and to measure provisioning.
    /// [`Runtime::run_until`] does the same for each consumer before consuming.
    pub async fn provision(&self) -> Result<ProvisionReport, ProvisionError> {
        let started = tokio::time::Instant::now();
        self.inner.ensurer.ensure_all().await?;
        Ok(ProvisionReport {
            attempts: self.inner.ensurer.provisioner().attempts(),
            timed_out: self.inner.ensurer.provisioner().timed_out(),
            elapsed: started.elapsed(),
        })
    }

    /// What provisioning would do (create, update which fields, nothing, conflict), read
    /// from the server without changing anything (reads retried under the runtime's policy),
    /// and the endpoints and core subscriptions every instance serves (nothing to provision).
    pub async fn plan(&self) -> Result<Plan, ProvisionError> {
        let ensurer = &self.inner.ensurer;
        report::plan_with(ensurer.provisioner(), ensurer.topology()).await
    }

    /// For every declared queue consumer: does it exist, is anyone consuming, what is
    /// pending, where is its ack floor (reads retried under the runtime's policy); for every
    /// declared service, the instances that answer `$SRV.PING` and their `$SRV.STATS`.
    pub async fn inspect(&self) -> Result<Inspection, ProvisionError> {
        let ensurer = &self.inner.ensurer;
        report::inspect_with(ensurer.provisioner(), ensurer.topology()).await
    }

    /// Provisions and runs every consumer, and serves every service and core subscription,
    /// until `shutdown` completes, then drains: stops fetching, lets in-flight handlers finish
    /// (within the grace period), flushes acks, deletes relays (waiting at most
    /// [`CLEANUP_WAIT`] for each of those two, so that a drain ends even when the broker is
    /// gone). Endpoints unsubscribe (the other instances of their queue group take the new
    /// requests) and answer every request they received, in flight or buffered; what the grace
    /// period leaves unanswered is answered with a 503.
    ///
    /// Transient failures (broker down, timeouts, a deleted consumer) are retried forever, and
    /// a supervisor that panics is reported in [`Health`] and restarted with backoff. Returns
    /// an error only for a failure no retry can fix, such as a configuration conflict with
    /// what the server holds; the other consumers are drained first.
    ///
    /// The runtime counts as started from this call on (a [`Relay`] may be ensured). If the
    /// returned future is dropped before it completes, every consumer turns `draining` at once
    /// (health is not ready, `Relay::ensure` fails) and the drain goes on in the background.
    pub fn run_until<F: Future>(self, shutdown: F) -> impl Future<Output = Result<(), RunError>> {
        self.inner.health.shared.start();
        self.run(shutdown, std::future::pending::<()>())
    }

    /// Like [`Runtime::run_until`], on the process's signals: the first SIGINT (Ctrl-C) or
    /// SIGTERM drains; a second one during the drain stops waiting for handlers at once
    /// (their messages are redelivered by the server).
    pub fn run_until_signal(self) -> impl Future<Output = Result<(), RunError>> {
        self.inner.health.shared.start();
        // Listen before anything else: a signal that arrives while provisioning must drain,
        // not kill the process with the default action.
        let mut signals = signals::ShutdownSignals::listen();
        async move {
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
            // After the drain, signals take their default action again.
            listener.abort();
            outcome
        }
    }

    /// Runs until `shutdown`, or until a consumer fails in a way no retry fixes; then drains
    /// every consumer (stopping the wait for handlers at once if `force` completes first).
    async fn run(self, shutdown: impl Future, force: impl Future) -> Result<(), RunError> {
        let (fatal_tx, mut fatal_rx) = mpsc::unbounded_channel();
        let mut tasks = Tasks::start(self.inner.clone(), fatal_tx);
        let mut shutdown = std::pin::pin!(shutdown);
        let fatal = loop {
            tokio::select! {
                _ = &mut shutdown => break None,
                Some(error) = fatal_rx.recv() => break Some(error),
                Some(ended) = tasks.join_next() => tasks.ended(ended),
            }
        };
        // A runtime that never reached a server received nothing: there is nothing to finish,
        // settle or delete, and every clean-up would wait for a server that may never come.
        if never_connected(&self.inner.common.client) {
            tracing::info!("stopping: the connection never came up, so nothing is in flight");
            tasks.abort(None);
            watchers::sweep_denials(&self.inner);
            return fatal.map_or(Ok(()), |error| Err(error.into()));
        }
        tracing::info!("draining consumers");
        tokio::select! {
            _ = tasks.drain() => {}
            _ = force => tasks.abort(Some("stopped before its handlers finished (forced shutdown)")),
        }
        // Bounded: with the broker gone, a flush would wait for a reconnection that may never
        // come, and the process would not exit.
        match tokio::time::timeout(CLEANUP_WAIT, self.inner.common.client.flush()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "could not flush acknowledgements on shutdown")
            }
            Err(_) => tracing::warn!(
                wait = ?CLEANUP_WAIT,
                "could not flush acknowledgements on shutdown: the connection is down; unflushed acks are redelivered by the server"
            ),
        }
        watchers::sweep_denials(&self.inner);
        match fatal {
            Some(error) => Err(error.into()),
            None => Ok(()),
        }
    }
}

/// Whether `client` has never been connected to a server (it has no server's `INFO` yet).
fn never_connected(client: &async_nats::Client) -> bool {
    client.server_info().server_id.is_empty()
}

impl crate::bucket::JetStreamSource for Runtime {
    fn jetstream_context(&self) -> async_nats::jetstream::Context {
        self.jetstream()
    }
}

debug_as_display!(RunError);
