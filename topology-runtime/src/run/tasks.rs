//! The supervised tasks of a running runtime: one per consumer, per stream no consumer
//! reads, per service and per core subscription. A task that panics is reported in health and restarted with backoff; shutdown
//! drains them; a run that is dropped drains them in the background.

use std::collections::HashMap;
use std::sync::Arc;
use tokio::time::Instant;

use tokio::sync::mpsc;
use tokio::task::{self, JoinError, JoinSet};
use tokio_util::sync::CancellationToken;

use super::Inner;
use super::consume::{hold, share, supervise};
use super::serve::{serve_service, serve_subscription};
use super::watchers::{supervise_stream, watch_denials, watch_reach, watch_writes};
use crate::handler::panic_message;
use crate::health::{ConsumerState, ServingState};
use crate::provision::ProvisionError;
use crate::retry::Backoff;

/// What a task supervises.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    /// The consumer at this index of the topology.
    Consumer(usize),
    /// The stream no consumer reads at this index of `Ensurer::unread_streams`.
    Stream(usize),
    /// The service at this index of the topology (its endpoints).
    Service(usize),
    /// The core subscription at this index of the topology.
    Subscription(usize),
    /// The reach watch (whether JetStream answers through the connection).
    Reach,
    /// The denial watch (permission violations the server reports).
    Denials,
    /// The stream watch (whether each declared stream takes writes).
    Writes,
    /// The membership of the partitioned group at this index of `Shares::groups`.
    Members(usize),
}

/// The tasks of one run.
pub(super) struct Tasks {
    inner: Arc<Inner>,
    set: JoinSet<()>,
    /// What each task supervises, and since when.
    kinds: HashMap<task::Id, (Kind, Instant)>,
    /// Restart backoff per supervised thing.
    restarts: HashMap<Kind, Backoff>,
    cancel: CancellationToken,
    fatal: mpsc::UnboundedSender<ProvisionError>,
    /// Until the run drained or aborted them: dropping `Tasks` then drains in the background.
    armed: bool,
}

impl Tasks {
    /// Starts a task per consumer, per stream no consumer reads, per service and per core
    /// subscription.
    pub(super) fn start(inner: Arc<Inner>, fatal: mpsc::UnboundedSender<ProvisionError>) -> Self {
        let mut tasks = Tasks {
            inner,
            set: JoinSet::new(),
            kinds: HashMap::new(),
            restarts: HashMap::new(),
            cancel: CancellationToken::new(),
            fatal,
            armed: true,
        };
        for index in 0..tasks.inner.ensurer.topology().consumers().len() {
            tasks.spawn(Kind::Consumer(index), None);
        }
        for index in 0..tasks.inner.shares.groups.len() {
            tasks.spawn(Kind::Members(index), None);
        }
        for index in 0..tasks.inner.ensurer.unread_streams().len() {
            tasks.spawn(Kind::Stream(index), None);
        }
        for index in 0..tasks.inner.ensurer.topology().services().len() {
            tasks.spawn(Kind::Service(index), None);
        }
        for index in 0..tasks.inner.ensurer.topology().subscriptions().len() {
            tasks.spawn(Kind::Subscription(index), None);
        }
        tasks.spawn(Kind::Reach, None);
        tasks.spawn(Kind::Denials, None);
        tasks.spawn(Kind::Writes, None);
        tasks
    }

