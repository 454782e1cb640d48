//! Attribute macros of nats-topology: [`macro@stream`], [`macro@queue_consumer`] and
//! [`macro@broadcast`] for JetStream; [`macro@kv_bucket`], [`macro@kv_watch`] and
//! [`macro@object_store`] for key-value buckets and object stores; [`macro@service`], [`macro@endpoint`] and
//! [`macro@subscription`] for request/reply and the other core subscriptions.
//!
//! Use them through the facade crate, `nats_topology`, which re-exports them. (The examples
//! here cannot be compiled in this crate, which cannot depend on the facade; each one is
//! compiled and run by a case of this crate's UI suite, `tests/ui/pass`.)
//!
//! # What the macros guarantee
//!
//! - **There is no way to write a plain durable consumer.** A queue consumer without `group`,
//!   any `durable` or `deliver_group` key, a `group` or `durable` on a broadcast: each is a
//!   compile error that says why (a plain durable admits one subscriber: a second replica is
//!   refused or receives every message again) and what to write instead.
//! - **There is no plain core subscription for work either.** An endpoint is always in a
//!   queue group (its `group`, its service's `queue_group`, or `q`), and a `#[subscription]`
//!   says `group = ".."` or `each_instance`; keys that would leave the group out are compile
//!   errors that say why (on N replicas, N answers to one request, or each message handled N
//!   times) and what to write instead.
//! - **Every key is validated at expansion**, with the rules of `topology_core` (the same
//!   functions the runtime uses at start-up): names, subjects, durations, ranges, and the rules
//!   between keys. All the mistakes of one attribute are reported together, each at its token,
//!   and the item is kept, so that no "cannot find" error follows.
//! - **Cross-item checks at compile time** when a consumer names its stream by type
//!   (`stream = Orders`): an unknown type, a type that is not a `#[stream]`, a filter not covered
//!   by the stream's subjects, a broadcast on a work-queue stream, or dead letters published into
//!   the stream a consumer reads in full are compile errors, reported at the offending token.
//! - **Type errors in handlers point at the handler**: a payload that is not
//!   `DeserializeOwned`, a second argument that is not `Context`, a return type that is not
//!   `Result<(), E>` with `E: Into<HandlerError>`, a future that is not `Send` (one error, at the
//!   function's name).
//! - **Generated code is private and hygienic**: it names nothing but
//!   `::nats_topology::__private` (or the `crate = path` override) and `::core`, and it lives in
//!   `const _: () = { .. };`.
//!
//! # Values
//!
//! - Durations are string literals of whole numbers with the units `ms`, `s`, `m`, `h`, `d`,
//!   largest first, each at most once: `"500ms"`, `"30s"`, `"5m"`, `"2h"`, `"7d"`, `"1h30m"`.
//!   Zero is refused where it would mean nothing (`max_age`, `duplicate_window`, `ack_wait`,
//!   `backoff` steps).
//! - Subjects are dot-separated tokens; filters may use `*` (one token) and `>` (the rest, last
//!   only) as whole tokens.
//! - Integer limits must be at least 1 (omit a key for "no limit" or the server's default;
//!   `-1` is not accepted); `replicas` is 1 to 5.

mod args;
mod attrs;
mod ctxt;
mod emit;
mod enclosing;
mod expand;
mod item;
mod suggest;
mod validate;
mod value;

#[cfg(test)]
mod fuzz;

use proc_macro::TokenStream;

