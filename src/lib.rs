//! Declare your NATS JetStream topology with attribute macros on handler functions; the
//! compiler refuses unsafe shapes, and the runtime provisions, supervises and drains.
//!
//! ```no_run
//! use nats_topology::{Context, HandlerError, Runtime, State, broadcast, queue_consumer, stream};
//! use serde::Deserialize;
//!
//! /// Application state: given once to the builder, taken by handlers as `State<Sessions>`.
//! struct Sessions;
//!
//! // A stream this service owns: created (or updated) at start-up.
//! #[stream(name = "DAEMON_SYNC", subjects = ["daemon.sync.>"], replicas = 3, max_age = "7d")]
//! struct DaemonSync;
//!
//! #[derive(Deserialize)]
//! struct SyncComplete {
//!     member: u64,
//! }
//!
//! // Work: each message handled by one instance; `group` names the durable they share.
//! #[queue_consumer(stream = DaemonSync, group = "sync", subject = "daemon.sync.complete")]
//! async fn on_sync_complete(event: SyncComplete, cx: Context) -> Result<(), HandlerError> {
//!     cx.publish("daemon.sync.status", &event.member).await?;
//!     Ok(())
//! }
//!
//! // Fan-out: every instance receives every message (an ephemeral consumer per instance).
//! #[broadcast(stream = DaemonSync, subject = "daemon.sync.status")]
//! async fn relay_status(member: u64, sessions: State<Sessions>) -> Result<(), HandlerError> {
//!     println!("member {member} synced: tell its local sessions");
//!     # let _ = sessions;
//!     Ok(())
//! }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     // Servers from `NATS_URL`; a broker that is down at boot is waited for, and every
//!     // disconnection is followed by reconnection attempts, without limit.
//!     let client = nats_topology::connect_from_env().await?;
//!     // Validates the whole topology, and that every `State<T>` a handler takes is given.
//!     let runtime = Runtime::builder(client).state(Sessions).build()?;
//!     let health = runtime.health(); // for a readiness probe: health.ready()
//!     // The relay's typed handle: `ensure()` it when a local session subscribes.
//!     let relay = relay_status::relay(&runtime);
//!     # drop((health, relay));
//!     runtime.run_until_signal().await?; // provision, supervise, drain on SIGINT/SIGTERM
//!     Ok(())
//! }
//! ```
//!
//! - A plain durable (one subscriber: a second replica is refused or duplicates) cannot be
//!   written: `#[queue_consumer]` requires a `group`, and `durable`/`deliver_group` keys are
//!   compile errors.
//! - Provisioning sends CREATE first (idempotent for an identical configuration), compares
//!   only on conflict, updates editable fields, reports immutable ones with a `migrate_from`
//!   hint, and retries transient failures with full jitter ([`RetryPolicy`]).
//! - Rolling deploys: `migrate_from` pauses the old consumer and moves at its ack floor while
//!   the old fleet still runs, and version stamps keep an older version from reverting a
//!   newer one's settings ([`RuntimeBuilder::version`]); see `docs/DEPLOYS.md`.
//! - Every consumer is supervised until shutdown: re-ensured after any loss, visible in
//!   [`Health`] while it is not running. [`Runtime::plan`] and [`Runtime::inspect`] show what
//!   provisioning would do and what the server holds.
//! - Redeliveries do not double-apply what a handler did: `ack = "confirmed"` (or
//!   [`RuntimeBuilder::ack`]) counts a message as handled only once the server confirmed its
//!   ack, and [`Context::publish`] sends a `Nats-Msg-Id` derived from the message being
//!   handled, so a redelivered handler's outputs are dropped by the target stream's
//!   duplicate window ([`Context`] explains the window and the exceptions).
//! - Handlers take the payload, optionally a [`Context`], then any [`State<T>`] arguments
//!   (application state, checked when the runtime is built). `#[broadcast]` generates a typed
//!   handle named like its function, `relay_status::relay(&runtime)`, so a misspelt relay is a
//!   compile error; [`Runtime::relay`] looks one up by name for dynamic use.
//! - State shared by every replica: `#[kv_bucket]` and `#[object_store]` declare key-value
//!   buckets and object stores, provisioned as the streams every NATS client expects, with
//!   typed handles (`MemberStatus::kv(&runtime)`, [`bucket::Kv`]) whose compare-and-swap
//!   loss is its own error kind ([`bucket::KvErrorKind::Conflict`]).
//!   `#[kv_watch(bucket = MemberStatus, keys = "member.>")]` hands every instance each change
//!   of those keys ([`bucket::KvEntry`]: puts, deletes and purges) in revision order, resuming
//!   after the last revision it handled (`examples/feature_flags.rs`).
//! - [`connect`] and [`connect_from_env`] connect the way a supervised service needs (retry on
//!   initial connect, unlimited reconnects, a connection name); [`connect_options`] starts
//!   from the same options to add credentials or TLS. The client is the re-exported
//!   [`async_nats`], so its version always matches the one [`Runtime::builder`] takes.
//! - [`telemetry`]: metrics through the `metrics` facade (install any recorder; the names
//!   and labels are in `docs/METRICS.md`), and with the `otel` feature W3C trace context
//!   carried from [`Context::publish`] into the handlers the message reaches.
//! - [`export`] writes the topology, from the declarations alone, as the JetStream API's
//!   stream and consumer JSON (exactly what provisioning sends) and as an AsyncAPI 3.0
//!   document; with the `schemars` feature, payload schemas come from `schemars::JsonSchema`.
//! - Feature `cli`: `cli::run_or_continue().await` at the top of `main` gives every binary
//!   `plan`, `inspect`, `export`, `provision` and `health` subcommands.
//! - Feature `http`: `/livez`, `/readyz` (JSON: every consumer's state) and `/metrics`
//!   endpoints, served on an address or mounted on an axum router (`http`).
//! - Streams in another JetStream domain than the connection's server (an edge site's leaf
//!   node seen from a hub): [`RuntimeBuilder::domain`] (or [`RuntimeBuilder::api_prefix`])
//!   sends every request of the runtime there. Tested on nats-server 2.10 to 2.15 (the
//!   repository's `docs/COMPATIBILITY.md`).
//! - For your own tests, the `nats-topology-testkit` crate (a dev-dependency) starts real
//!   `nats-server` processes: a JetStream server, a three-node cluster, or a hub and a leaf
//!   node with their own JetStream domains; `NATS_SERVER_VERSION` picks the server version.

