//! Payload codecs beyond JSON, against another language's libraries: node publishes an order in
//! MessagePack (`@msgpack/msgpack`), CBOR (`cbor2`) and protobuf (`protobufjs`, from
//! `tests/js/order.proto`), each once with its `Content-Type` and once without, through the
//! official JavaScript client; typed handlers declared with `codec = ".."` receive each one,
//! and a handler's CBOR output (`Publish::encode`) carries its header. Node calls a MessagePack
//! endpoint and decodes the reply. A payload in the wrong codec is dead-lettered at its first
//! delivery with an error naming both content types, never redelivered.
//!
//! Python's own `protobuf` package builds an order from the same `.proto` too (grpcio-tools'
//! protoc, pinned in `tests/py/requirements.txt`).
//!
//! Node and npm, python3 and pip are required (`.ci/run` installs them); the test fails, never
//! skips, without them.

mod fixture;
mod npm;
mod py;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nats_topology::bucket::{KvEntry, KvErrorKind};
use nats_topology::codec::{Cbor, Decode, MsgPack};
use nats_topology::export::{self, ApiInfo};
use nats_topology::{
    Context, HandlerError, ServiceError, State, Topology, endpoint, kv_bucket, kv_watch,
    queue_consumer, service, stream,
};
use nats_topology_testkit::eventually;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

#[stream(name = "CODECS", subjects = ["codecs.>"])]
struct Codecs;

#[stream(name = "CODECS_DEAD", subjects = ["codecs_dead.>"])]
struct CodecsDead;

/// A stream whose messages are MessagePack: its handlers decode it unless they name a codec.
#[stream(name = "CODECS_PACKED", subjects = ["packed.>"], codec = "msgpack")]
struct Packed;

/// An order as serde sees it (MessagePack, CBOR).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Order {
    id: u64,
    item: String,
    tags: Vec<String>,
    cents: i64,
}

/// The same order as protobuf sees it: the fields of `tests/js/order.proto`.
#[derive(Clone, PartialEq, prost::Message)]
struct OrderProto {
    #[prost(uint64, tag = "1")]
    id: u64,
    #[prost(string, tag = "2")]
    item: String,
    #[prost(string, repeated, tag = "3")]
    tags: Vec<String>,
    #[prost(sint64, tag = "4")]
    cents: i64,
}

/// Its protobuf name, as `prost-build` states it with `enable_type_names`.
impl prost::Name for OrderProto {
    const NAME: &'static str = "Order";
    const PACKAGE: &'static str = "shop";
}

/// What each handler received: per handler, the orders in arrival order.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<BTreeMap<&'static str, Vec<Order>>>>);

impl Seen {
    fn record(&self, by: &'static str, order: Order) -> Result<(), HandlerError> {
        let mut seen = self.0.lock().unwrap();
        seen.entry(by).or_default().push(order);
        Ok(())
    }

    fn ids(&self, by: &str) -> Vec<u64> {
        let seen = self.0.lock().unwrap();
        let mut ids: Vec<u64> = seen.get(by).into_iter().flatten().map(|o| o.id).collect();
        ids.sort_unstable();
        ids
    }
}

#[queue_consumer(
    stream = Codecs,
    group = "msgpack",
    subject = "codecs.msgpack",
    codec = "msgpack",
    dead_letter = "codecs_dead.msgpack"
)]
async fn on_msgpack(order: Order, seen: State<Seen>) -> Result<(), HandlerError> {
    seen.record("msgpack", order)
}

#[queue_consumer(
    stream = Codecs,
    group = "cbor",
    subject = "codecs.cbor",
    codec = "cbor",
    dead_letter = "codecs_dead.cbor"
)]
async fn on_cbor(order: Order, seen: State<Seen>) -> Result<(), HandlerError> {
    seen.record("cbor", order)
}

/// Records the order, then passes it on in CBOR (`id + 100`), which `on_relayed` reads.
#[queue_consumer(
    stream = Codecs,
    group = "protobuf",
    subject = "codecs.protobuf",
    codec = "protobuf",
    dead_letter = "codecs_dead.protobuf",
    publishes = ["codecs.relayed"]
)]
async fn on_protobuf(
    order: OrderProto,
    cx: Context,
    seen: State<Seen>,
) -> Result<(), HandlerError> {
    let order = Order {
        id: order.id,
        item: order.item,
        tags: order.tags,
        cents: order.cents,
    };
    let relayed = Order {
        id: order.id + 100,
        ..order.clone()
    };
    seen.record("protobuf", order)?;
    cx.publisher("codecs.relayed")
        .encode(Cbor, &relayed)
        .await?;
    Ok(())
}

