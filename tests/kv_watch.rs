//! `#[kv_watch]` against real servers: every instance handles every revision of the watched
//! keys, in order, starting with their current values, across the loss of its watch consumer;
//! a value that does not decode is counted (health and metrics) and passed over, never a stuck
//! watch; a value written by the official JavaScript client reaches the watch.
//!
//! Every test asserts which revisions each instance handled, never log lines.

mod fixture;
mod npm;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::kv;
use fixture::recorder::values;
use fixture::{Fixture, Running};
use metrics::{Key, Label};
use nats_topology::bucket::{Bytes, KvEntry, KvOperation};
use nats_topology::telemetry::names;
use nats_topology::{HandlerError, Relay, Runtime, State, kv_bucket, kv_watch};
use nats_topology_testkit::eventually;
use serde::{Deserialize, Serialize};

/// How long a test waits for revisions to be handled: far more than a re-creation takes, and
/// short enough that a skipped revision fails the test quickly.
const HANDLED_WITHIN: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Status {
    online: bool,
    seen: u64,
}

// Enough history that no revision written here is removed before a watch reads it: with
// `history = 1` a change superseded (same key) before the watch read it is gone from the
// server, the one skip a watch cannot prevent.
#[kv_bucket(name = "MEMBER_STATUS", value = Status, history = 64)]
struct MemberStatus;

#[kv_bucket(name = "RAW_FLAGS", history = 64)]
struct RawFlags;

/// A counter of the `on_status` watch (its series: the bucket's stream and the handler), summed
/// over the tests of this binary that ran so far.
fn on_status_counter(name: &'static str) -> u64 {
    let key = Key::from_parts(
        name,
        vec![
            Label::new("stream", "KV_MEMBER_STATUS"),
            Label::new("consumer", "kv_watch::on_status"),
        ],
    );
    values().counter(&key)
}

/// One change as a watch handler received it.
#[derive(Debug, Clone, PartialEq)]
struct Change {
    key: String,
    revision: u64,
    operation: KvOperation,
    value: Option<Status>,
}

/// One change of a raw flag: key, revision, operation, value.
type Flag = (String, u64, KvOperation, Option<Bytes>);

/// What one instance's watches handled, in the order they handled it.
#[derive(Default, Clone)]
struct Watched {
    status: Arc<Mutex<Vec<Change>>>,
    flags: Arc<Mutex<Vec<Flag>>>,
}

impl Watched {
    fn status(&self) -> Vec<Change> {
        self.status.lock().unwrap().clone()
    }
    fn handled_status(&self) -> usize {
        self.status.lock().unwrap().len()
    }
    fn last_status_revision(&self) -> u64 {
        self.status.lock().unwrap().last().map_or(0, |c| c.revision)
    }
}

#[kv_watch(bucket = MemberStatus, keys = "member.>")]
async fn on_status(entry: KvEntry<Status>, watched: State<Watched>) -> Result<(), HandlerError> {
    watched.status.lock().unwrap().push(Change {
        key: entry.key,
        revision: entry.revision,
        operation: entry.operation,
        value: entry.value,
    });
    Ok(())
}

#[kv_watch(bucket = RawFlags, from = "now")]
async fn on_flag(entry: KvEntry<Bytes>, watched: State<Watched>) -> Result<(), HandlerError> {
    watched
        .flags
        .lock()
        .unwrap()
        .push((entry.key, entry.revision, entry.operation, entry.value));
    Ok(())
}

/// A runtime of every watch above, recording into `watched`.
async fn instance<B: fixture::Broker>(fx: &Fixture<B>, watched: &Watched) -> Runtime {
    fixture::fast(fx.builder().await)
        .state(watched.clone())
        .build()
        .expect("every state given")
}

/// Starts `runtime` and waits until its watch of `handler` runs.
async fn run_watching(runtime: Runtime, handler: &str) -> (Running, Relay) {
    let relay = runtime.relay(handler).expect("one watch by that name");
    let running = Running::spawn(runtime);
    tokio::time::timeout(HANDLED_WITHIN, relay.ensure())
        .await
        .expect("the watch runs")
        .expect("the runtime runs");
    (running, relay)
}