/// Declares a JetStream stream on a unit struct.
///
/// The struct names the stream in consumer attributes (`stream = Orders`), which lets the
/// compiler check those consumers against it. The stream is registered, and provisioned at
/// start-up: created if missing, updated if its editable settings changed.
///
/// ```
/// use nats_topology::stream;
///
/// #[stream(name = "DAEMON_SYNC", subjects = ["daemon.sync.>"], replicas = 3, max_age = "7d")]
/// pub struct DaemonSync;
///
/// // Owned by another service: never created or changed here, only verified.
/// #[stream(name = "EMAIL", subjects = ["email.>"], external, retention = "workqueue")]
/// pub struct Email;
///
/// // A copy of part of another stream, and an aggregate of two: no subjects of their own.
/// #[stream(name = "DAEMON_SYNC_DONE", mirror = { stream = DaemonSync, filter = "daemon.sync.complete" })]
/// pub struct DaemonSyncDone;
///
/// #[stream(name = "AUDIT", sources = [DaemonSync, { stream = "BILLING", transform = "audit.billing.>" }])]
/// pub struct Audit;
/// # fn main() {}
/// ```
///
/// # The stream's name: `NAME`
///
/// The attribute gives the struct an associated constant, `NAME: &'static str`, the `name` it
/// declares (as visible as the struct: `pub` on a `pub struct`). Use it wherever the stream's
/// name is spelt in code of your own (an `async_nats` JetStream call, a log line, a test)
/// instead of repeating the string:
///
/// ```
/// use nats_topology::stream;
///
/// #[stream(name = "MEMBER_STATUS", subjects = ["member.status.>"])]
/// pub struct MemberStatus;
///
/// async fn messages(client: nats_topology::async_nats::Client) -> Option<u64> {
///     let js = nats_topology::async_nats::jetstream::new(client);
///     let mut stream = js.get_stream(MemberStatus::NAME).await.ok()?;
///     Some(stream.info().await.ok()?.state.messages)
/// }
///
/// const NAME: &'static str = MemberStatus::NAME;
/// # fn main() {
/// assert_eq!(NAME, "MEMBER_STATUS");
/// # let _ = messages;
/// # }
/// ```
///
/// # Keys
///
/// | key | value | meaning |
/// |-----|-------|---------|
/// | `name` | string, **required** | The stream's name on the server (and the struct's `NAME` constant): no whitespace, `.`, `*`, `>`, `/`, `\` or control characters, at most 255 bytes. `name = "ORDERS"` |
/// | `subjects` | list of strings, **required** unless `mirror` or `sources` | The subjects the stream captures (at least one; wildcards allowed; they cannot overlap each other). `subjects = ["orders.>"]` |
/// | `replicas` | integer 1..=5 | Copies kept in a cluster. `replicas = 3` |
/// | `storage` | `"file"` \| `"memory"` | Where messages are kept (server default: file). |
/// | `retention` | `"limits"` \| `"interest"` \| `"workqueue"` | When messages are removed (server default: limits). A `"workqueue"` stream takes no `#[broadcast]`. |
/// | `max_age` | duration, not zero | How long a message is kept. `max_age = "7d"` |
/// | `max_msgs` | integer ≥ 1 | Messages kept at most. |
/// | `max_bytes` | integer ≥ 1 | Bytes kept at most. |
/// | `max_msg_size` | integer 1..=`i32::MAX` | Largest message accepted, in bytes. |
/// | `discard` | `"old"` \| `"new"` | At a limit, drop the oldest messages or refuse new ones (server default: old). |
/// | `duplicate_window` | duration, not zero, at most `max_age` | Window in which a repeated `Nats-Msg-Id` is a duplicate. `duplicate_window = "2m"` |
/// | `description` | string, at most 4096 bytes | Stored on the server. |
/// | `placement` | `{ cluster = "..", tags = [..] }`, either or both | Where the replicas live: in that cluster of a supercluster, on servers carrying every tag (their `server_tags`). Editable: a changed placement moves the stream, and `plan` says so. `placement = { cluster = "east", tags = ["ssd"] }` |
/// | `mirror` | a `#[stream]` type, a stream's name, or `{ stream = .., filter = "..", transform = "..", domain = "..", api_prefix = ".." }` | A copy of that stream: the stream declares no `subjects` and no `sources`. `filter` takes part of it, `transform` rewrites the subjects taken, `domain` (or `api_prefix`, not both) reaches a stream of another JetStream. Fixed on the server: another origin is a conflict. `mirror = { stream = Orders, filter = "orders.eu.>" }` |
/// | `sources` | list of what `mirror` takes | Streams aggregated into this one, besides its own `subjects`. Editable. `sources = [Orders, "BILLING"]` |
/// | `subject_transform` | `{ src = "..", dest = ".." }` | Stores the messages captured on `src` under `dest` (nats-server 2.10+). `subject_transform = { src = "in.>", dest = "events.>" }` |
/// | `allow_msg_ttl` | flag | Messages may carry their own time to live (`Publish::ttl`, the `Nats-TTL` header): removed when it runs out. nats-server 2.11+ (refused at start-up on an older one, naming it); turned on in place on an existing stream, never off. |
/// | `allow_msg_schedules` | flag | Messages may be scheduled (`Publish::schedule_at`, the `Nats-Schedule` header): the server publishes them to their target subject at their time. nats-server 2.12+ (refused at start-up on an older one); turned on in place, never off. |
/// | `codec` | `"json"` (default), `"msgpack"`, `"cbor"`, `"protobuf"` | How the handlers that read the stream decode its messages, unless they name their own `codec` (on a consumer naming the stream by type; the codec's cargo feature must be on). Nothing on the server changes. |
/// | `external` | flag | Owned elsewhere: never created or changed, only verified. Takes no settings but `name`, `subjects` and `retention` (declare the retention to get the work-queue checks). |
/// | `crate` | path | Where the facade is, when not at `::nats_topology` (a renamed dependency or a re-export): `crate = my_alias`. |
///
/// # Errors
///
/// Every mistake of the attribute is reported, each at its token: a missing or invalid key, a
/// key given twice, an unknown key (with the expected keys and the nearest one), a value of the
/// wrong kind or out of range, settings on an `external` stream, a mirror with `subjects` or
/// `sources`, a stream that is its own mirror or source, and anything but a unit struct
/// without generics.
#[proc_macro_attribute]
pub fn stream(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand::stream(attr.into(), item.into()).into()
}