#[queue_consumer(stream = Codecs, group = "relayed", subject = "codecs.relayed", codec = "cbor")]
async fn on_relayed(order: Order, seen: State<Seen>) -> Result<(), HandlerError> {
    seen.record("relayed", order)
}

#[service(
    name = "codecs",
    version = "1.0.0",
    description = "prices in MessagePack"
)]
struct CodecsService;

#[derive(Deserialize)]
struct PriceQuery {
    item: String,
    qty: u64,
}

#[derive(Serialize)]
struct Price {
    item: String,
    qty: u64,
    total_cents: u64,
}

#[endpoint(service = CodecsService, subject = "shop.price", codec = "msgpack")]
async fn price(query: PriceQuery) -> Result<Price, ServiceError> {
    Ok(Price {
        total_cents: 250 * query.qty,
        item: query.item,
        qty: query.qty,
    })
}

#[queue_consumer(stream = Packed, group = "packed", subject = "packed.orders")]
async fn on_packed(order: Order, seen: State<Seen>) -> Result<(), HandlerError> {
    seen.record("packed", order)
}

/// Orders by key, in MessagePack: the handle writes and reads it, the watch reads it.
#[kv_bucket(name = "CODECS_ORDERS", value = Order, codec = "msgpack", history = 1)]
struct OrdersByKey;

#[kv_watch(bucket = OrdersByKey, keys = "o.>")]
async fn on_order_kept(entry: KvEntry<Order>, seen: State<Seen>) -> Result<(), HandlerError> {
    match entry.value {
        Some(order) => seen.record("kv", order),
        None => Ok(()),
    }
}

