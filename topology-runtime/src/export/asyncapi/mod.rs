//! The AsyncAPI 3.0 document of a topology: streams and consumers here, endpoints and core
//! subscriptions in `served`.

mod served;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};
use topology_core::model::{CodecId, ConsumerKind, Delivery, StreamDecl};

use super::schema::{self, PayloadSchema};
use super::{ExportError, create_dir, write_file, yaml};
use crate::provision::{stamped_consumer_config, stamped_stream_config};
use crate::registry::Topology;

/// The `info` of an AsyncAPI document: the application's title and version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiInfo {
    /// The application's name.
    pub title: String,
    /// The application's (or its API's) version.
    pub version: String,
    /// A description, if any.
    pub description: Option<String>,
}

impl ApiInfo {
    /// A title and a version, as in `ApiInfo::new(env!("CARGO_PKG_NAME"), env!("CARGO_PKG_VERSION"))`.
    pub fn new(title: impl Into<String>, version: impl Into<String>) -> Self {
        ApiInfo {
            title: title.into(),
            version: version.into(),
            description: None,
        }
    }

    /// Adds a description.
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }
}

/// An AsyncAPI 3.0 document: see [`asyncapi`].
#[derive(Debug, Clone, PartialEq)]
pub struct AsyncApi {
    document: Value,
}

impl AsyncApi {
    /// The document as a JSON value.
    pub fn as_value(&self) -> &Value {
        &self.document
    }

    /// The document as pretty-printed JSON.
    pub fn to_json(&self) -> String {
        let mut text =
            serde_json::to_string_pretty(&self.document).expect("a JSON value always serializes");
        text.push('\n');
        text
    }

    /// The document as YAML (the same document as [`AsyncApi::to_json`]).
    pub fn to_yaml(&self) -> String {
        yaml::to_yaml(&self.document)
    }

    /// Writes `asyncapi.json` and `asyncapi.yaml` into `dir` (created if missing); returns
    /// the files written.
    pub fn write_to(&self, dir: impl AsRef<Path>) -> Result<Vec<PathBuf>, ExportError> {
        let dir = dir.as_ref();
        create_dir(dir)?;
        let json = dir.join("asyncapi.json");
        write_file(&json, &self.to_json())?;
        let yaml = dir.join("asyncapi.yaml");
        write_file(&yaml, &self.to_yaml())?;
        Ok(vec![json, yaml])
    }
}

/// The version of the NATS bindings of AsyncAPI this document uses.
pub(super) const NATS_BINDING_VERSION: &str = "0.1.0";