/// Waits until `watched` has handled the revision `last` of the status bucket.
async fn handles_up_to(watched: &Watched, last: u64, who: &str) {
    eventually(HANDLED_WITHIN, who, || {
        let at = watched.last_status_revision();
        async move { (at >= last).then_some(()) }
    })
    .await;
}

/// Fails naming the first difference between what an instance handled and what it should
/// have: the same changes, in the same (revision) order, none skipped, none twice.
fn assert_same_changes(handled: &[Change], expected: &[Change], who: &str) {
    let revisions: Vec<u64> = handled.iter().map(|c| c.revision).collect();
    assert!(
        revisions.windows(2).all(|w| w[0] < w[1]),
        "{who}: revisions not handled in strictly increasing order: {:?}",
        revisions
            .windows(2)
            .filter(|w| w[0] >= w[1])
            .collect::<Vec<_>>()
    );
    let handled_set: BTreeMap<u64, &Change> = handled.iter().map(|c| (c.revision, c)).collect();
    let skipped: Vec<u64> = expected
        .iter()
        .map(|c| c.revision)
        .filter(|r| !handled_set.contains_key(r))
        .collect();
    assert!(
        skipped.is_empty(),
        "{who}: {} revisions skipped: {skipped:?}",
        skipped.len()
    );
    assert_eq!(
        handled.len(),
        expected.len(),
        "{who}: revisions handled that were not expected"
    );
    for (got, want) in handled.iter().zip(expected) {
        assert_eq!(got, want, "{who}: revision {} differs", want.revision);
    }
}

/// The writer (a plain async-nats client, as a third party) puts `count` statuses over 20
/// keys, deleting a key every 50th change and purging one every 125th, at a steady pace;
/// returns every change it made, with the revision the server gave it.
async fn write(store: kv::Store, first: u64, count: u64) -> Vec<Change> {
    let mut made = Vec::new();
    for i in first..first + count {
        let key = format!("member.{}", i % 20);
        let (revision, operation, value) = if i % 125 == 124 {
            store.purge(&key).await.expect("purge");
            (last_revision(&store).await, KvOperation::Purge, None)
        } else if i % 50 == 49 {
            store.delete(&key).await.expect("delete");
            (last_revision(&store).await, KvOperation::Delete, None)
        } else {
            let value = Status {
                online: i % 2 == 0,
                seen: i,
            };
            let json = serde_json::to_vec(&value).unwrap();
            let revision = store.put(&key, json.into()).await.expect("put");
            (revision, KvOperation::Put, Some(value))
        };
        made.push(Change {
            key,
            revision,
            operation,
            value,
        });
        // The pace of the writes is the scenario (the watches lose their consumers while it
        // runs), not synchronisation.
        tokio::time::sleep(Duration::from_millis(4)).await;
    }
    made
}

/// The bucket stream's last sequence: the revision of the delete or purge just made (the
/// client does not return it).
async fn last_revision(store: &kv::Store) -> u64 {
    let mut stream = store.stream.clone();
    stream
        .info()
        .await
        .expect("stream info")
        .state
        .last_sequence
}