pub use topology_runtime::handler::{BatchFuture, HandlerFuture};
pub use topology_runtime::{
    Batch, BatchError, BatchInput, ConsumerState, ConsumerStatus, Context, EndpointStatus,
    Failures, HandlerError, Health, Incoming, Inspection, Item, JetStreamStatus, NotReady,
    OlderDeclaration, OutagePolicy, PermissionDenial, Plan, Problem, ProvisionError,
    ProvisionErrorKind, ProvisionReport, Publish, Relay, RelayError, Request, RequestContext,
    RetryPolicy, RunError, Runtime, RuntimeBuilder, ServiceError, ServingState, State,
    StreamStatus, StreamWrites, SubscriptionStatus, Topology, ValidationError, Writes, export,
    inspect, model, plan, report, retry,
};

#[cfg(feature = "cli")]
pub mod cli;
#[cfg(feature = "http")]
pub mod http;

pub use topology_macros::{
    broadcast, endpoint, kv_bucket, kv_watch, object_store, queue_consumer, service, stream,
    subscription,
};

pub use topology_runtime::connect::{
    ConnectionProblem, EnvError, EnvErrorKind, EnvOptions, ProblemKind, connect, connect_from_env,
    connect_options, connect_with, denied, diagnose, no_jetstream, options_from,
};

/// How long a drain waits for each clean-up that needs the broker (the final flush of
/// acknowledgements, a relay's deletion), so that it ends even when the broker is gone.
pub use topology_runtime::run::CLEANUP_WAIT;

pub use topology_runtime::telemetry;

/// Typed handles on key-value buckets ([`Kv`](bucket::Kv)) and object stores
/// ([`ObjectStore`](bucket::ObjectStore)), their errors, and the change a `#[kv_watch]`
/// handler receives ([`KvEntry`](bucket::KvEntry), [`KvOperation`](bucket::KvOperation)).
pub use topology_runtime::bucket;