/// The AsyncAPI 3.0 document of `topology` (no server needed):
///
/// - a channel per declared subject (the subjects of streams, consumer filters and dead-letter
///   subjects), its address the NATS subject (wildcards as written), the stream that captures
///   it as the `x-nats-stream` extension (with the stream's configuration when it is owned,
///   and the names of its `mirror` or `sources`); a handler reading the whole of a mirror or
///   of a stream with sources only gets a channel for that stream, saying where its messages
///   come from;
/// - a `receive` operation per handler (one per subject it reads, when it reads several), with
///   the `nats` operation binding's `queue` set to the group of a queue consumer, and the
///   consumer's kind, group and configuration as the `x-nats-consumer` extension;
/// - per handler a message whose payload is the schema of the handler's payload type when it
///   implements `schemars::JsonSchema` and the `schemars` feature is on (its definitions under
///   `components.schemas`), else an open schema;
/// - per endpoint a channel of its subject and a `receive` operation with the `nats` binding's
///   `queue` set to its queue group, a `reply` (the reply's schema, or an open one, on a channel
///   whose address is the request's reply subject, so `null`: known only at run time), its
///   service as a tag and as the `x-nats-service` extension (name, version, description,
///   endpoint, queue group, concurrency);
/// - per core subscription a `receive` operation, with the `queue` binding when it is in a
///   queue group, and the `x-nats-subscription` extension saying which (`each_instance`: every
///   instance receives every message).
///
/// ```
/// use nats_topology::export::{self, ApiInfo};
/// use nats_topology::model::{EndpointDecl, ServiceDecl};
/// use nats_topology::{ServiceError, Topology};
///
/// static MEMBERS: ServiceDecl = ServiceDecl::new("members", "1.2.0");
/// let topology = Topology::new().endpoint(
///     EndpointDecl::new("app::get_member", &MEMBERS, "get", "members.get"),
///     |request| Box::pin(async move { Ok::<_, ServiceError>(request.payload().clone()) }),
/// );
/// let doc = export::asyncapi(&topology, &ApiInfo::new("members", "1.2.0"));
/// let operation = &doc.as_value()["operations"]["app.get_member"];
/// assert_eq!(operation["bindings"]["nats"]["queue"], "q");
/// assert_eq!(operation["x-nats-service"]["version"], "1.2.0");
/// assert_eq!(operation["reply"]["channel"]["$ref"], "#/channels/app.get_member.reply");
/// ```
pub fn asyncapi(topology: &Topology, info: &ApiInfo) -> AsyncApi {
    let mut doc = Document::default();
    // What runs: a partitioned consumer as the consumers of its partitions.
    let running = topology.partitioned();
    for stream in topology.streams() {
        for subject in stream.subjects {
            doc.channel(Some(subject), Some(stream.name), topology);
        }
    }
    for consumer in topology.consumers() {
        let decl = &consumer.decl;
        let stream = decl.stream.name();
        let declared = topology.find_stream(stream);
        // What the handler reads: its filters, else the whole stream.
        let subjects: Vec<Option<&str>> = match (decl.subjects, declared) {
            // A mirror, or a stream with sources only: its subjects are its origins'.
            ([], Some(s)) if s.subjects.is_empty() => vec![None],
            ([], Some(s)) => s.subjects.iter().map(|s| Some(*s)).collect(),
            // A stream declared elsewhere: its subjects are not known here.
            ([], None) => vec![None],
            (filters, _) => filters.iter().map(|s| Some(*s)).collect(),
        };
        let handler_id = identifier(decl.handler);
        let schema = schema::registered(decl.handler);
        if let Some(schema) = &schema {
            doc.schemas.extend(schema.definitions.clone());
        }
        let message = message(decl.handler, "payload", schema.as_ref(), decl.codec);
        let mut extension = Map::new();
        extension.insert("stream".into(), json!(stream));
        let mut bindings = None;
        match &decl.kind {
            ConsumerKind::Queue(queue) => {
                extension.insert("kind".into(), json!("queue"));
                extension.insert("group".into(), json!(queue.group));
                let delivery = match queue.delivery {
                    Delivery::Pull => "pull",
                    Delivery::Push => "push",
                };
                extension.insert("delivery".into(), json!(delivery));
                let config = stamped_consumer_config(stream, decl, None, None);
                extension.insert("config".into(), to_value(&config));
                if let Some(partitioning) = queue.partitioned {
                    // Run as one consumer per partition: their names, filters and (the first's)
                    // configuration, as provisioned.
                    let partitions: Vec<_> = (running.consumers().iter())
                        .filter(|c| c.decl.stream.name() == stream)
                        .filter(|c| c.partition.is_some_and(|p| p.group == queue.group))
                        .collect();
                    let consumers: Vec<Value> = (partitions.iter())
                        .filter_map(|c| Some((c.decl.as_queue()?.group, c.decl.subjects.first()?)))
                        .map(|(name, filter)| json!({ "name": name, "filter": filter }))
                        .collect();
                    if let Some(first) = partitions.first() {
                        let config = stamped_consumer_config(stream, &first.decl, None, None);
                        extension.insert("config".into(), to_value(&config));
                    }
                    extension.insert(
                        "partitions".into(),
                        json!({
                            "count": partitioning.partitions,
                            "key": partitioning.key,
                            "consumers": consumers,
                            "note": "order per key: each partition is a durable consumer delivering one message at a time to the one replica holding it (docs/PARTITIONS.md)",
                        }),
                    );
                }
                if let Some(dead_letter) = queue.dead_letter {
                    extension.insert("dead_letter".into(), json!(dead_letter));
                    let id = doc.channel(Some(dead_letter), None, topology);
                    doc.channel_mut(&id)["description"] = json!(format!(
                        "Dead letters of `{}`: messages it failed on for the last time.",
                        decl.handler
                    ));
                }
                bindings = Some(json!({
                    "nats": { "queue": queue.group, "bindingVersion": NATS_BINDING_VERSION }
                }));
            }
            ConsumerKind::Broadcast(_) => {
                extension.insert("kind".into(), json!("broadcast"));
                extension.insert(
                    "note".into(),
                    json!(
                        "an ephemeral consumer per instance: every instance receives every message"
                    ),
                );
            }
        }
        let many = subjects.len() > 1;
        for (i, subject) in subjects.into_iter().enumerate() {
            let channel_id = doc.channel(subject, Some(stream), topology);
            let message_id = format!("{handler_id}.payload");
            doc.channel_mut(&channel_id)["messages"][&message_id] = message.clone();
            let operation_id = if many {
                format!("{handler_id}.{}", i + 1)
            } else {
                handler_id.clone()
            };
            let mut operation = json!({
                "action": "receive",
                "channel": { "$ref": format!("#/channels/{channel_id}") },
                "messages": [{ "$ref": format!("#/channels/{channel_id}/messages/{message_id}") }],
                "summary": format!("handled by `{}`", decl.handler),
                "x-nats-consumer": Value::Object(extension.clone()),
            });
            if let Some(bindings) = &bindings {
                operation["bindings"] = bindings.clone();
            }
            doc.operations.insert(operation_id, operation);
        }
    }
    served::endpoints(&mut doc, topology);
    served::subscriptions(&mut doc, topology);

    let mut info_value = json!({ "title": info.title, "version": info.version });
    if let Some(description) = &info.description {
        info_value["description"] = json!(description);
    }
    let mut document = json!({
        "asyncapi": "3.0.0",
        "info": info_value,
        "defaultContentType": "application/json",
        "channels": Value::Object(doc.channels.into_iter().collect()),
        "operations": Value::Object(doc.operations.into_iter().collect()),
    });
    if !doc.schemas.is_empty() {
        document["components"] = json!({ "schemas": Value::Object(doc.schemas) });
    }
    AsyncApi { document }
}

