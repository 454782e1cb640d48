//! One runtime's provisioning of its topology: each stream ensured once (single-flight) and
//! remembered, a consumer after its stream, and waits for streams that are not there yet
//! (an external stream not deployed, a stream vanished or still being created).

use std::collections::HashMap;
use std::future::Future;

use async_nats::jetstream::{consumer, stream};
use tokio::sync::{Mutex, Semaphore, SemaphorePermit};

use crate::provision::{
    ProvisionError, ProvisionErrorKind, Provisioner, StreamInstance, UpdateMode,
};
use crate::registry::{Consumer, Topology};
use crate::retry::{Failed, RetryPolicy};
use topology_core::model::StreamDecl;

/// A consumer ensured, and the instance of its stream it was ensured in.
pub(crate) struct Ensured {
    pub(crate) consumer: consumer::Info,
    /// The stream as read (or created) just before the consumer was ensured.
    pub(crate) stream: StreamInstance,
}

/// How many consumers one runtime ensures at once. A runtime of thousands of consumers
/// starting together asks the server no faster for it (the server works through them in
/// turn), but would hold every ensure's request state in memory at once: tens of KB each, kept
/// by the allocator after start-up (see docs/PERFORMANCE.md, "Ready with 1,000 and 10,000
/// consumers").
pub(crate) const ENSURES_AT_ONCE: usize = 32;

/// Ensures a topology's streams and consumers for one runtime.
pub(crate) struct Ensurer {
    topology: Topology,
    provisioner: Provisioner,
    /// Per stream: its info once ensured. The mutex makes ensuring single-flight.
    streams: HashMap<String, Mutex<Option<stream::Info>>>,
    /// Admits [`ENSURES_AT_ONCE`] consumer ensures at a time.
    admitted: Semaphore,
}

impl Ensurer {
    pub(crate) fn new(topology: Topology, provisioner: Provisioner) -> Self {
        let streams = topology
            .streams()
            .iter()
            .map(|s| (s.name.to_owned(), Mutex::new(None)))
            .collect();
        Ensurer {
            topology,
            provisioner,
            streams,
            admitted: Semaphore::new(ENSURES_AT_ONCE),
        }
    }

