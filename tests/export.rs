//! Export: the AsyncAPI document passes the official parser (`@asyncapi/parser`, under node)
//! with zero errors, and the exported stream and consumer JSON, added as is through the
//! official JavaScript client's JetStream manager, gives a server exactly the configurations
//! the runtime provisions.
//!
//! Node and the pinned npm packages (`tests/js/package.json`) are required: `.ci/run`
//! installs them into `target/npm`. A test fails, never skips, when they are missing.

mod npm;

use std::path::PathBuf;

use nats_topology::export::{self, ApiInfo, PayloadSchema};
use nats_topology::model::{EndpointDecl, ServiceDecl, SubscriptionDecl};
use nats_topology::{
    Context, HandlerError, Runtime, ServiceError, Topology, broadcast, queue_consumer, stream,
};
use nats_topology_testkit::NatsServer;
use serde::Deserialize;
use serde_json::Value;

// -------------------------------------------------------------------------------------------
// The topology under export: every key that changes a configuration.
// -------------------------------------------------------------------------------------------

#[stream(
    name = "EXPORT_ORDERS",
    subjects = ["export.orders.>", "export.audit.*"],
    storage = "memory",
    retention = "interest",
    max_age = "7d",
    max_msgs = 1_000_000,
    max_bytes = 1073741824,
    max_msg_size = 1048576,
    discard = "new",
    duplicate_window = "1h30m",
    description = "orders, as the export test declares them"
)]
struct Orders;

#[stream(name = "EXPORT_JOBS", subjects = ["export.jobs.>"], retention = "workqueue", replicas = 1)]
struct Jobs;

/// A mirror of part of the orders (no subjects of its own), read whole by a queue consumer.
#[stream(name = "EXPORT_ORDERS_COPY", mirror = { stream = Orders, filter = "export.orders.placed" })]
struct OrdersCopy;

/// The orders again, their subjects rewritten on the way in.
#[stream(name = "EXPORT_LEDGER", sources = [{ stream = Orders, transform = "export.ledger.>" }])]
struct Ledger;

/// Owned by someone else: never exported as NATS JSON, present in the AsyncAPI document.
#[stream(name = "EXPORT_MAIL", subjects = ["export.mail.>"], external)]
struct Mail;

#[derive(Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[allow(dead_code)]
struct OrderPlaced {
    id: u64,
    lines: Vec<OrderLine>,
}

#[derive(Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[allow(dead_code)]
struct OrderLine {
    sku: String,
    quantity: u32,
}

#[queue_consumer(
    stream = Orders,
    group = "export-billing",
    subjects = ["export.orders.placed", "export.orders.amended"],
    delivery = "push",
    max_deliver = 5,
    ack_wait = "30s",
    backoff = ["1s", "10s"],
    max_ack_pending = 100,
    dead_letter = "export.dead.billing",
    description = "bills placed orders"
)]
async fn bill_order(order: OrderPlaced, cx: Context) -> Result<(), HandlerError> {
    let _ = (order.id, cx.subject());
    Ok(())
}

#[queue_consumer(stream = Jobs, group = "export-worker", subject = "export.jobs.run", max_deliver = 3, concurrency = 4)]
async fn run_job(job: String) -> Result<(), HandlerError> {
    let _ = job;
    Ok(())
}

#[queue_consumer(stream = Mail, group = "export-mailer", subject = "export.mail.send")]
async fn send_mail(raw: Vec<u8>) -> Result<(), HandlerError> {
    let _ = raw;
    Ok(())
}

#[queue_consumer(stream = OrdersCopy, group = "export-copy")]
async fn audit_copy(raw: Vec<u8>) -> Result<(), HandlerError> {
    let _ = raw;
    Ok(())
}

#[broadcast(stream = Orders, subject = "export.orders.status")]
async fn relay_status(status: String) -> Result<(), HandlerError> {
    let _ = status;
    Ok(())
}

// An endpoint and core subscriptions, added by hand to what the macros registered, with the
// endpoint's request and reply schemas registered as `#[endpoint]` registers them.

static MEMBERS: ServiceDecl = ServiceDecl::new("export-members", "2.1.0")
    .description("member lookups, as the export test declares them");