#[derive(Default)]
struct Document {
    /// By channel id.
    channels: BTreeMap<String, Value>,
    /// By channel id: the subject (or stream, when the subject is unknown) it stands for.
    addresses: BTreeMap<String, (Option<String>, Option<String>)>,
    operations: BTreeMap<String, Value>,
    schemas: Map<String, Value>,
}

impl Document {
    /// `base`, or `base.2`, `base.3`... when `base` is taken in `map`.
    fn unique(map: &BTreeMap<String, Value>, base: String) -> String {
        let mut id = base.clone();
        let mut n = 1;
        while map.contains_key(&id) {
            n += 1;
            id = format!("{base}.{n}");
        }
        id
    }

    fn channel_mut(&mut self, id: &str) -> &mut Value {
        self.channels
            .get_mut(id)
            .expect("channel ids come from `Document::channel`")
    }

    /// The id of the channel of `subject` (or of the whole of `stream` when the subject is not
    /// known), added if new.
    fn channel(
        &mut self,
        subject: Option<&str>,
        stream: Option<&str>,
        topology: &Topology,
    ) -> String {
        let key = (
            subject.map(str::to_owned),
            subject
                .is_none()
                .then(|| stream.map(str::to_owned))
                .flatten(),
        );
        if let Some((id, _)) = self.addresses.iter().find(|(_, k)| **k == key) {
            return id.clone();
        }
        let id = Document::unique(
            &self.channels,
            identifier(subject.or(stream).unwrap_or("unknown")),
        );
        let mut channel = json!({ "address": subject, "messages": {} });
        if let Some(stream) = stream {
            channel["x-nats-stream"] = stream_extension(stream, topology.find_stream(stream));
        }
        if subject.is_none() {
            let name = stream.unwrap_or("unknown");
            let taken = stream.and_then(|s| topology.find_stream(s)).map(taken_from);
            channel["description"] = json!(match taken.filter(|t| !t.is_empty()) {
                Some(taken) => format!("Every message of stream `{name}`: {taken}."),
                None => format!("Every subject of stream `{name}` (declared elsewhere)."),
            });
        }
        self.channels.insert(id.clone(), channel);
        self.addresses.insert(id.clone(), key);
        id
    }
}