fn order(id: u64) -> Order {
    Order {
        id,
        item: "tea".into(),
        tags: vec!["green".into(), "loose".into()],
        cents: -250,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_languages_msgpack_cbor_and_protobuf_reach_typed_handlers_and_replies_decode_there()
{
    let fx = fixture::Fixture::start().await;
    let seen = Seen::default();
    let running =
        fixture::Running::start(fixture::fast(fx.builder().await).state(seen.clone())).await;

    let url = fx.server.url();
    let (ok, stdout) = tokio::task::spawn_blocking(move || npm::node("codecs_client.mjs", &[&url]))
        .await
        .unwrap();
    assert!(ok, "the node client failed: {stdout}");
    let printed: Value = serde_json::from_str(stdout.trim()).expect("one JSON line");
    assert_eq!(
        printed["reply"],
        json!({
            "content_type": "application/msgpack",
            "body": { "item": "tea", "qty": 3, "total_cents": 750 },
        }),
        "the endpoint's reply, decoded by node's MessagePack: {stdout}"
    );

    eventually(Duration::from_secs(20), "every order handled", || {
        let seen = seen.clone();
        async move {
            let all = [
                ("msgpack", vec![1, 11]),
                ("cbor", vec![2, 12]),
                ("protobuf", vec![3, 13]),
                ("relayed", vec![103, 113]),
            ];
            all.iter()
                .all(|(by, ids)| seen.ids(by) == *ids)
                .then_some(())
        }
    })
    .await;
    for (by, orders) in seen.0.lock().unwrap().iter() {
        for got in orders {
            assert_eq!(*got, order(got.id), "decoded by {by} as node wrote it");
        }
    }

    // The handler's output carries its codec's header, as stored.
    let js = fx.jetstream().await;
    let stream = js.get_stream("CODECS").await.unwrap();
    let relayed = stream
        .get_last_raw_message_by_subject("codecs.relayed")
        .await
        .unwrap();
    assert_eq!(
        relayed.headers.get("Content-Type").map(|v| v.as_str()),
        Some("application/cbor")
    );

    // A payload in another codec than the handler's: dead-lettered at once, naming both.
    let mut json_header = async_nats::HeaderMap::new();
    json_header.insert("Content-Type", "application/json");
    let mut msgpack_header = async_nats::HeaderMap::new();
    msgpack_header.insert("Content-Type", "application/msgpack");
    let wrong: [(&str, async_nats::HeaderMap, &[u8], &[&str]); 3] = [
        (
            "codecs.msgpack",
            json_header,
            br#"{"id":21,"item":"tea","tags":[],"cents":0}"#,
            &[
                "application/json",
                "application/msgpack",
                "codec = \"msgpack\"",
            ],
        ),
        (
            "codecs.cbor",
            msgpack_header,
            &[0x81, 0xa2, b'i', b'd', 22],
            &["application/msgpack", "application/cbor"],
        ),
        // No header: read as the handler's codec, which cannot.
        (
            "codecs.protobuf",
            async_nats::HeaderMap::new(),
            &[0xff, 0xff, 0xff],
            &["application/protobuf", "OrderProto"],
        ),
    ];
    for (subject, headers, payload, _) in &wrong {
        js.publish_with_headers(*subject, headers.clone(), payload.to_vec().into())
            .await
            .unwrap()
            .await
            .expect("stored");
    }
    let dead = js.get_stream("CODECS_DEAD").await.unwrap();
    eventually(Duration::from_secs(20), "three dead letters", || {
        let mut dead = dead.clone();
        async move { (dead.info().await.ok()?.state.messages == 3).then_some(()) }
    })
    .await;
    for (subject, _, payload, named) in &wrong {
        let dead_subject = subject.replace("codecs.", "codecs_dead.");
        let letter = dead
            .get_last_raw_message_by_subject(&dead_subject)
            .await
            .unwrap();
        assert_eq!(&letter.payload[..], *payload, "{subject}: the payload kept");
        let header = |name: &str| {
            letter
                .headers
                .get(name)
                .map(|v| v.as_str().to_owned())
                .unwrap_or_default()
        };
        assert_eq!(header("Nats-Topology-Delivered"), "1", "{subject}");
        let error = header("Nats-Topology-Error");
        assert!(
            error.starts_with("cannot decode the payload as"),
            "{subject}: {error}"
        );
        for name in *named {
            assert!(error.contains(name), "{subject}: {name} in {error}");
        }
    }
    for group in ["msgpack", "cbor", "protobuf", "relayed"] {
        fixture::settled(&js, "CODECS", group, Duration::from_secs(10)).await;
    }
    for status in running.health.consumers() {
        assert_eq!(
            status.retried, 0,
            "decode errors are never retried: {status}"
        );
    }
    running.stop().await.expect("clean drain");
}

/// A protobuf order built by Python's own `protobuf` package from `tests/js/order.proto`
/// (compiled by grpcio-tools' protoc) reaches the typed handler, with its `Content-Type` and
/// without.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pythons_protobuf_reaches_a_typed_handler() {
    let fx = fixture::Fixture::start().await;
    let seen = Seen::default();
    let running =
        fixture::Running::start(fixture::fast(fx.builder().await).state(seen.clone())).await;
    let js = fx.jetstream().await;
    let proto_dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/js");
    for (id, content_type) in [(5, Some("application/protobuf")), (15, None)] {
        let hex = tokio::task::spawn_blocking(move || {
            py::python("protobuf_order.py", &[proto_dir, &id.to_string()])
        })
        .await
        .unwrap();
        let bytes: Vec<u8> = (0..hex.trim().len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex.trim()[i..i + 2], 16).expect("hex"))
            .collect();
        let mut headers = async_nats::HeaderMap::new();
        if let Some(content_type) = content_type {
            headers.insert("Content-Type", content_type);
        }
        js.publish_with_headers("codecs.protobuf", headers, bytes.into())
            .await
            .unwrap()
            .await
            .expect("stored");
    }
    eventually(
        Duration::from_secs(20),
        "both Python orders handled",
        || {
            let seen = seen.clone();
            async move { (seen.ids("protobuf") == [5, 15]).then_some(()) }
        },
    )
    .await;
    for got in seen.0.lock().unwrap()["protobuf"].iter() {
        assert_eq!(*got, order(got.id), "decoded as Python wrote it");
    }
    running.stop().await.expect("clean drain");
}

/// A handler that names no codec reads its stream's (`#[stream(.., codec = "msgpack")]`),
/// with or without the `Content-Type` header.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streams_codec_is_the_codec_of_the_handlers_that_read_it() {
    let fx = fixture::Fixture::start().await;
    let seen = Seen::default();
    let running =
        fixture::Running::start(fixture::fast(fx.builder().await).state(seen.clone())).await;
    let js = fx.jetstream().await;
    let mut header = async_nats::HeaderMap::new();
    header.insert("Content-Type", "application/msgpack");
    for (id, headers) in [(41, header), (42, async_nats::HeaderMap::new())] {
        let payload = <MsgPack as nats_topology::codec::Encode<Order>>::encode(&order(id)).unwrap();
        js.publish_with_headers("packed.orders", headers, payload)
            .await
            .unwrap()
            .await
            .expect("stored");
    }
    eventually(
        Duration::from_secs(20),
        "both packed orders handled",
        || {
            let seen = seen.clone();
            async move { (seen.ids("packed") == [41, 42]).then_some(()) }
        },
    )
    .await;
    for got in seen.0.lock().unwrap()["packed"].iter() {
        assert_eq!(*got, order(got.id));
    }
    running.stop().await.expect("clean drain");
}