/// Declares the handler of a queue consumer: shared work, each message handled by one instance.
///
/// All the instances of the service share one durable consumer, named by `group`; each
/// message goes to one of them, and a survivor takes over the messages of an instance that
/// dies. This is the safe shape for work at any number of replicas: **a plain durable consumer
/// cannot be written**, because it admits one subscriber (a second replica is refused, or
/// receives every message again).
///
/// The attribute goes on an `async fn` that takes the payload (any `DeserializeOwned` type,
/// decoded from JSON; `Vec<u8>` or `Bytes` for the raw bytes), optionally a `Context`, then
/// any number of `State<T>` (application state given to `Runtime::builder(..).state(..)`; a
/// runtime lacking one does not build, naming the type and the handler), and returns `Result<(), E>` with `E: Into<HandlerError>`. `Ok` acknowledges the message; `Err`
/// asks for a redelivery after the `backoff` (or a dead letter once `max_deliver` is reached,
/// or at once for `HandlerError::permanent`). The future must be `Send`. The function itself is
/// left unchanged.
///
/// ```
/// use nats_topology::{queue_consumer, stream, Context, HandlerError};
/// # #[derive(serde::Deserialize)]
/// # struct SyncComplete { id: u64 }
///
/// #[stream(name = "DAEMON_SYNC", subjects = ["daemon.sync.>"], replicas = 3)]
/// pub struct DaemonSync;
///
/// #[queue_consumer(stream = DaemonSync, group = "sync", subject = "daemon.sync.complete",
///                  max_deliver = 5, ack_wait = "30s", backoff = ["1s", "10s"], concurrency = 8)]
/// async fn on_sync_complete(event: SyncComplete, cx: Context) -> Result<(), HandlerError> {
///     println!("sync {} completed (attempt {})", event.id, cx.delivered());
///     Ok(())
/// }
///
/// // A stream declared elsewhere, by name (checked at start-up); the whole stream.
/// #[queue_consumer(stream = "DAEMON_SYNC", group = "audit")]
/// async fn on_sync(event: serde_json::Value) -> Result<(), HandlerError> {
///     Ok(())
/// }
/// # fn main() {}
/// ```
///
/// # Keys
///
/// | key | value | meaning |
/// |-----|-------|---------|
/// | `stream` | type path or string, **required** | The stream read: a `#[stream]` type (`stream = DaemonSync`: checked at compile time, including that the filters are covered by its subjects), or the name of a stream declared elsewhere or external (`stream = "DAEMON_SYNC"`: checked at start-up). |
/// | `group` | string, **required** | The durable consumer shared by all instances (a consumer name: no whitespace, `.`, `*`, `>`, `/`, `\`). `group = "sync"` |
/// | `subject` | string | One filter subject. `subject = "daemon.sync.complete"` |
/// | `subjects` | list of strings | Several filter subjects, which cannot overlap. Neither `subject` nor `subjects`: the whole stream. |
/// | `delivery` | `"pull"` (default) \| `"push"` | `"push"`: a push consumer whose deliver group is the `group`, to join an existing push-based fleet. The server pushes up to `max_ack_pending` messages to the whole group; unless declared it is set to `concurrency`, so an instance never holds more than it can start (pull scales better: each instance asks for what it can start). |
/// | `max_deliver` | integer ≥ 1 | Deliveries of one message before it is dead-lettered (omit for unlimited). |
/// | `ack_wait` | duration, not zero | How long the server waits for an acknowledgement before redelivering. |
/// | `backoff` | list of durations, none zero | Delay before each redelivery after a handler failure (the last repeats); no more steps than `max_deliver`. Applied by the runtime when it naks, not sent as the server's consumer `backoff` (which would replace `ack_wait` with its first step). `backoff = ["1s", "10s", "1m"]` |
/// | `max_ack_pending` | integer ≥ 1 | Unacknowledged messages across all instances (server default: 1000). |
/// | `max_waiting` | integer 1..=100000 | Pull requests that may wait at the consumer at once, all instances' together (default 4096: room for 2,000 replicas keeping two open each). Past it the server drops a replica's requests and delivers it nothing (its health says `crowded out`). The server cannot change it on an existing consumer: change it with `migrate_from`. Pull only. `max_waiting = 8192` |
/// | `concurrency` | integer ≥ 1 | Messages handled at once by this instance (default 1). |
/// | `dead_letter` | subject (no wildcards) | Where a message that failed for good is published, with its error. Must not be read back by this consumer. |
/// | `migrate_from` | consumer name | A previous consumer of this work (another shape or name): the new one starts at its acknowledgement floor, then it is deleted. |
/// | `migrate_from_partitions` | integer 1..=1024 | With `migrate_from` on a partitioned consumer: the group it names is partitioned too, into this many partitions. Its partitions are read to their end, each in order, before this group's start: the partition count changes so (the stream's transform must store the new count's subjects apart from the old's, docs/PARTITIONS.md). `migrate_from_partitions = 16` |
/// | `publishes` | list of subjects (`*` and `>` allowed) | Where the handler publishes (`Context::publish`): the service's generated permissions (`export --permissions`) grant publishing there, and nowhere else but the `dead_letter`, even into the streams the service owns. `publishes = ["orders.billed", "invoices.*.issued"]` |
/// | `codec` | `"json"` (default: the stream's `codec`, else JSON), `"msgpack"`, `"cbor"`, `"protobuf"` | How payloads are read (`nats_topology::codec`): each codec beyond JSON needs the cargo feature of its name; the payload type must be one the codec reads (`serde` types; `prost::Message` for protobuf); a `Bytes` or `Vec<u8>` payload takes none. A message whose `Content-Type` names another codec is a decode error naming both. |
/// | `layer` | path of a function | A `tower` layer around this handler (feature `tower`): `f()` returns a `tower::Layer` as `RuntimeBuilder::layer` takes (`batch_layer`'s for a batch handler), installed innermost, inside the builder's. `layer = payment_limits` |
/// | `description` | string, at most 4096 bytes | Stored on the server. |
/// | `ack` | `"fire_and_forget"` \| `"confirmed"` | When a handled message counts as handled. `"confirmed"`: the ack waits for the server's reply (a double ack), is retried on a timeout, and only then is the message counted as handled; a drain waits for those replies, so a process killed after a confirmation never sees that message again. `"fire_and_forget"`: the ack is sent and not waited for. Omitted: the runtime's default (`RuntimeBuilder::ack`, fire-and-forget unless set). |
/// | `priority` | `"pinned_client"` \| `"overflow"` | Priority groups (nats-server 2.11 or newer; refused at start-up on an older one, naming its version). `"pinned_client"`: one instance consumes, the others stand by (ready, health `standby`); another is pinned once the pinned one has not pulled for `pinned_ttl`, or at once when it drains. `"overflow"`: spill-over instances (`RuntimeBuilder::spill_over`) take work only past `min_pending` / `min_ack_pending`; the others take it always. Pull consumers only. |
/// | `pinned_ttl` | duration, at least `"1s"` | With `"pinned_client"`, required: how long the pinned instance may go without pulling before another takes over. `pinned_ttl = "10s"` |
/// | `key` | string of `{n}` tokens, e.g. `"{1}"`, `"{2}.{1}"` | With `partitions`: the subject's `*` tokens (by position, from 1) whose value keeps its messages in order. The stream's `subject_transform` must route by the same key and count: `dest` with a `{{partition(N,n..)}}` token (start-up says what to declare otherwise). `key = "{1}"` |
/// | `partitions` | integer 1..=1024 | With `key`: the group's partitions, fixed (each is a durable consumer `<group>-p<i>` on the server). Within a key, one message at a time in stream order; across keys, in parallel; the replicas share the partitions by themselves (docs/PARTITIONS.md). Not with `priority`, `max_ack_pending`, `concurrency`, `batch` or `delivery = "push"`; one `subject`; `migrate_from` names a plain queue consumer (or, with `migrate_from_partitions`, a partitioned group) whose remaining messages are handled before the partitions start; nats-server 2.11 or newer. `partitions = 16` |
/// | `min_pending` | integer ≥ 1 | With `"overflow"`: a spill-over instance takes work while at least this many messages wait undelivered. |
/// | `min_ack_pending` | integer ≥ 1 | With `"overflow"`: a spill-over instance takes work while at least this many messages are unacknowledged. `"overflow"` needs this or `min_pending`. |
/// | `batch` | integer 1..=10000 | A batch handler: the function takes `Batch<T>` instead of one payload and is given up to this many messages at once (see [Batch handlers](#batch-handlers)). `concurrency` defaults to it and may not be below it, nor may `max_ack_pending`. `batch = 50` |
/// | `batch_wait` | duration, not zero | With `batch`: how long the first message of a batch waits for the rest before the handler is called with what arrived (default `"100ms"`). |
/// | `crate` | path | Where the facade is, when not at `::nats_topology`: `crate = my_alias`. |
///
/// # Errors
///
/// Besides the errors of each key (as for [`macro@stream`]): a missing `group`; a pinned client
/// without `pinned_ttl`, overflow without a threshold, a priority key without its policy, a
/// priority on a push consumer (or on a `#[broadcast]`); `batch` without a `Batch<T>` payload,
/// a `Batch<T>` payload without `batch`, `batch_wait` alone, a `Context` beside a batch (each
/// item carries its own), `concurrency` or `max_ack_pending` below the batch, and `batch` on a
/// `#[broadcast]`; and any
/// `durable`, `durable_name` or `deliver_group` key (plain durables); `subject` together with
/// `subjects`; a `backoff` longer than `max_deliver`; `migrate_from` naming the group itself;
/// an empty `publishes` list, or a subject given twice in it;
/// and a handler that is not an `async fn`, is generic, takes `self`, takes no payload or more
/// than a payload, a `Context` and `State<T>` arguments, or returns nothing. A second
/// argument that is not a `State` or a
/// `Context` is reported as "the second argument of a handler is its `Context`": to receive
/// several values, make the payload a struct that holds them.
///
/// # Batch handlers
///
/// With `batch = N` the handler takes `Batch<T>` (`T` decoded as a payload is, `Vec<u8>` for raw
/// bytes) and any `State<T>` arguments, and is called with up to `N` messages: as many as
/// arrived within `batch_wait` of the first. Each message is settled on its own. `Ok(())` acks
/// every message; an `Err` that converts into `HandlerError` fails the whole batch (each
/// message is redelivered, or dead-lettered, as a single handler's error would); a
/// `Failures` value names the messages that failed by index
/// and acks the rest. A message that does not decode fails alone (dead-lettered as a decode
/// error) and the handler gets the others. Progress acks cover every message of the batch while
/// the handler runs, so a batch that takes longer than `ack_wait` is not redelivered, and a drain
/// finishes the batch in hand.
///
/// ```
/// use nats_topology::{queue_consumer, Batch, BatchError, Failures, HandlerError};
/// # #[derive(serde::Deserialize)]
/// # struct Order { id: u64 }
/// # fn store(_: &[&Order]) -> Result<(), HandlerError> { Ok(()) }
///
/// #[queue_consumer(stream = "ORDERS", group = "archive", subject = "orders.paid",
///                  batch = 50, batch_wait = "200ms")]
/// async fn archive(orders: Batch<Order>) -> Result<(), BatchError> {
///     let mut failures = Failures::new();
///     for order in &orders {
///         if order.value().id == 0 {
///             // This message alone is dead-lettered; the others are acked.
///             failures.fail(order.index(), HandlerError::permanent("order without an id"));
///         }
///     }
///     let good: Vec<&Order> = orders.iter().map(|item| item.value()).filter(|o| o.id != 0).collect();
///     store(&good)?; // an error here fails the whole batch
///     failures.into_result()
/// }
/// # fn main() {}
/// ```
///
/// The attribute goes on a **free function**, not on an associated function inside an `impl`
/// block. A proc macro is given the function alone, so this is read from the handler's source
/// file at its name; where that cannot be done (no source file, a handler written by another
/// macro), rustc reports the mistake in its own words: "`const` items in this context need a
/// name" and "cannot find function". Either way the fix is to move the function out of the
/// `impl`.
#[proc_macro_attribute]
pub fn queue_consumer(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand::queue_consumer(attr.into(), item.into()).into()
}