fn stream_extension(name: &str, decl: Option<&StreamDecl>) -> Value {
    match decl {
        Some(decl) if !decl.external => {
            let mut extension = json!({
                "name": name,
                "owned": true,
                "config": to_value(&stamped_stream_config(decl, None)),
            });
            // Where its messages come from, also in `config` (`mirror`, `sources`), named here
            // for a reader.
            if let Some(mirror) = &decl.mirror {
                extension["mirror"] = json!(mirror.name());
            }
            if !decl.sources.is_empty() {
                let names: Vec<&str> = decl.sources.iter().map(|s| s.name()).collect();
                extension["sources"] = json!(names);
            }
            extension
        }
        _ => json!({ "name": name, "owned": false }),
    }
}

/// "a mirror of `A`" or "sourced from `A`, `B`" (empty for a stream that takes from none).
fn taken_from(decl: &StreamDecl) -> String {
    let names = |origins: &mut dyn Iterator<Item = &topology_core::model::Origin>| {
        origins
            .map(|o| format!("`{}`", o.name()))
            .collect::<Vec<_>>()
            .join(", ")
    };
    match &decl.mirror {
        Some(mirror) => format!("a mirror of {}", names(&mut std::iter::once(mirror))),
        None if decl.sources.is_empty() => String::new(),
        None => format!("sourced from {}", names(&mut decl.sources.iter())),
    }
}

/// The message of `handler`'s `what` (`payload`, `request`, `reply`), written by `codec`
/// (its `contentType` stated unless JSON, the document's default; for protobuf, the message's
/// full name as `x-protobuf-message`, when its type implements `prost::Name`).
fn message(handler: &str, what: &str, schema: Option<&PayloadSchema>, codec: CodecId) -> Value {
    let last = handler.rsplit("::").next().unwrap_or(handler);
    let name = match what {
        "payload" => last.to_owned(),
        _ => format!("{last}_{what}"),
    };
    let payload = match schema {
        Some(schema) => schema.schema.clone(),
        None => json!({
            "description": format!("Any {what}: its type has no JSON Schema here (enable the `schemars` feature and derive `schemars::JsonSchema` on it).")
        }),
    };
    let mut message = json!({
        "name": name,
        "title": format!("{what} of `{handler}`"),
        "payload": payload,
    });
    if codec != CodecId::Json {
        message["contentType"] = json!(codec.content_type());
    }
    if codec == CodecId::Protobuf {
        let name = match what {
            "reply" => schema::registered_reply_protobuf_name(handler),
            _ => schema::registered_protobuf_name(handler),
        };
        match name {
            Some(name) => message["x-protobuf-message"] = json!(name),
            None => {
                message["description"] = json!(
                    "A protobuf message; its type states no message name (implement `prost::Name`, as `prost-build` does with `enable_type_names`, to state it here)."
                )
            }
        }
    }
    message
}

fn to_value(value: &impl serde::Serialize) -> Value {
    serde_json::to_value(value).expect("configurations always serialize")
}

/// A name usable as an AsyncAPI key and in a `$ref`: `orders.>` -> `orders.all`,
/// `billing::on_order` -> `billing.on_order`.
fn identifier(text: &str) -> String {
    let mut id = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            ':' if chars.peek() == Some(&':') => {
                chars.next();
                id.push('.');
            }
            '*' => id.push_str("any"),
            '>' => id.push_str("all"),
            c if c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.' => id.push(c),
            _ => id.push('_'),
        }
    }
    id
}

#[cfg(test)]
mod tests {
    use super::identifier;

    #[test]
    fn export_identifiers() {
        assert_eq!(identifier("orders.>"), "orders.all");
        assert_eq!(identifier("orders.*.created"), "orders.any.created");
        assert_eq!(identifier("billing::on_order"), "billing.on_order");
        assert_eq!(identifier("a b"), "a_b");
    }
}