/// A bucket declared with `codec = "msgpack"` stores MessagePack (read back by the codec, not
/// JSON), its watch decodes it, and a value another writer stored as JSON is an error naming
/// the key and the codec, for the handle and for the watch, which passes over it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_buckets_values_are_written_and_watched_in_its_codec() {
    let fx = fixture::Fixture::start().await;
    let seen = Seen::default();
    let running =
        fixture::Running::start(fixture::fast(fx.builder().await).state(seen.clone())).await;
    let js = fx.jetstream().await;
    let orders = OrdersByKey::kv(&js);

    orders.put("o.31", &order(31)).await.expect("put");
    assert_eq!(orders.get("o.31").await.expect("get"), Some(order(31)));
    let store = js.get_key_value("CODECS_ORDERS").await.unwrap();
    let stored = store.get("o.31").await.unwrap().expect("stored");
    assert_eq!(
        <MsgPack as Decode<Order>>::decode(&stored).expect("MessagePack"),
        order(31)
    );
    assert!(
        serde_json::from_slice::<Value>(&stored).is_err(),
        "not JSON: {stored:?}"
    );

    // Another writer stores JSON: an error naming the key and the codec, not garbage.
    let json = serde_json::to_vec(&order(32)).unwrap();
    store.put("o.32", json.into()).await.unwrap();
    let error = orders
        .get("o.32")
        .await
        .expect_err("JSON is not MessagePack");
    assert_eq!(error.kind(), KvErrorKind::Decode);
    let message = error.to_string();
    for named in ["CODECS_ORDERS", "o.32", "application/msgpack"] {
        assert!(message.contains(named), "{named} in {message}");
    }
    orders.put("o.33", &order(33)).await.expect("put");

    eventually(Duration::from_secs(20), "the watch sees 31 and 33", || {
        let seen = seen.clone();
        async move { (seen.ids("kv") == [31, 33]).then_some(()) }
    })
    .await;
    for got in seen.0.lock().unwrap()["kv"].iter() {
        assert_eq!(
            *got,
            order(got.id),
            "decoded by the watch as the handle wrote it"
        );
    }
    running.stop().await.expect("clean drain");
}

/// The export states each message's content type: MessagePack, CBOR and protobuf consumers,
/// the MessagePack endpoint's request and reply; JSON is the document's default.
#[test]
fn the_asyncapi_export_states_each_messages_content_type() {
    let topology = Topology::from_registry();
    let doc = export::asyncapi(&topology, &ApiInfo::new("codecs", "1.0.0"));
    let value = doc.as_value();
    assert_eq!(value["defaultContentType"], "application/json");
    let mut types = BTreeMap::new();
    for channel in value["channels"].as_object().unwrap().values() {
        for message in channel["messages"].as_object().unwrap().values() {
            types.insert(
                message["name"].as_str().unwrap().to_owned(),
                message["contentType"].as_str().map(str::to_owned),
            );
        }
    }
    let expected = [
        ("on_msgpack", Some("application/msgpack")),
        ("on_cbor", Some("application/cbor")),
        ("on_protobuf", Some("application/protobuf")),
        ("on_relayed", Some("application/cbor")),
        ("on_packed", Some("application/msgpack")),
        ("price_request", Some("application/msgpack")),
        ("price_reply", Some("application/msgpack")),
    ];
    for (name, content_type) in expected {
        assert_eq!(
            types.get(name).cloned(),
            Some(content_type.map(str::to_owned)),
            "{name}: {types:?}"
        );
    }
    // The protobuf message's full name, from its `prost::Name`.
    let protobuf = value["components"]["messages"]
        .as_object()
        .into_iter()
        .flatten()
        .chain(
            value["channels"]
                .as_object()
                .unwrap()
                .values()
                .flat_map(|c| c["messages"].as_object().unwrap()),
        )
        .map(|(_, m)| m)
        .find(|m| m["name"] == "on_protobuf")
        .expect("the protobuf consumer's message");
    assert_eq!(protobuf["x-protobuf-message"], "shop.Order", "{protobuf}");

    // And the official parser reads the document (with its extensions) without a complaint.
    let dir = std::env::temp_dir().join(format!("codecs-asyncapi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("codecs.json");
    std::fs::write(&file, serde_json::to_string(value).unwrap()).unwrap();
    let (ok, stdout) = npm::node("validate_asyncapi.mjs", &[file.to_str().unwrap()]);
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(ok, "the official AsyncAPI parser refused it: {stdout}");
}