    fn spawn(&mut self, kind: Kind, delay: Option<std::time::Duration>) {
        let (inner, cancel, fatal) = (self.inner.clone(), self.cancel.clone(), self.fatal.clone());
        let task = async move {
            if let Some(delay) = delay {
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {}
                    _ = cancel.cancelled() => return,
                }
            }
            // Each kind boxed: a task is as large as its largest kind otherwise, and a
            // consumer's would carry a service's bytes.
            match kind {
                // A partition's consumer runs while this replica holds the partition.
                Kind::Consumer(index) if inner.shares.is_partition(index) => {
                    Box::pin(hold(inner, index, cancel, fatal)).await
                }
                Kind::Consumer(index) => {
                    // Only an armed hook wraps the supervisor: every other consumer's task is
                    // the one a build without the hooks runs (the benchmarks measure it).
                    #[cfg(feature = "test-hooks")]
                    if hooks::armed(&inner, index) {
                        let supervised = Box::pin(supervise(inner.clone(), index, cancel, fatal));
                        return Box::pin(hooks::panic_once_running(&inner, index, supervised))
                            .await;
                    }
                    Box::pin(supervise(inner, index, cancel, fatal)).await
                }
                Kind::Members(index) => Box::pin(share(inner, index, cancel)).await,
                Kind::Stream(index) => {
                    let stream = inner.ensurer.unread_streams()[index];
                    Box::pin(supervise_stream(inner, stream, cancel, fatal)).await
                }
                Kind::Service(index) => Box::pin(serve_service(inner, index, cancel)).await,
                Kind::Subscription(index) => {
                    Box::pin(serve_subscription(inner, index, cancel)).await
                }
                Kind::Reach => Box::pin(watch_reach(inner, cancel)).await,
                Kind::Denials => Box::pin(watch_denials(inner, cancel)).await,
                Kind::Writes => Box::pin(watch_writes(inner, cancel)).await,
            }
        };
        let handle = self.set.spawn(task);
        self.kinds.insert(handle.id(), (kind, Instant::now()));
    }

    /// The next task that ended (a supervisor ends by itself only after a fatal error, or
    /// when it panics); `None` when there are none.
    pub(super) async fn join_next(&mut self) -> Option<Result<task::Id, JoinError>> {
        self.set
            .join_next_with_id()
            .await
            .map(|ended| ended.map(|(id, ())| id))
    }

    /// Reports a task that ended before shutdown: one that panicked is marked stopped with
    /// the panic and restarted after a backoff delay.
    pub(super) fn ended(&mut self, ended: Result<task::Id, JoinError>) {
        let (id, error) = match ended {
            Ok(id) => (id, None),
            Err(error) => (error.id(), Some(error)),
        };
        let Some((kind, since)) = self.kinds.remove(&id) else {
            return;
        };
        let Some(error) = error else {
            return;
        };
        let why = if error.is_panic() {
            format!(
                "its supervisor panicked: {}",
                panic_message(&error.into_panic())
            )
        } else {
            format!("its supervisor ended: {error}")
        };
        let policy = *self.inner.ensurer.policy();
        let backoff = self
            .restarts
            .entry(kind)
            .or_insert_with(|| policy.backoff_until(None));
        // A supervisor that ran for a while starts the backoff afresh.
        if since.elapsed() >= policy.cap {
            backoff.reset();
        }
        // At least `base`, so that a supervisor that panics at once cannot spin.
        let delay = policy.base + backoff.fail().unwrap_or(policy.cap);
        let attempt = backoff.failures();
        match kind {
            Kind::Consumer(index) => {
                self.inner.health.slots[index].transition(ConsumerState::Stopped {
                    error: Some(format!(
                        "{why}; restarting it in {delay:?} (restart {attempt})"
                    )),
                });
            }
            Kind::Members(index) => {
                let group = &self.inner.shares.groups[index];
                tracing::error!(
                    stream = group.stream,
                    group = group.group,
                    "{why}; restarting the partitioned group's membership in {delay:?}"
                );
            }
            Kind::Stream(index) => {
                let stream = self.inner.ensurer.unread_streams()[index];
                self.inner
                    .health
                    .shared
                    .set_stream_ensured(stream.name, false);
                tracing::error!(stream = stream.name, "{why}; restarting it in {delay:?}");
            }
            Kind::Service(index) => {
                let service = self.inner.ensurer.topology().services()[index];
                let error = format!("{why}; restarting it in {delay:?} (restart {attempt})");
                for (endpoint, slot) in self
                    .inner
                    .ensurer
                    .topology()
                    .endpoints()
                    .iter()
                    .zip(self.inner.health.endpoints.iter())
                {
                    if *endpoint.decl.service == service {
                        slot.transition(ServingState::Stopped {
                            error: Some(error.clone()),
                        });
                    }
                }
            }
            Kind::Subscription(index) => {
                self.inner.health.subscriptions[index].transition(ServingState::Stopped {
                    error: Some(format!(
                        "{why}; restarting it in {delay:?} (restart {attempt})"
                    )),
                });
            }
            Kind::Reach => tracing::error!("the reach watch: {why}; restarting it in {delay:?}"),
            Kind::Denials => {
                tracing::error!("the denial watch: {why}; restarting it in {delay:?}")
            }
            Kind::Writes => {
                tracing::error!("the stream watch: {why}; restarting it in {delay:?}")
            }
        }
        self.spawn(kind, Some(delay));
    }

    /// Drains every task: each stops consuming, lets its handlers finish within the grace
    /// period, and deletes its relay.
    pub(super) async fn drain(&mut self) {
        self.cancel.cancel();
        while let Some(joined) = self.set.join_next().await {
            if let Err(e) = joined {
                tracing::error!(error = %e, "a consumer supervisor ended abnormally while draining");
            }
        }
        self.armed = false;
    }

    /// Stops every task at once (a second signal during the drain, or a runtime that never
    /// reached a server); `why` is what health says of each stopped consumer and endpoint
    /// (`None`: a clean stop, nothing was left unfinished).
    pub(super) fn abort(&mut self, why: Option<&str>) {
        self.cancel.cancel();
        self.set.abort_all();
        self.armed = false;
        for slot in self.inner.health.slots.iter() {
            if !matches!(slot.state(), ConsumerState::Stopped { .. }) {
                slot.transition(ConsumerState::Stopped {
                    error: why.map(str::to_owned),
                });
            }
        }
        for slot in self.inner.health.serve_slots() {
            if !matches!(slot.state(), ServingState::Stopped { .. }) {
                slot.transition(ServingState::Stopped {
                    error: why.map(str::to_owned),
                });
            }
        }
    }
}