/// Two instances watch `member.>`; a bucket holding earlier values is watched from its current
/// values, then a third client writes 500 changes (puts, deletes, purges) while each
/// instance's watch consumer is deleted on the server in turn: each instance handles the
/// current value of every key, then every revision, in revision order, none skipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_watchers_handle_every_revision_in_order_across_a_lost_consumer() {
    let fx = Fixture::start().await;
    let js = fx.jetstream().await;

    // The bucket with history before anyone watches: two revisions of five keys.
    let first = Watched::default();
    let runtime = instance(&fx, &first).await;
    runtime
        .provision()
        .await
        .expect("the buckets are provisioned");
    let store = js.get_key_value("MEMBER_STATUS").await.expect("the bucket");
    let mut earlier = write(store.clone(), 1000, 5).await;
    earlier.extend(write(store.clone(), 1000, 5).await);
    let mut current: BTreeMap<String, Change> = BTreeMap::new();
    for change in earlier {
        current.insert(change.key.clone(), change);
    }
    let mut expected: Vec<Change> = current.into_values().collect();
    expected.sort_by_key(|c| c.revision);
    assert_eq!(
        expected.len(),
        5,
        "five keys written twice before the watches"
    );

    let second = Watched::default();
    let (running_a, relay_a) = run_watching(runtime, "on_status").await;
    let (running_b, relay_b) = run_watching(instance(&fx, &second).await, "on_status").await;
    let last_earlier = expected.last().unwrap().revision;
    handles_up_to(
        &first,
        last_earlier,
        "instance A handles the current values",
    )
    .await;
    handles_up_to(
        &second,
        last_earlier,
        "instance B handles the current values",
    )
    .await;

    let writer = tokio::spawn(write(store.clone(), 0, 500));
    // Lose instance A's watch consumer a third of the way in, instance B's two thirds in.
    for (watched, relay, at) in [(&first, &relay_a, 170), (&second, &relay_b, 340)] {
        eventually(HANDLED_WITHIN, "changes under way", || {
            let n = watched.handled_status();
            async move { (n >= at).then_some(()) }
        })
        .await;
        fixture::delete_consumer(&js, "KV_MEMBER_STATUS", &relay.consumer()).await;
    }
    let made = writer.await.expect("the writer finishes");
    assert_eq!(made.len(), 500);
    expected.extend(made);
    let last = expected.last().unwrap().revision;

    for (watched, who) in [(&first, "instance A"), (&second, "instance B")] {
        handles_up_to(watched, last, who).await;
        assert_same_changes(&watched.status(), &expected, who);
        eprintln!(
            "{who}: {} changes handled in order",
            watched.handled_status()
        );
    }
    for running in [&running_a, &running_b] {
        let status = running
            .health
            .consumers()
            .into_iter()
            .find(|c| c.handler.ends_with("::on_status"))
            .expect("the watch's health");
        assert!(
            status.restarts >= 1,
            "the watch was re-created after its consumer was deleted: {status}"
        );
        assert_eq!(status.handled, expected.len() as u64, "{status}");
    }
    for running in [running_a, running_b] {
        running.stop().await.expect("clean drain");
    }
}

/// A value that does not decode as the bucket's `value` type (written by a client that wrote
/// another shape) is counted in the watch's health as failed and dead-lettered, and passed
/// over at once: the revisions after it are handled, and it is never retried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_value_that_does_not_decode_is_reported_and_passed_over() {
    values();
    let fx = Fixture::start().await;
    let js = fx.jetstream().await;
    let watched = Watched::default();
    let runtime = instance(&fx, &watched).await;
    // The typed handle the macro generates reaches the same relay as the lookup by name.
    let typed = on_status::relay(&runtime);
    let (running, relay) = run_watching(runtime, "on_status").await;
    assert_eq!(typed.consumer(), relay.consumer());
    assert!(typed.is_running());
    let store = js.get_key_value("MEMBER_STATUS").await.expect("the bucket");

    let good = |seen| Status { online: true, seen };
    let json = |status: &Status| serde_json::to_vec(status).unwrap().into();
    let first = store.put("member.a", json(&good(1))).await.unwrap();
    let poison = store.put("member.b", "not a status".into()).await.unwrap();
    let wrong_shape = store
        .put("member.a", r#"{"online": "yes"}"#.into())
        .await
        .unwrap();
    let last = store.put("member.b", json(&good(2))).await.unwrap();

    handles_up_to(
        &watched,
        last,
        "the revisions after the bad values are handled",
    )
    .await;
    let handled: Vec<(u64, Option<Status>)> = watched
        .status()
        .into_iter()
        .map(|c| (c.revision, c.value))
        .collect();
    assert_eq!(
        handled,
        [(first, Some(good(1))), (last, Some(good(2)))],
        "revisions {poison} and {wrong_shape} do not decode as a Status: passed over"
    );
    let watch_status = || {
        running
            .health
            .consumers()
            .into_iter()
            .find(|c| c.handler.ends_with("::on_status"))
            .expect("the watch's health")
    };
    let counted = nats_topology_testkit::within(HANDLED_WITHIN, || {
        let status = watch_status();
        async move { (status.dead_lettered == 2).then_some(status) }
    })
    .await;
    let status =
        counted.unwrap_or_else(|| panic!("the bad values not counted: {}", watch_status()));
    assert_eq!(
        (status.handled, status.failed, status.retried),
        (2, 2, 0),
        "each bad value failed once, never retried: {status}"
    );
    // The only bad values of this binary's tests: the watch's metrics count exactly them.
    assert_eq!(
        (
            on_status_counter(names::DEAD_LETTERED),
            on_status_counter(names::FAILED),
            on_status_counter(names::RETRIED),
        ),
        (2, 2, 0),
        "the watch's metrics count the bad values"
    );
    running.stop().await.expect("clean drain");
}

