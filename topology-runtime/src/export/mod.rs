//! Export: the topology as files a team reviews and tools read, computed from the
//! declarations alone (no server).
//!
//! - [`nats_json`]: one stream configuration per owned stream and one consumer configuration
//!   per queue consumer, in the JetStream API's JSON shape (what `nats stream add --config`
//!   and `nats consumer add --config` read). They are built by the very code that provisions,
//!   so they are exactly what the runtime sends to the server.
//! - [`asyncapi`](fn@asyncapi): an AsyncAPI 3.0 document (JSON or YAML): a channel per declared subject, a
//!   `receive` operation per handler (with the NATS `queue` binding for queue consumers), the
//!   stream's configuration as the `x-nats-stream` extension of its channels, and a payload
//!   schema per handler (from `schemars::JsonSchema` with the `schemars` feature, else open);
//!   endpoints as request/reply operations in their queue group, core subscriptions as
//!   `receive` operations.
//! - [`permissions`](fn@permissions): the service user's publish and subscribe allow lists.
//!
//! ```
//! use nats_topology::export;
//! use nats_topology::model::{ConsumerDecl, QueueDecl, StreamDecl, StreamRef};
//! use nats_topology::{HandlerError, Topology};
//!
//! static ORDERS: StreamDecl = StreamDecl::new("ORDERS", &["orders.>"]);
//! let topology = Topology::new().consumer(
//!     ConsumerDecl::queue("billing::on_order", StreamRef::Declared(&ORDERS), QueueDecl::new("billing"))
//!         .subjects(&["orders.created"]),
//!     |_| Box::pin(async { Ok::<(), HandlerError>(()) }),
//! );
//!
//! let nats = export::nats_json(&topology);
//! assert_eq!(nats.streams[0].config.name, "ORDERS");
//! assert_eq!(nats.consumers[0].config.durable_name.as_deref(), Some("billing"));
//!
//! let doc = export::asyncapi(&topology, &export::ApiInfo::new("billing", "1.0.0"));
//! assert!(doc.to_yaml().starts_with("asyncapi: \"3.0.0\"\n"));
//! # let dir = std::env::temp_dir().join(format!("nt-export-doc-{}", std::process::id()));
//! let written = nats.write_to(&dir)?; // ORDERS.stream.json, ORDERS.billing.consumer.json
//! assert_eq!(written.len(), 2);
//! # std::fs::remove_dir_all(&dir)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod asyncapi;
mod permissions;
mod schema;
mod yaml;

use std::path::{Path, PathBuf};

use async_nats::jetstream::{consumer, stream};
use topology_core::model::ConsumerKind;

use crate::provision::{stamped_consumer_config, stamped_stream_config};
use crate::registry::Topology;

pub use asyncapi::{ApiInfo, AsyncApi, asyncapi};
pub use permissions::{
    Access, DEFAULT_RESPONSE_EXPIRY, Declaration, Need, Permission, Permissions, Responses, Role,
    Verb, permissions,
};
pub use schema::PayloadSchema;
#[cfg(feature = "schemars")]
pub use schema::schema_of;
#[doc(hidden)]
pub use schema::{
    NameFallback, NameSpecialized, PayloadSchemaRegistration, ReplySchemaRegistration,
    SchemaFallback, SchemaProbe, SchemaSpecialized,
};

/// An owned stream's configuration, as the runtime creates it.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamExport {
    /// The configuration (serializes to the JetStream API's JSON shape).
    pub config: stream::Config,
}

/// A queue consumer's configuration, as the runtime creates it.
#[derive(Debug, Clone, PartialEq)]
pub struct ConsumerExport {
    /// The stream it reads.
    pub stream: String,
    /// The handler that declares it.
    pub handler: String,
    /// The configuration (serializes to the JetStream API's JSON shape).
    pub config: consumer::Config,
}

impl ConsumerExport {
    /// The consumer's name (its group).
    pub fn name(&self) -> &str {
        self.config.durable_name.as_deref().unwrap_or_default()
    }
}

/// The NATS JSON export of a topology: see [`nats_json`].
#[derive(Debug, Clone, PartialEq)]
pub struct NatsJson {
    /// One per owned stream (external streams belong to someone else), sorted by name.
    pub streams: Vec<StreamExport>,
    /// One per queue consumer (broadcast relays are created by each instance at start-up),
    /// sorted by stream, then handler.
    pub consumers: Vec<ConsumerExport>,
}

/// Why an export could not be written.
#[derive(thiserror::Error)]
#[error("cannot write the export to {}: {source}; check that the directory is writable", path.display())]
pub struct ExportError {
    /// The file or directory.
    pub path: PathBuf,
    /// The I/O error.
    #[source]
    pub source: std::io::Error,
}

debug_as_display!(ExportError);

/// The stream and consumer configurations the runtime provisions for `topology`, built by the
/// same code (no server needed).
pub fn nats_json(topology: &Topology) -> NatsJson {
    // A partitioned consumer is provisioned as the consumers of its partitions.
    let topology = &topology.partitioned();
    let streams = topology
        .streams()
        .iter()
        .filter(|s| !s.external)
        .map(|decl| StreamExport {
            config: stamped_stream_config(decl, None),
        })
        .collect();
    let consumers = topology
        .consumers()
        .iter()
        .filter(|c| matches!(c.decl.kind, ConsumerKind::Queue(_)))
        .map(|c| {
            let stream = c.decl.stream.name();
            ConsumerExport {
                stream: stream.to_owned(),
                handler: c.decl.handler.to_owned(),
                config: stamped_consumer_config(stream, &c.decl, None, None),
            }
        })
        .collect();
    NatsJson { streams, consumers }
}

impl NatsJson {
    /// Writes `STREAM.stream.json` per stream and `STREAM.GROUP.consumer.json` per consumer
    /// into `dir` (created if missing), pretty-printed; returns the files written.
    pub fn write_to(&self, dir: impl AsRef<Path>) -> Result<Vec<PathBuf>, ExportError> {
        let dir = dir.as_ref();
        create_dir(dir)?;
        let mut written = Vec::new();
        for s in &self.streams {
            let path = dir.join(format!("{}.stream.json", s.config.name));
            write_file(&path, &json_pretty(&s.config))?;
            written.push(path);
        }
        for c in &self.consumers {
            let path = dir.join(format!("{}.{}.consumer.json", c.stream, c.name()));
            write_file(&path, &json_pretty(&c.config))?;
            written.push(path);
        }
        Ok(written)
    }
}

fn json_pretty(value: &impl serde::Serialize) -> String {
    let mut text = serde_json::to_string_pretty(value)
        .expect("stream and consumer configurations always serialize");
    text.push('\n');
    text
}

pub(crate) fn create_dir(dir: &Path) -> Result<(), ExportError> {
    std::fs::create_dir_all(dir).map_err(|source| ExportError {
        path: dir.to_owned(),
        source,
    })
}

pub(crate) fn write_file(path: &Path, contents: &str) -> Result<(), ExportError> {
    std::fs::write(path, contents).map_err(|source| ExportError {
        path: path.to_owned(),
        source,
    })
}
