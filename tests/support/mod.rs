//! Helpers for the runtime's end-to-end tests on real servers: a running runtime with a stop
//! switch, a ledger of handled ids, publishing numbered jobs, and reading a consumer's state
//! on the server.
//!
//! Each test builds its own topology by hand (stream names, ack waits and handlers differ from
//! test to test) and gets its own server, so tests never share state.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::{self, consumer};
use nats_topology::model::{ConsumerDecl, QueueDecl, StreamDecl, StreamRef};
use nats_topology::testkit::eventually;
use nats_topology::{
    HandlerError, HandlerFuture, Health, Incoming, RetryPolicy, RunError, Runtime, RuntimeBuilder,
    Topology,
};
use serde::{Deserialize, Serialize};

/// Sends the runtime's `tracing` output to the test's output when `RUST_LOG` is set (for
/// example `RUST_LOG=topology_runtime=debug`); does nothing otherwise.
pub fn trace() {
    if let Ok(filter) = tracing_subscriber::EnvFilter::try_from_default_env() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_test_writer()
            .try_init();
    }
}

/// A `'static` string for declarations built at run time.
pub fn leak(s: impl Into<String>) -> &'static str {
    Box::leak(s.into().into_boxed_str())
}

/// A `'static` list of strings for declarations built at run time.
pub fn leak_all(items: &[&str]) -> &'static [&'static str] {
    let items: Vec<&'static str> = items.iter().map(|s| leak(*s)).collect();
    Box::leak(items.into_boxed_slice())
}

/// A stream declaration with run-time names.
pub fn stream(name: &str, subjects: &[&str]) -> StreamDecl {
    StreamDecl::new(leak(name), leak_all(subjects))
}

/// A queue consumer of `stream` filtered on `subject`.
pub fn queue(handler: &str, stream: &StreamDecl, subject: &str, queue: QueueDecl) -> ConsumerDecl {
    ConsumerDecl::queue(leak(handler), StreamRef::Named(stream.name), queue)
        .subjects(leak_all(&[subject]))
}

/// Settings that keep the tests fast: short heartbeats and pull expiry, small retry windows.
pub fn fast_retry() -> RetryPolicy {
    RetryPolicy {
        base: Duration::from_millis(100),
        cap: Duration::from_secs(1),
        deadline: Duration::from_secs(10),
        request_timeout: Duration::from_secs(2),
    }
}

/// A builder with [`fast_retry`], a 500 ms heartbeat, 2 s pull expiry and a 10 s grace period.
pub fn fast(builder: RuntimeBuilder) -> RuntimeBuilder {
    builder
        .retry(fast_retry())
        .heartbeat(Duration::from_millis(500))
        .pull_expires(Duration::from_secs(2))
        .grace_period(Duration::from_secs(10))
}

/// One unit of work.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct Job {
    pub id: u64,
}

/// The job id in a JSON payload.
pub fn job_id(incoming: &Incoming) -> Result<u64, HandlerError> {
    let job: Job = serde_json::from_slice(incoming.payload())
        .map_err(|e| HandlerError::permanent(format!("not a job: {e}")))?;
    Ok(job.id)
}

/// Every id handled, in order, duplicates kept (so that they can be counted).
#[derive(Clone, Default)]
pub struct Ledger(Arc<Mutex<Vec<u64>>>);

impl Ledger {
    pub fn record(&self, id: u64) {
        self.0.lock().unwrap().push(id);
    }

    pub fn ids(&self) -> Vec<u64> {
        self.0.lock().unwrap().clone()
    }

    pub fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }

    pub fn unique(&self) -> BTreeSet<u64> {
        self.ids().into_iter().collect()
    }

    /// Ids handled more than once, with their counts.
    pub fn duplicates(&self) -> BTreeMap<u64, usize> {
        let mut counts = BTreeMap::new();
        for id in self.ids() {
            *counts.entry(id).or_insert(0usize) += 1;
        }
        counts.retain(|_, n| *n > 1);
        counts
    }

    pub fn covers(&self, ids: impl IntoIterator<Item = u64>) -> bool {
        let seen = self.unique();
        ids.into_iter().all(|id| seen.contains(&id))
    }
}

/// The union of several ledgers.
pub fn union(ledgers: &[Ledger]) -> BTreeSet<u64> {
    ledgers.iter().flat_map(Ledger::ids).collect()
}

