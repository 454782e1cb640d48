//! The topology every process provisions, and the parent's setup and clean-up of it.

use std::time::Duration;

use async_nats::jetstream::{self, ErrorCode, consumer, kv, stream};
use nats_topology::model::{BucketDecl, ConsumerDecl, QueueDecl, Storage, StreamDecl, StreamRef};
use nats_topology::{HandlerError, HandlerFuture, Incoming, Runtime, Topology};
use tokio::time::Instant;

use crate::BoxError;

/// One R3 stream `name` on `prefix.>`, two queue consumers on `prefix.a` / `prefix.b`, and
/// one R3 key-value bucket `<name>_KV` (the stream `KV_<name>_KV`).
pub(crate) struct Shape {
    pub(crate) stream: &'static StreamDecl,
    pub(crate) bucket: &'static BucketDecl,
    pub(crate) subject_a: &'static str,
    pub(crate) subject_b: &'static str,
}

pub(crate) const GROUP_A: &str = "group_a";

pub(crate) fn noop(_: Incoming) -> HandlerFuture {
    Box::pin(async { Ok::<(), HandlerError>(()) })
}
pub(crate) const GROUP_B: &str = "group_b";

impl Shape {
    pub(crate) fn new(name: &str, prefix: &str, storage: Storage) -> Shape {
        let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
        let subjects: &'static [&'static str] = Box::leak(vec![leak(format!("{prefix}.>"))].into());
        let stream = Box::leak(Box::new(
            StreamDecl::new(leak(name.to_owned()), subjects)
                .replicas(3)
                .storage(storage),
        ));
        let bucket = Box::leak(Box::new(
            BucketDecl::kv(leak(format!("{name}_KV")))
                .replicas(3)
                .storage(storage),
        ));
        Shape {
            stream,
            bucket,
            subject_a: leak(format!("{prefix}.a")),
            subject_b: leak(format!("{prefix}.b")),
        }
    }

    pub(crate) fn topology(&self) -> Topology {
        let a: &'static [&'static str] = Box::leak(vec![self.subject_a].into());
        let b: &'static [&'static str] = Box::leak(vec![self.subject_b].into());
        Topology::new()
            .stream(*self.stream)
            .bucket(*self.bucket)
            .consumer(
                ConsumerDecl::queue(
                    "bench::a",
                    StreamRef::Declared(self.stream),
                    QueueDecl::new(GROUP_A),
                )
                .subjects(a),
                noop,
            )
            .consumer(
                ConsumerDecl::queue(
                    "bench::b",
                    StreamRef::Declared(self.stream),
                    QueueDecl::new(GROUP_B),
                )
                .subjects(b),
                noop,
            )
    }

    /// The stream configuration our runtime sends, for the UPDATE-first sequence.
    pub(crate) fn stream_config(&self) -> stream::Config {
        stream::Config {
            name: self.stream.name.to_owned(),
            subjects: self
                .stream
                .subjects
                .iter()
                .map(|s| (*s).to_owned())
                .collect(),
            num_replicas: 3,
            storage: match self.stream.storage {
                Some(Storage::Memory) => stream::StorageType::Memory,
                _ => stream::StorageType::File,
            },
            ..Default::default()
        }
    }

    /// The bucket's configuration, for `create_key_value` in the UPDATE-first sequence.
    pub(crate) fn bucket_config(&self) -> kv::Config {
        kv::Config {
            bucket: self.bucket.name.to_owned(),
            num_replicas: 3,
            storage: match self.bucket.storage {
                Some(Storage::Memory) => stream::StorageType::Memory,
                _ => stream::StorageType::File,
            },
            ..Default::default()
        }
    }

    /// The streams a cell leaves behind: the stream and the bucket's.
    pub(crate) fn stream_names(&self) -> [String; 2] {
        [
            self.stream.name.to_owned(),
            format!("KV_{}", self.bucket.name),
        ]
    }

    /// The consumer configuration our runtime sends for a pull queue consumer.
    pub(crate) fn consumer_config(group: &str, subject: &str) -> consumer::pull::Config {
        consumer::pull::Config {
            durable_name: Some(group.to_owned()),
            name: Some(group.to_owned()),
            deliver_policy: consumer::DeliverPolicy::All,
            ack_policy: consumer::AckPolicy::Explicit,
            filter_subject: subject.to_owned(),
            ..Default::default()
        }
    }
}

/// Provisions the shape once (our runtime, with retry): the stream and both consumers exist
/// before the warm cell's processes start.
pub(crate) async fn prepare_warm(
    client: &async_nats::Client,
    shape: &Shape,
) -> Result<(), BoxError> {
    Runtime::builder(client.clone())
        .topology(shape.topology())
        .build()?
        .provision()
        .await?;
    Ok(())
}

/// One R3 stream created and deleted, so the cluster has done it once.
pub(crate) async fn warm_up(
    client: &async_nats::Client,
    js: &jetstream::Context,
    storage: Storage,
) -> Result<(), BoxError> {
    let shape = Shape::new("BENCH_PROV_WARMUP", "bench.prov.warmup", storage);
    prepare_warm(client, &shape).await?;
    for name in shape.stream_names() {
        delete_stream(js, &name).await;
    }
    Ok(())
}

/// Deletes a stream and waits until the server says it is gone (a storm may delay it).
pub(crate) async fn delete_stream(js: &jetstream::Context, name: &str) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while Instant::now() < deadline {
        let _ = js.delete_stream(name).await;
        match js.get_stream(name).await {
            Err(e)
                if matches!(
                    e.kind(),
                    jetstream::context::GetStreamErrorKind::JetStream(ref j)
                        if j.error_code() == ErrorCode::STREAM_NOT_FOUND
                ) =>
            {
                return;
            }
            _ => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
    eprintln!("warning: stream {name} still exists after 120 s of deleting it");
}