/// A watch declared `from = "now"` of a bucket without a `value` type: the changes made
/// before it started are not handed to it, every change after is, as raw bytes, deletes and
/// purges as such.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_from_now_receives_only_later_changes_as_raw_bytes() {
    let fx = Fixture::start().await;
    let js = fx.jetstream().await;
    let watched = Watched::default();
    let runtime = instance(&fx, &watched).await;
    runtime
        .provision()
        .await
        .expect("the buckets are provisioned");
    let store = js.get_key_value("RAW_FLAGS").await.expect("the bucket");
    store.put("beta", "on".into()).await.unwrap();
    let (running, _relay) = run_watching(runtime, "on_flag").await;

    let put = store.put("beta", "off".into()).await.unwrap();
    store.delete("beta").await.unwrap();
    store.purge("gamma").await.unwrap();
    let purged = last_revision(&store).await;
    let flags = eventually(HANDLED_WITHIN, "the later changes handled", || {
        let flags = watched.flags.lock().unwrap().clone();
        async move { (flags.len() >= 3).then_some(flags) }
    })
    .await;
    assert_eq!(
        flags,
        [
            (
                "beta".to_owned(),
                put,
                KvOperation::Put,
                Some(Bytes::from("off"))
            ),
            ("beta".to_owned(), put + 1, KvOperation::Delete, None),
            ("gamma".to_owned(), purged, KvOperation::Purge, None),
        ]
    );
    running.stop().await.expect("clean drain");
}

/// Interop: a value put, then deleted, by the official JavaScript client (`@nats-io/kv`, pinned
/// in `tests/js/package.json`) reaches the watch as a put of the declared type, then a delete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_value_written_by_the_official_javascript_client_reaches_the_watch() {
    let fx = Fixture::start().await;
    let watched = Watched::default();
    let (running, _relay) = run_watching(instance(&fx, &watched).await, "on_status").await;

    let url = fx.server.url();
    let (ok, stdout) = tokio::task::spawn_blocking(move || {
        npm::node(
            "kv_put.mjs",
            &[
                &url,
                "MEMBER_STATUS",
                "member.js",
                r#"{"online":true,"seen":7}"#,
            ],
        )
    })
    .await
    .expect("node runs");
    assert!(ok, "the JavaScript client writes to the bucket: {stdout}");
    let reported: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON line");
    let put = reported["put"].as_u64().expect("the revision of the put");

    eventually(HANDLED_WITHIN, "the put and the delete handled", || {
        let n = watched.handled_status();
        async move { (n >= 2).then_some(()) }
    })
    .await;
    assert_eq!(
        watched.status(),
        [
            Change {
                key: "member.js".to_owned(),
                revision: put,
                operation: KvOperation::Put,
                value: Some(Status {
                    online: true,
                    seen: 7
                }),
            },
            Change {
                key: "member.js".to_owned(),
                revision: put + 1,
                operation: KvOperation::Delete,
                value: None,
            },
        ],
        "what the JavaScript client reported: {reported}"
    );
    running.stop().await.expect("clean drain");
}
