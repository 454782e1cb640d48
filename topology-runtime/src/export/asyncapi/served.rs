//! Endpoints (request/reply operations) and core subscriptions in the AsyncAPI document.

use serde_json::{Map, Value, json};
use topology_core::service::{EndpointDecl, Fanout, SubscriptionDecl};

use super::{Document, NATS_BINDING_VERSION, identifier, message};
use crate::export::schema::{self, PayloadSchema};
use crate::registry::Topology;

fn queue_binding(group: &str) -> Value {
    json!({ "nats": { "queue": group, "bindingVersion": NATS_BINDING_VERSION } })
}

/// Adds `message` under `message_id` to the channel `channel_id`; its `$ref`.
fn add_message(doc: &mut Document, channel_id: &str, message_id: &str, message: Value) -> Value {
    doc.channel_mut(channel_id)["messages"][message_id] = message;
    json!({ "$ref": format!("#/channels/{channel_id}/messages/{message_id}") })
}

/// The schema registered for a handler, its definitions added to the document's.
fn schema_of(doc: &mut Document, schema: Option<PayloadSchema>) -> Option<PayloadSchema> {
    if let Some(schema) = &schema {
        doc.schemas.extend(schema.definitions.clone());
    }
    schema
}

/// The service of an endpoint, as the `x-nats-service` extension.
fn service_extension(decl: &EndpointDecl) -> Value {
    let service = decl.service;
    let mut extension = Map::new();
    extension.insert("name".into(), json!(service.name));
    extension.insert("version".into(), json!(service.version));
    if let Some(description) = service.description {
        extension.insert("description".into(), json!(description));
    }
    if !service.metadata.is_empty() {
        extension.insert("metadata".into(), metadata(service.metadata));
    }
    extension.insert("endpoint".into(), json!(decl.name));
    extension.insert("queue_group".into(), json!(decl.queue_group()));
    extension.insert("concurrency".into(), json!(decl.effective_concurrency()));
    if let Some(timeout) = decl.timeout {
        extension.insert("timeout_ms".into(), json!(timeout.as_millis() as u64));
    }
    if !decl.metadata.is_empty() {
        extension.insert("endpoint_metadata".into(), metadata(decl.metadata));
    }
    Value::Object(extension)
}

fn metadata(pairs: &[(&str, &str)]) -> Value {
    Value::Object(
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), json!(v)))
            .collect(),
    )
}

/// A `receive` operation per endpoint, with its queue group and its reply.
pub(super) fn endpoints(doc: &mut Document, topology: &Topology) {
    for endpoint in topology.endpoints() {
        let decl = &endpoint.decl;
        let handler_id = identifier(decl.handler);
        let channel_id = doc.channel(Some(decl.subject), None, topology);
        let request = schema_of(doc, schema::registered(decl.handler));
        let request = message(decl.handler, "request", request.as_ref(), decl.codec);
        let request_ref = add_message(doc, &channel_id, &format!("{handler_id}.request"), request);

        // The reply goes to the subject the request names: no address is known in advance.
        let reply_channel = Document::unique(&doc.channels, format!("{handler_id}.reply"));
        doc.channels.insert(
            reply_channel.clone(),
            json!({
                "address": null,
                "description": format!(
                    "The reply subject of each request to `{}` (the requester's inbox), known \
                     only at run time.",
                    decl.subject
                ),
                "messages": {},
            }),
        );
        let reply = schema_of(doc, schema::registered_reply(decl.handler));
        let reply = message(decl.handler, "reply", reply.as_ref(), decl.codec);
        let reply_ref = add_message(doc, &reply_channel, &format!("{handler_id}.reply"), reply);

        let service = decl.service;
        let mut tag = json!({ "name": format!("service:{}", service.name) });
        tag["description"] = json!(match service.description {
            Some(description) => format!("{} {}: {description}", service.name, service.version),
            None => format!("{} {}", service.name, service.version),
        });
        let operation = json!({
            "action": "receive",
            "channel": { "$ref": format!("#/channels/{channel_id}") },
            "messages": [request_ref],
            "summary": format!(
                "endpoint `{}` of service `{}` {}, answered by `{}`",
                decl.name, service.name, service.version, decl.handler
            ),
            "bindings": queue_binding(decl.queue_group()),
            "reply": {
                "channel": { "$ref": format!("#/channels/{reply_channel}") },
                "messages": [reply_ref],
            },
            "tags": [tag],
            "x-nats-service": service_extension(decl),
        });
        let id = Document::unique(&doc.operations, handler_id);
        doc.operations.insert(id, operation);
    }
}

/// A `receive` operation per core subscription: in a queue group, or on every instance.
pub(super) fn subscriptions(doc: &mut Document, topology: &Topology) {
    for subscription in topology.subscriptions() {
        let decl: &SubscriptionDecl = &subscription.decl;
        let handler_id = identifier(decl.handler);
        let channel_id = doc.channel(Some(decl.subject), None, topology);
        let payload = schema_of(doc, schema::registered(decl.handler));
        let payload = message(decl.handler, "payload", payload.as_ref(), decl.codec);
        let message_ref = add_message(doc, &channel_id, &format!("{handler_id}.payload"), payload);
        let mut operation = json!({
            "action": "receive",
            "channel": { "$ref": format!("#/channels/{channel_id}") },
            "messages": [message_ref],
            "summary": format!("handled by `{}`", decl.handler),
        });
        let concurrency = decl.effective_concurrency();
        operation["x-nats-subscription"] = match decl.fanout {
            Fanout::Group(group) => {
                operation["bindings"] = queue_binding(group);
                json!({
                    "fanout": "queue",
                    "group": group,
                    "concurrency": concurrency,
                    "note": "a core subscription in a queue group: each message handled by one instance",
                })
            }
            Fanout::EachInstance => json!({
                "fanout": "each_instance",
                "concurrency": concurrency,
                "note": "a core subscription on every instance: every instance receives every message",
            }),
        };
        let id = Document::unique(&doc.operations, handler_id);
        doc.operations.insert(id, operation);
    }
}