impl Drop for Tasks {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        // The run was dropped before it drained: nothing will consume any more, so say so at
        // once, and drain in the background if a runtime is still there to run it.
        self.cancel.cancel();
        for slot in self.inner.health.slots.iter() {
            if !matches!(slot.state(), ConsumerState::Stopped { .. }) {
                slot.transition(ConsumerState::Draining);
            }
        }
        for slot in self.inner.health.serve_slots() {
            if !matches!(slot.state(), ServingState::Stopped { .. }) {
                slot.transition(ServingState::Draining);
            }
        }
        let mut set = std::mem::take(&mut self.set);
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                tracing::warn!("the runtime's run future was dropped: draining in the background");
                handle.spawn(async move { while set.join_next().await.is_some() {} });
            }
            Err(_) => {
                set.abort_all();
                for slot in self.inner.health.slots.iter() {
                    slot.transition(ConsumerState::Stopped {
                        error: Some("the runtime's run future was dropped".to_owned()),
                    });
                }
                for slot in self.inner.health.serve_slots() {
                    slot.transition(ServingState::Stopped {
                        error: Some("the runtime's run future was dropped".to_owned()),
                    });
                }
            }
        }
    }
}

/// Faults injected by tests (the `test-hooks` feature; not public API).
#[cfg(feature = "test-hooks")]
mod hooks {
    use std::future::Future;

    use super::Inner;

    /// Whether the builder asked for this consumer's supervisor to panic once it runs (the
    /// hook is taken: it fires once).
    pub(super) fn armed(inner: &Inner, index: usize) -> bool {
        let handler = inner.ensurer.topology().consumers()[index].decl.handler;
        let mut hook = inner
            .panic_supervisor
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        hook.as_deref() == Some(handler) && hook.take().is_some()
    }

    /// Runs `supervised`, but panics as soon as it runs (for a consumer [`armed`]).
    pub(super) async fn panic_once_running(
        inner: &Inner,
        index: usize,
        supervised: impl Future<Output = ()>,
    ) {
        let handler = inner.ensurer.topology().consumers()[index].decl.handler;
        let slot = &inner.health.slots[index];
        tokio::select! {
            _ = supervised => {}
            true = slot.until_up(|_| false) => panic!("test hook: the supervisor of `{handler}` panics"),
        }
    }
}