#[derive(Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[allow(dead_code)]
struct MemberQuery {
    member: u64,
}

#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[allow(dead_code)]
struct MemberCard {
    name: String,
    active: bool,
}

fn query_schema() -> Option<PayloadSchema> {
    #[cfg(feature = "schemars")]
    return Some(export::schema_of::<MemberQuery>());
    #[cfg(not(feature = "schemars"))]
    None
}

fn card_schema() -> Option<PayloadSchema> {
    #[cfg(feature = "schemars")]
    return Some(export::schema_of::<MemberCard>());
    #[cfg(not(feature = "schemars"))]
    None
}

nats_topology::__private::inventory::submit! {
    nats_topology::__private::PayloadSchemaRegistration { handler: "export::get_member", schema: query_schema, protobuf_name: || None }
}
nats_topology::__private::inventory::submit! {
    nats_topology::__private::ReplySchemaRegistration { handler: "export::get_member", schema: card_schema, protobuf_name: || None }
}

fn with_services(topology: Topology) -> Topology {
    topology
        .endpoint(
            EndpointDecl::new("export::get_member", &MEMBERS, "get", "export.members.get")
                .group("export-lookups")
                .concurrency(3),
            |request| Box::pin(async move { Ok::<_, ServiceError>(request.payload().clone()) }),
        )
        .subscription(
            SubscriptionDecl::each_instance("export::invalidate", "export.cache.invalidate"),
            |_| Box::pin(async { Ok::<(), HandlerError>(()) }),
        )
        .subscription(
            SubscriptionDecl::group("export::audit_member", "export.members.audit", "auditors"),
            |_| Box::pin(async { Ok::<(), HandlerError>(()) }),
        )
}