/// Declares the handler of a broadcast: every instance receives every message.
///
/// Each instance gets its own ephemeral consumer, started at boot, supervised, and deleted
/// when the instance drains (the server removes it after a while if the instance dies). Use
/// it to fan a message out to whichever instance holds the session it concerns. It has no
/// `group` and no durable: for work handled once, use [`macro@queue_consumer`].
///
/// The handler is as for [`macro@queue_consumer`].
///
/// Beside the function, the attribute declares a type of the same name (types and functions
/// live apart, so the function is still called as before) with one associated function,
/// `relay(&Runtime) -> Relay`: the typed handle on this relay, as visible as the function. A
/// service calls its `ensure()` when a local session subscribes; a misspelt name is a compile
/// error, where `runtime.relay("name")` would be a `None` at run time.
///
/// ```
/// use nats_topology::{broadcast, stream, Context, HandlerError};
/// # #[derive(Debug, serde::Deserialize)]
/// # struct StatusChanged { online: bool }
///
/// #[stream(name = "MEMBER_STATUS", subjects = ["member.status.>"])]
/// pub struct MemberStatus;
///
/// #[broadcast(stream = MemberStatus, subject = "member.status.>", deliver = "last_per_subject")]
/// async fn relay_status(event: StatusChanged, cx: Context) -> Result<(), HandlerError> {
///     println!("{} is now {:?}", cx.subject(), event);
///     Ok(())
/// }
///
/// async fn on_session_subscribed(runtime: &nats_topology::Runtime) {
///     relay_status::relay(runtime).ensure().await.expect("the runtime runs");
/// }
/// # fn main() {}
/// ```
///
/// # Keys
///
/// | key | value | meaning |
/// |-----|-------|---------|
/// | `stream` | type path or string, **required** | As for [`macro@queue_consumer`]. A stream declared with `retention = "workqueue"` cannot carry a broadcast (checked at compile time for a type, at start-up for a name). |
/// | `subject` / `subjects` | string / list of strings | Filters, as for [`macro@queue_consumer`]. |
/// | `deliver` | `"new"` (default) \| `"all"` \| `"last"` \| `"last_per_subject"` | Where the relay starts: messages published after it starts, the whole stream, the last message, or the last message of each subject. |
/// | `ordered` | flag | An ordered replay (below): from the whole stream unless `deliver = "last_per_subject"`. |
/// | `concurrency` | integer ≥ 1 | Messages handled at once by this instance (default 1; an ordered replay takes no more than 1). |
/// | `publishes` | list of subjects | Where the handler publishes, as for [`macro@queue_consumer`]. |
/// | `codec` | as for [`macro@queue_consumer`] | How payloads are read, as for [`macro@queue_consumer`]. |
/// | `layer` | path of a function | A `tower` layer around this handler, as for [`macro@queue_consumer`]. |
/// | `crate` | path | Where the facade is, when not at `::nats_topology`. |
///
/// # Ordered replays
///
/// With `ordered`, each instance rebuilds a read model of its own from the stream: its handler
/// sees every message once, one at a time, in stream order, starting from the beginning of the
/// stream. While it catches up, the relay's health state is `replaying` with how many messages
/// are left, and the instance is not ready; once it has handled a message with none left after
/// it, `running`. A delivery lost on the way (the server numbers each delivery, and one is
/// missing) or a handler's transient failure ends the session, and the relay starts again
/// after the last message handled, on a consumer created there, so the handler never sees a
/// later message first. A permanent failure (`HandlerError::permanent`) passes over its
/// message, as elsewhere. A restarted instance starts from the beginning; so does a relay whose
/// stream was deleted and created again (`cx.stream_sequence()` then starts again at 1).
///
/// ```
/// use nats_topology::{broadcast, stream, Context, HandlerError, State};
/// # #[derive(Debug, serde::Deserialize)]
/// # struct Entry { account: String, amount: i64 }
/// # #[derive(Default)]
/// # struct Balances { by_account: std::sync::Mutex<std::collections::BTreeMap<String, i64>> }
///
/// #[stream(name = "LEDGER", subjects = ["ledger.>"])]
/// pub struct Ledger;
///
/// #[broadcast(stream = Ledger, subject = "ledger.>", ordered)]
/// async fn balances(entry: Entry, cx: Context, model: State<Balances>) -> Result<(), HandlerError> {
///     let _ = cx.stream_sequence();
///     *model.by_account.lock().unwrap().entry(entry.account).or_default() += entry.amount;
///     Ok(())
/// }
/// # fn main() {}
/// ```
///
/// # Errors
///
/// As for [`macro@queue_consumer`]; `ordered` with a `concurrency` above 1, or with
/// `deliver = "new"` or `"last"` (an ordered replay rebuilds from what the stream holds); and a `group`, `durable`, `durable_name` or `deliver_group`
/// key (a broadcast is per instance; shared work is a queue consumer). An `ack` key is refused
/// too: a relay's consumer dies with its instance and resumes after what its own handlers
/// finished, so a confirmed ack would guarantee nothing more.
#[proc_macro_attribute]
pub fn broadcast(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand::broadcast(attr.into(), item.into()).into()
}

#[doc = include_str!("../docs/kv_bucket.md")]
#[proc_macro_attribute]
pub fn kv_bucket(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand::kv_bucket(attr.into(), item.into()).into()
}

#[doc = include_str!("../docs/kv_watch.md")]
#[proc_macro_attribute]
pub fn kv_watch(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand::kv_watch(attr.into(), item.into()).into()
}

#[doc = include_str!("../docs/object_store.md")]
#[proc_macro_attribute]
pub fn object_store(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand::object_store(attr.into(), item.into()).into()
}

#[doc = include_str!("../docs/service.md")]
#[proc_macro_attribute]
pub fn service(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand::service(attr.into(), item.into()).into()
}

#[doc = include_str!("../docs/endpoint.md")]
#[proc_macro_attribute]
pub fn endpoint(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand::endpoint(attr.into(), item.into()).into()
}

#[doc = include_str!("../docs/subscription.md")]
#[proc_macro_attribute]
pub fn subscription(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand::subscription(attr.into(), item.into()).into()
}