    /// Waits until a consumer's ensure may start (see [`ENSURES_AT_ONCE`]); it may while the
    /// permit is held. Taken before the ensure's future is built, so that a consumer waiting
    /// here holds none of its memory.
    pub(crate) async fn admit(&self) -> SemaphorePermit<'_> {
        self.admitted
            .acquire()
            .await
            .expect("the ensure semaphore is never closed")
    }

    pub(crate) fn topology(&self) -> &Topology {
        &self.topology
    }

    pub(crate) fn provisioner(&self) -> &Provisioner {
        &self.provisioner
    }

    pub(crate) fn policy(&self) -> &RetryPolicy {
        self.provisioner.policy()
    }

    /// Ensures every stream and queue consumer once: streams single-flight, consumers
    /// concurrently, waiting for missing streams until the retry policy's deadline.
    pub(crate) async fn ensure_all(&self) -> Result<(), ProvisionError> {
        let deadline = tokio::time::Instant::now() + self.policy().deadline;
        let streams = self
            .topology
            .streams()
            .iter()
            .map(|s| self.until_deadline(deadline, || self.ensure_stream(s)));
        futures::future::try_join_all(streams).await?;
        let queues = self
            .topology
            .consumers()
            .iter()
            .filter(|c| c.decl.as_queue().is_some())
            .map(|c| {
                self.until_deadline(deadline, || async {
                    let _admitted = self.admit().await;
                    match Box::pin(self.ensure(c, None, &UpdateMode::Update)).await {
                        // Migrated from and gone: nothing to provision.
                        Err(e) if e.kind() == ProvisionErrorKind::Retired => Ok(()),
                        ensured => ensured.map(|_| ()),
                    }
                })
            });
        futures::future::try_join_all(queues).await?;
        Ok(())
    }

    /// The streams no consumer reads (this service only publishes to them): they are ensured
    /// too.
    pub(crate) fn unread_streams(&self) -> Vec<StreamDecl> {
        self.topology
            .streams()
            .iter()
            .filter(|s| self.topology.consumers_of(s.name).is_empty())
            .copied()
            .collect()
    }

    /// Repeats `ensure` while it fails in a way that waiting fixes (an external stream not
    /// deployed yet, a stream that vanished or is still being created) until `deadline`.
    async fn until_deadline<T, F, Fut>(
        &self,
        deadline: tokio::time::Instant,
        ensure: F,
    ) -> Result<T, ProvisionError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, ProvisionError>>,
    {
        let waiting_fixes = |e: &ProvisionError| {
            matches!(
                e.kind(),
                ProvisionErrorKind::StreamMissing | ProvisionErrorKind::ExternalNotReady
            )
        };
        self.policy()
            .backoff_until(Some(deadline))
            .run(ensure, waiting_fixes)
            .await
            .map(|(value, _)| value)
            .map_err(|Failed { error, .. }| error)
    }

    /// Ensures a stream once (single-flight): later calls reuse the first success.
    pub(crate) async fn ensure_stream(
        &self,
        stream: &StreamDecl,
    ) -> Result<stream::Info, ProvisionError> {
        let mut ensured = self.streams[stream.name].lock().await;
        if let Some(info) = &*ensured {
            return Ok(info.clone());
        }
        // Before the stream changes: its new routing would starve what cannot be migrated.
        for consumer in self.topology.consumers_of(stream.name) {
            if let Some(superseded) = self.topology.superseded(consumer) {
                self.provisioner.refuse_superseded(&superseded).await?;
            }
        }
        let consumed = self.topology.consumed_subjects(stream.name);
        let info = self.provisioner.reconcile_stream(stream, &consumed).await?;
        *ensured = Some(info.clone());
        Ok(info)
    }

    /// Reads the stream afresh (creating an owned stream that is gone), bypassing and
    /// replacing what is remembered: after a loss, the remembered info may describe a stream
    /// that was deleted and created again since.
    async fn refresh_stream(&self, stream: &StreamDecl) -> Result<stream::Info, ProvisionError> {
        let mut ensured = self.streams[stream.name].lock().await;
        let read = if stream.external {
            None
        } else {
            self.provisioner.read_stream(stream.name).await?
        };
        let info = match read {
            Some(info) => info,
            // Gone (or external: verified again, coverage included).
            None => {
                *ensured = None;
                let consumed = self.topology.consumed_subjects(stream.name);
                self.provisioner.reconcile_stream(stream, &consumed).await?
            }
        };
        *ensured = Some(info.clone());
        Ok(info)
    }

    /// Ensures the consumer's stream, then the consumer; a stream found missing is ensured
    /// again next time. A re-ensure after a loss ([`UpdateMode::CreateOnly`]) reads the stream
    /// afresh, so that a resume point is checked against the stream as it is now.
    pub(crate) async fn ensure(
        &self,
        consumer: &Consumer,
        relay: Option<&str>,
        mode: &UpdateMode,
    ) -> Result<Ensured, ProvisionError> {
        let stream = self.stream_decl(consumer);
        let info = match mode {
            UpdateMode::Update => self.ensure_stream(&stream).await?,
            UpdateMode::CreateOnly { .. } => self.refresh_stream(&stream).await?,
        };
        if let Some(group) = consumer.superseded_by {
            return Ok(Ensured {
                consumer: self.superseded(&info, consumer, group).await?,
                stream: StreamInstance::of(&info),
            });
        }
        let result = self
            .provisioner
            .reconcile_consumer(&info, &consumer.decl, relay, mode)
            .await;
        if let Err(e) = &result
            && e.kind() == ProvisionErrorKind::StreamMissing
        {
            *self.streams[stream.name].lock().await = None;
        }
        Ok(Ensured {
            consumer: result?,
            stream: StreamInstance::of(&info),
        })
    }

    /// The consumer the partitioned `group` migrates from, as the old fleet left it: never
    /// created or updated here, only read to its end ([`ProvisionErrorKind::Retired`] once it
    /// is gone).
    async fn superseded(
        &self,
        stream: &stream::Info,
        consumer: &Consumer,
        group: &str,
    ) -> Result<consumer::Info, ProvisionError> {
        let stream = stream.config.name.as_str();
        let old = consumer.decl.as_queue().map_or("", |q| q.group);
        match self.provisioner.read_consumer(stream, old).await? {
            Some(info) => Ok(info),
            None => Err(ProvisionError::new(
                ProvisionErrorKind::Retired,
                stream,
                format!(
                    "the consumer `{group}` migrates from is drained and deleted (or was never \
                     there): nothing is left to read from it"
                ),
            )
            .consumer(old)),
        }
    }

    /// Forgets that a stream was ensured (it disappeared): the next ensure creates it again.
    pub(crate) async fn forget_stream(&self, name: &str) {
        if let Some(ensured) = self.streams.get(name) {
            *ensured.lock().await = None;
        }
    }

    fn stream_decl(&self, consumer: &Consumer) -> StreamDecl {
        // Validation guarantees a declaration for every stream a consumer names.
        *self
            .topology
            .find_stream(consumer.decl.stream.name())
            .expect("validated: every consumer's stream is declared")
    }
}