// -------------------------------------------------------------------------------------------
// Helpers
// -------------------------------------------------------------------------------------------

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("nt-export-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn lines(stdout: &str) -> Vec<Value> {
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

// -------------------------------------------------------------------------------------------
// AsyncAPI
// -------------------------------------------------------------------------------------------

#[test]
fn export_asyncapi_is_valid_for_the_official_parser() {
    let topology = with_services(Topology::from_registry());
    let doc = export::asyncapi(&topology, &ApiInfo::new("export-test", "1.2.3"));
    let dir = temp_dir("asyncapi");
    let files = doc.write_to(&dir).expect("the document is written");
    let files: Vec<&str> = files.iter().map(|p| p.to_str().unwrap()).collect();
    assert!(files[0].ends_with("asyncapi.json") && files[1].ends_with("asyncapi.yaml"));

    let (ok, stdout) = npm::node("validate_asyncapi.mjs", &files);
    let results = lines(&stdout);
    assert_eq!(results.len(), 2, "one result per file: {stdout}");
    let value = doc.as_value();
    let channels = value["channels"].as_object().unwrap();
    let operations = value["operations"].as_object().unwrap();
    for result in &results {
        assert_eq!(result["errors"], Value::Array(vec![]), "{result}");
        assert_eq!(result["parsed"], true, "{result}");
        assert_eq!(result["version"], "3.0.0", "{result}");
        // What the parser read is what was written, in both forms.
        assert_eq!(result["channels"], channels.len(), "{result}");
        assert_eq!(result["operations"], operations.len(), "{result}");
    }
    assert!(ok, "the parser reported errors: {stdout}");

    // A channel per declared subject: stream subjects, filters, the dead-letter subject,
    // served subjects; and the endpoint's reply channel, whose address is dynamic (null).
    let mut addresses: Vec<&str> = channels
        .values()
        .map(|c| c["address"].as_str().unwrap_or("(null)"))
        .collect();
    addresses.sort();
    assert_eq!(
        addresses,
        [
            "(null)",
            "(null)",
            "export.audit.*",
            "export.cache.invalidate",
            "export.dead.billing",
            "export.jobs.>",
            "export.jobs.run",
            "export.mail.>",
            "export.mail.send",
            "export.members.audit",
            "export.members.get",
            "export.orders.>",
            "export.orders.amended",
            "export.orders.placed",
            "export.orders.status",
        ]
    );
    // A receive operation per handler and subject; queue consumers carry their group.
    let mut queues: Vec<(String, Option<String>)> = operations
        .iter()
        .map(|(id, op)| {
            assert_eq!(op["action"], "receive");
            let queue = op["bindings"]["nats"]["queue"].as_str().map(str::to_owned);
            (id.clone(), queue)
        })
        .collect();
    queues.sort();
    let group = |g: &str| Some(g.to_owned());
    assert_eq!(
        queues,
        [
            ("export.audit_copy".to_owned(), group("export-copy")),
            ("export.audit_member".to_owned(), group("auditors")),
            ("export.bill_order.1".to_owned(), group("export-billing")),
            ("export.bill_order.2".to_owned(), group("export-billing")),
            ("export.get_member".to_owned(), group("export-lookups")),
            ("export.invalidate".to_owned(), None),
            ("export.relay_status".to_owned(), None),
            ("export.run_job".to_owned(), group("export-worker")),
            ("export.send_mail".to_owned(), group("export-mailer")),
        ]
    );
    // The parser saw the same bindings.
    let mut parsed_queues: Vec<Value> = results[0]["queues"].as_array().unwrap().clone();
    parsed_queues.sort_by_key(|q| q.to_string());
    assert_eq!(parsed_queues.iter().filter(|q| q.is_string()).count(), 7);
    // The parser read the endpoint's reply and the service.
    let get = &results[0]["endpoint"];
    assert_eq!(get["id"], "export.get_member", "{}", results[0]);
    assert_eq!(get["reply_channel_address"], Value::Null);
    assert_eq!(get["reply_messages"], 1);
    assert_eq!(get["tags"], serde_json::json!(["service:export-members"]));

    // The endpoint: its service, its queue group, its request and reply.
    let operation = &operations["export.get_member"];
    assert_eq!(
        operation["x-nats-service"],
        serde_json::json!({
            "name": "export-members",
            "version": "2.1.0",
            "description": "member lookups, as the export test declares them",
            "endpoint": "get",
            "queue_group": "export-lookups",
            "concurrency": 3,
        })
    );
    assert_eq!(
        operation["reply"]["channel"]["$ref"],
        "#/channels/export.get_member.reply"
    );
    let request = &channels["export.members.get"]["messages"]["export.get_member.request"];
    let reply = &channels["export.get_member.reply"]["messages"]["export.get_member.reply"];
    assert_eq!(reply["title"], "reply of `export::get_member`");
    if cfg!(feature = "schemars") {
        assert_eq!(
            request["payload"]["$ref"],
            "#/components/schemas/MemberQuery"
        );
        assert_eq!(reply["payload"]["$ref"], "#/components/schemas/MemberCard");
        assert_eq!(
            value["components"]["schemas"]["MemberCard"]["properties"]["active"]["type"],
            "boolean"
        );
    } else {
        assert!(reply["payload"].get("$ref").is_none());
    }
    // The core subscriptions: one on every instance, one in a queue group.
    assert_eq!(
        operations["export.invalidate"]["x-nats-subscription"]["fanout"],
        "each_instance"
    );
    assert!(operations["export.invalidate"].get("bindings").is_none());
    assert_eq!(
        operations["export.audit_member"]["x-nats-subscription"]["group"],
        "auditors"
    );

    // The stream is an extension of its channels, with its configuration when owned.
    let placed = channels
        .values()
        .find(|c| c["address"] == "export.orders.placed")
        .unwrap();
    assert_eq!(placed["x-nats-stream"]["name"], "EXPORT_ORDERS");
    assert_eq!(placed["x-nats-stream"]["config"]["retention"], "interest");
    let mail = channels
        .values()
        .find(|c| c["address"] == "export.mail.send")
        .unwrap();
    assert_eq!(mail["x-nats-stream"]["owned"], false);
    assert!(mail["x-nats-stream"].get("config").is_none());

    // A handler reading a whole mirror: a channel for the mirror, which names its origin.
    let copy = operations["export.audit_copy"]["channel"]["$ref"]
        .as_str()
        .unwrap()
        .trim_start_matches("#/channels/");
    assert_eq!(channels[copy]["x-nats-stream"]["mirror"], "EXPORT_ORDERS");
    assert_eq!(
        channels[copy]["x-nats-stream"]["config"]["mirror"]["filter_subject"],
        "export.orders.placed"
    );

    // Payload schemas: from schemars when the feature is on, else open.
    let payload = &placed["messages"]["export.bill_order.payload"]["payload"];
    if cfg!(feature = "schemars") {
        assert_eq!(payload["$ref"], "#/components/schemas/OrderPlaced");
        let schemas = &value["components"]["schemas"];
        assert_eq!(
            schemas["OrderPlaced"]["properties"]["lines"]["type"],
            "array"
        );
        assert_eq!(
            schemas["OrderPlaced"]["properties"]["lines"]["items"]["$ref"],
            "#/components/schemas/OrderLine"
        );
        assert_eq!(
            schemas["OrderLine"]["properties"]["quantity"]["type"],
            "integer"
        );
    } else {
        assert!(payload.get("$ref").is_none() && payload.get("type").is_none());
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The validator is not vacuous: a document whose operation names a channel that does not
/// exist is reported with an error, and the test would see it.
#[test]
fn export_asyncapi_validator_reports_a_broken_document() {
    let topology = Topology::from_registry();
    let doc = export::asyncapi(&topology, &ApiInfo::new("export-test", "1.2.3"));
    let mut broken = doc.as_value().clone();
    let operation = broken["operations"]
        .as_object_mut()
        .unwrap()
        .values_mut()
        .next()
        .unwrap();
    operation["channel"]["$ref"] = "#/channels/no-such-channel".into();
    let dir = temp_dir("broken");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("broken.json");
    std::fs::write(&file, serde_json::to_string(&broken).unwrap()).unwrap();
    let (ok, stdout) = npm::node("validate_asyncapi.mjs", &[file.to_str().unwrap()]);
    assert!(!ok, "a broken document must fail validation: {stdout}");
    let result = &lines(&stdout)[0];
    assert!(
        !result["errors"].as_array().unwrap().is_empty() || result["parsed"] == false,
        "{result}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

// -------------------------------------------------------------------------------------------
// NATS JSON
// -------------------------------------------------------------------------------------------

/// Fields the server fills in itself that may differ between two servers given the same
/// configuration. (None so far: the comparison is of the whole `config`.)
const SERVER_FILLED: &[&str] = &[];

async fn raw_info(client: &async_nats::Client, subject: String) -> Value {
    let answer = client
        .request(format!("$JS.API.{subject}"), "".into())
        .await
        .unwrap_or_else(|e| panic!("{subject}: {e}"));
    let value: Value = serde_json::from_slice(&answer.payload).unwrap();
    assert!(value.get("error").is_none(), "{subject}: {value}");
    let mut config = value["config"].clone();
    for field in SERVER_FILLED {
        config.as_object_mut().unwrap().remove(*field);
    }
    config
}

/// The external stream, as its owner would have created it (on both servers).
async fn create_external(client: &async_nats::Client) {
    let js = async_nats::jetstream::new(client.clone());
    js.create_stream(async_nats::jetstream::stream::Config {
        name: "EXPORT_MAIL".into(),
        subjects: vec!["export.mail.>".into()],
        ..Default::default()
    })
    .await
    .expect("the external stream is created");
}

#[tokio::test]
async fn export_nats_json_added_by_the_js_manager_equals_what_the_runtime_provisions() {
    let topology = Topology::from_registry();
    let nats = export::nats_json(&topology);
    let dir = temp_dir("nats-json");
    let files = nats.write_to(&dir).expect("the files are written");
    let mut names: Vec<String> = files
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    names.sort();
    // Owned streams and queue consumers only: no external stream, no relay.
    assert_eq!(
        names,
        [
            "EXPORT_JOBS.export-worker.consumer.json",
            "EXPORT_JOBS.stream.json",
            "EXPORT_LEDGER.stream.json",
            "EXPORT_MAIL.export-mailer.consumer.json",
            "EXPORT_ORDERS.export-billing.consumer.json",
            "EXPORT_ORDERS.stream.json",
            "EXPORT_ORDERS_COPY.export-copy.consumer.json",
            "EXPORT_ORDERS_COPY.stream.json",
        ]
    );

    // One server provisioned by the runtime...
    let by_runtime = NatsServer::start().await.expect("nats-server starts");
    let runtime_client = async_nats::connect(by_runtime.url()).await.unwrap();
    create_external(&runtime_client).await;
    let runtime = Runtime::builder(runtime_client.clone())
        .build()
        .expect("the topology is valid");
    runtime.provision().await.expect("the runtime provisions");

    // ...the other by the JavaScript client's manager, from the files as they are.
    let by_files = NatsServer::start().await.expect("nats-server starts");
    let files_client = async_nats::connect(by_files.url()).await.unwrap();
    create_external(&files_client).await;
    let (ok, stdout) = npm::node(
        "add_with_jsm.mjs",
        &[&by_files.url(), dir.to_str().unwrap()],
    );
    assert!(ok, "the JS manager refused an exported file: {stdout}");
    assert_eq!(lines(&stdout).len(), files.len(), "{stdout}");

    for s in &nats.streams {
        let name = &s.config.name;
        let provisioned = raw_info(&runtime_client, format!("STREAM.INFO.{name}")).await;
        let added = raw_info(&files_client, format!("STREAM.INFO.{name}")).await;
        assert_eq!(
            provisioned, added,
            "stream {name}: runtime vs exported file"
        );
        if name == "EXPORT_LEDGER" {
            let transform = &added["sources"][0]["subject_transforms"][0];
            assert_eq!(transform["dest"], "export.ledger.>", "{added}");
        }
        if name == "EXPORT_ORDERS" {
            assert_eq!(added["storage"], "memory", "{added}");
            assert_eq!(added["retention"], "interest", "{added}");
            assert_eq!(added["discard"], "new", "{added}");
            assert_eq!(added["max_msgs"], 1_000_000, "{added}");
        }
    }
    for c in &nats.consumers {
        let (stream, name) = (&c.stream, c.name());
        let subject = format!("CONSUMER.INFO.{stream}.{name}");
        let provisioned = raw_info(&runtime_client, subject.clone()).await;
        let added = raw_info(&files_client, subject).await;
        assert_eq!(
            provisioned, added,
            "consumer {stream}/{name}: runtime vs exported file"
        );
        if name == "export-billing" {
            // What was compared is the declaration as the server holds it.
            assert_eq!(added["deliver_group"], "export-billing", "{added}");
            assert_eq!(added["max_deliver"], 5, "{added}");
            assert_eq!(added["max_ack_pending"], 100, "{added}");
            assert_eq!(added["ack_wait"], 30_000_000_000u64, "{added}");
            assert_eq!(
                added["filter_subjects"].as_array().unwrap().len(),
                2,
                "{added}"
            );
            assert!(
                added.get("backoff").is_none(),
                "backoff is the runtime's: {added}"
            );
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The neighbour fault: a file edited by hand so that it no longer matches is refused or
/// differs, and the comparison above would see it (the JS manager does not silently fix it).
#[tokio::test]
async fn export_nats_json_edited_by_hand_differs_from_what_the_runtime_provisions() {
    let topology = Topology::from_registry();
    let nats = export::nats_json(&topology);
    let dir = temp_dir("nats-json-edited");
    nats.write_to(&dir).unwrap();
    let file = dir.join("EXPORT_JOBS.export-worker.consumer.json");
    let mut config: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    config["max_deliver"] = 7.into();
    std::fs::write(&file, config.to_string()).unwrap();

    let server = NatsServer::start().await.expect("nats-server starts");
    let client = async_nats::connect(server.url()).await.unwrap();
    create_external(&client).await;
    let (ok, stdout) = npm::node("add_with_jsm.mjs", &[&server.url(), dir.to_str().unwrap()]);
    assert!(ok, "{stdout}");
    let added = raw_info(&client, "CONSUMER.INFO.EXPORT_JOBS.export-worker".into()).await;
    assert_eq!(added["max_deliver"], 7);
    let exported = serde_json::to_value(
        &nats
            .consumers
            .iter()
            .find(|c| c.name() == "export-worker")
            .unwrap()
            .config,
    )
    .unwrap();
    assert_eq!(exported["max_deliver"], 3);
    std::fs::remove_dir_all(&dir).unwrap();
}