/// A handler that decodes a [`Job`], works for `work` (simulated work, not synchronisation),
/// then records the id.
pub fn job_handler(
    ledger: Ledger,
    work: Duration,
) -> impl Fn(Incoming) -> HandlerFuture + Send + Sync + 'static {
    move |incoming| {
        let ledger = ledger.clone();
        Box::pin(async move {
            let id = job_id(&incoming)?;
            if !work.is_zero() {
                tokio::time::sleep(work).await;
            }
            ledger.record(id);
            Ok(())
        })
    }
}

/// A one-queue-consumer topology handled by [`job_handler`].
pub fn job_topology(
    stream: StreamDecl,
    consumer: ConsumerDecl,
    ledger: Ledger,
    work: Duration,
) -> Topology {
    Topology::new()
        .stream(stream)
        .consumer(consumer, job_handler(ledger, work))
}

/// A runtime running in its own task until [`Running::stop`].
pub struct Running {
    pub health: Health,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<(), RunError>>,
}

impl Running {
    pub fn spawn(runtime: Runtime) -> Running {
        let health = runtime.health();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(runtime.run_until(async move {
            let _ = stopped.await;
        }));
        Running {
            health,
            stop: Some(stop),
            task,
        }
    }

    /// Waits until every queue consumer runs.
    pub async fn ready(&self, timeout: Duration) {
        let health = self.health.clone();
        eventually(timeout, "the runtime to be ready", || {
            let ready = health.ready();
            async move { ready.then_some(()) }
        })
        .await;
    }

    /// Signals the drain and waits for `run_until` to return.
    pub async fn stop(mut self) -> Result<(), RunError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        (&mut self.task)
            .await
            .expect("the runtime task does not panic")
    }

    /// Whether `run_until` has returned.
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }
}

/// A JetStream context on its own connection, for the test's publishing and inspection.
pub async fn jetstream(url: &str) -> jetstream::Context {
    let client = async_nats::connect(url).await.expect("connect");
    jetstream::new(client)
}

/// Publishes `{"id": n}` for every id to `subject` and waits for every acknowledgement.
pub async fn publish_jobs(
    js: &jetstream::Context,
    subject: &str,
    ids: impl IntoIterator<Item = u64>,
) {
    let mut acks = Vec::new();
    for id in ids {
        let body = serde_json::to_vec(&Job { id }).unwrap();
        acks.push(
            js.publish(subject.to_owned(), body.into())
                .await
                .expect("publish"),
        );
    }
    for ack in acks {
        ack.await.expect("the stream acknowledges the publish");
    }
}

/// Publishes one job, retrying (with a message id, so a retried publish is not stored twice)
/// until the stream acknowledges it: for publishing while a cluster elects a leader.
pub async fn publish_job_until_acked(js: &jetstream::Context, subject: &str, id: u64) {
    let subject = subject.to_owned();
    eventually(
        Duration::from_secs(60),
        "a publish to be acknowledged",
        || {
            let js = js.clone();
            let subject = subject.clone();
            async move {
                let mut headers = async_nats::HeaderMap::new();
                headers.insert("Nats-Msg-Id", format!("job-{id}").as_str());
                let body = serde_json::to_vec(&Job { id }).unwrap();
                let ack = js
                    .publish_with_headers(subject, headers, body.into())
                    .await
                    .ok()?;
                ack.await.ok().map(|_| ())
            }
        },
    )
    .await;
}

/// The consumer's state on the server.
pub async fn consumer_info(
    js: &jetstream::Context,
    stream: &str,
    consumer: &str,
) -> Option<consumer::Info> {
    let stream = js.get_stream_no_info(stream).await.ok()?;
    stream.consumer_info(consumer).await.ok()
}

/// Waits until the consumer has nothing pending and nothing unacknowledged; returns its info.
pub async fn settled(
    js: &jetstream::Context,
    stream: &str,
    consumer: &str,
    timeout: Duration,
) -> consumer::Info {
    eventually(
        timeout,
        "zero pending and zero ack-pending on the server",
        || async {
            let info = consumer_info(js, stream, consumer).await?;
            (info.num_pending == 0 && info.num_ack_pending == 0).then_some(info)
        },
    )
    .await
}

/// The names of the consumers of `stream`.
pub async fn consumer_names(js: &jetstream::Context, stream: &str) -> BTreeSet<String> {
    use futures::TryStreamExt;
    let stream = js.get_stream_no_info(stream).await.expect("stream handle");
    stream
        .consumer_names()
        .try_collect()
        .await
        .expect("list the consumers")
}