/// Payload codecs: JSON by default, MessagePack, CBOR and protobuf behind the cargo features of
/// their names (`codec = "msgpack"` on a handler, [`Publish::encode`] on publish).
pub use topology_runtime::codec;

/// `tower` layers around handlers and endpoints (feature `tower`): what a layer wraps
/// ([`HandlerService`](layer::HandlerService), [`EndpointService`](layer::EndpointService)) and
/// how a layer's error settles a message or answers a request. Installed with
/// [`RuntimeBuilder::layer`] and [`RuntimeBuilder::endpoint_layer`].
#[cfg(feature = "tower")]
pub mod layer {
    pub use topology_runtime::handler::layer::{
        BoxError, Failed, HandlerService, StackFuture, Stacked, settle_error,
    };
    pub use topology_runtime::service::layer::{EndpointService, Refused, answer_error};
}

/// How the leader watch paces itself ([`RuntimeBuilder::leader_timings`]).
pub use topology_runtime::provision::LeaderTimings;

/// The NATS client this crate is built on. Use it through this path (`nats_topology::async_nats`)
/// rather than a direct dependency, so that the [`Client`](async_nats::Client) given to
/// [`Runtime::builder`] is always of the version the runtime expects.
pub use async_nats;

/// What generated code reaches. Not public API: it may change in any release.
#[doc(hidden)]
pub mod __private {
    pub use ::core::time::Duration;
    pub use ::inventory;
    pub use ::std::boxed::Box;
    pub use topology_core::codec::CodecId;
    pub use topology_core::model::{
        AckMode, BatchDecl, BroadcastDecl, BucketDecl, ConsumerDecl, ConsumerKind, DeliverPolicy,
        Delivery, Discard, KvBucketDef, ObjectStoreDef, Origin, Overflow, Placement, QueueDecl,
        Retention, Storage, StreamDecl, StreamDef, StreamRef, SubjectTransform, WatchDecl,
        WatchFrom,
    };
    pub use topology_core::service::{
        EndpointDecl, Fanout, ServiceDecl, ServiceDef, SubscriptionDecl,
    };
    pub use topology_runtime::bucket::{
        Bytes, JetStreamSource, JsonValue, Kv, KvBucketValue, ObjectStore, RawValue,
        decode_kv_entry, decode_kv_watch_arg,
    };
    pub use topology_runtime::codec::{Cbor, Codec, Json, MsgPack, Protobuf};
    pub use topology_runtime::export::{
        NameFallback, NameSpecialized, PayloadSchema, PayloadSchemaRegistration,
        ReplySchemaRegistration, SchemaFallback, SchemaProbe, SchemaSpecialized,
    };
    pub use topology_runtime::handler::glue::{
        HandlerContext, IntoBatchError, RawPayload, StateArg, assert_send, batch_state, context,
        decode_json, decode_raw, decode_with, into_batch_result, into_result, state,
    };
    pub use topology_runtime::handler::{
        Batch, BatchError, BatchFuture, BatchInput, HandlerError, HandlerFuture, Incoming,
    };
    pub use topology_runtime::registry::{
        AnyLayer, BatchConsumerRegistration, BucketRegistration, ConsumerRegistration,
        EndpointRegistration, IntoBatchLayer, IntoEndpointLayer, IntoHandlerLayer,
        LayerRegistration, ServiceRegistration, StreamRegistration, SubscriptionRegistration,
        WatchRegistration,
    };
    pub use topology_runtime::service::glue::{
        EndpointContext, EndpointReturn, IntoServiceError, RawReply, ReplyBody, RequestStateArg,
        assert_send_reply, decode_message_json, decode_message_raw, decode_message_with,
        decode_request_json, decode_request_raw, decode_request_with, encode_json,
        into_service_error, message_state, reply_json, reply_raw, reply_with, request_context,
        request_state,
    };
    pub use topology_runtime::service::{EndpointFn, ReplyFuture, Request, SubscriptionFn};
    pub use topology_runtime::state::StateKey;
    pub use topology_runtime::{Relay, Runtime};
    // The rules that generated `const _` assertions call (the same functions the macros call
    // at expansion time and the runtime at start-up).
    pub use topology_core::origin::delivers;
    pub use topology_core::rules::{allows_broadcast, dead_letter_loops};
    pub use topology_core::subject::covered_by;
}
