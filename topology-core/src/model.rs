//! Plain, const-constructible declarations: what `#[stream]`, `#[queue_consumer]` and
//! `#[broadcast]` produce, and what the programmatic API builds by hand.
//!
//! Every optional field is `None` when the declaration does not set it: the server default
//! applies, and provisioning compares only the fields a declaration sets.

use core::time::Duration;

pub use crate::codec::CodecId;

pub use crate::bucket::{BucketDecl, BucketKind, BucketShape, KvBucketDef, ObjectStoreDef};
pub use crate::limits::DEFAULT_MAX_WAITING;
pub use crate::placement::{Placement, Storage};
pub use crate::service::{EndpointDecl, Fanout, ServiceDecl, ServiceDef, SubscriptionDecl};
pub use crate::watch::{WatchDecl, WatchFrom};

/// When a stream may discard a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Retention {
    /// Kept until a limit (age, count, bytes) is reached (the server default).
    Limits,
    /// Kept while some consumer has not acknowledged it.
    Interest,
    /// Removed once acknowledged: each message is consumed once.
    WorkQueue,
}

/// What a stream does when a limit is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Discard {
    /// Drop the oldest messages (the server default).
    Old,
    /// Refuse new messages.
    New,
}

/// How a queue consumer receives its messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Delivery {
    /// A pull consumer: every instance fetches from the shared durable (the default; no bind race).
    #[default]
    Pull,
    /// A push consumer with `deliver_group` = the group, consumed through a queue subscription;
    /// for joining an existing push-based fleet.
    Push,
}

/// When a queue consumer's handled message counts as handled.
///
/// A handler that returned `Ok` has its message acknowledged. Fire-and-forget sends the ack
/// and moves on: a process killed (or a connection lost) right after may leave the ack
/// unrecorded, and the server then redelivers a message whose handler finished. Confirmed
/// waits for the server's reply to the ack (a "double ack"), retries it on a timeout, and
/// only then counts the message as handled; a drain waits for those replies.
///
/// A relay (`#[broadcast]`) has no setting: its consumer lives in one instance and dies with
/// it, and it resumes after what its own handlers finished, so a confirmation would guarantee
/// nothing more.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum AckMode {
    /// Send the ack without waiting for the server (the runtime's default).
    #[default]
    FireAndForget,
    /// Wait for the server to confirm the ack, retrying it on a timeout.
    Confirmed,
}

/// Where a broadcast relay starts in its stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum DeliverPolicy {
    /// Every message in the stream.
    All,
    /// Only messages published after the relay starts (the default for broadcasts).
    #[default]
    New,
    /// The last message of the stream, then new ones.
    Last,
    /// The last message of each subject, then new ones.
    LastPerSubject,
}

/// A stream declaration.
///
/// ```
/// use core::time::Duration;
/// use topology_core::model::{StreamDecl, Storage};
///
/// const ORDERS: StreamDecl = StreamDecl::new("ORDERS", &["orders.>"])
///     .replicas(3)
///     .storage(Storage::File)
///     .max_age(Duration::from_secs(7 * 24 * 3600));
/// assert_eq!(ORDERS.replicas, Some(3));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StreamDecl {
    /// The stream's name on the server.
    pub name: &'static str,
    /// The subjects the stream captures (at least one).
    pub subjects: &'static [&'static str],
    /// Number of replicas (1..=5).
    pub replicas: Option<u8>,
    /// Storage backend.
    pub storage: Option<Storage>,
    /// Retention policy.
    pub retention: Option<Retention>,
    /// Maximum age of a message.
    pub max_age: Option<Duration>,
    /// Maximum number of messages.
    pub max_msgs: Option<i64>,
    /// Maximum total size in bytes.
    pub max_bytes: Option<i64>,
    /// Maximum size of one message in bytes.
    pub max_msg_size: Option<i32>,
    /// Discard policy when a limit is reached.
    pub discard: Option<Discard>,
    /// Window in which a repeated `Nats-Msg-Id` is a duplicate.
    pub duplicate_window: Option<Duration>,
    /// A description stored on the server.
    pub description: Option<&'static str>,
    /// Where the stream's replicas live: a cluster and/or server tags. Editable: a changed
    /// placement moves the stream.
    pub placement: Option<Placement>,
    /// The stream this one mirrors (copies as it is; a mirror declares no subjects). Immutable
    /// on the server: another origin is a new stream.
    pub mirror: Option<Origin>,
    /// The streams this one aggregates, besides its own subjects. Editable.
    pub sources: &'static [Origin],
    /// A rewrite of the subjects the stream stores.
    pub subject_transform: Option<SubjectTransform>,
    /// Messages may carry their own time to live (`Nats-TTL`; nats-server 2.11). See
    /// [`StreamDecl::allow_msg_ttl`].
    pub allow_msg_ttl: bool,
    /// Messages may be scheduled (`Nats-Schedule`; nats-server 2.12). See
    /// [`StreamDecl::allow_msg_schedules`].
    pub allow_msg_schedules: bool,
    /// Maximum messages kept per subject (a key-value bucket's history).
    pub max_msgs_per_subject: Option<i64>,
    /// The stream shape of a key-value bucket or object store (ADR-8, ADR-20): roll-ups
    /// allowed, deletes denied (key-value only), direct gets allowed. `None` for a plain stream.
    pub bucket_shape: Option<BucketShape>,
    /// Owned by someone else: never created or changed here, only verified.
    pub external: bool,
    /// The version of the service declaring it, stamped on the server (`#[stream]` sets the
    /// declaring crate's `CARGO_PKG_VERSION`); `None`: the runtime's version, else a hash of
    /// the declaration.
    pub version: Option<&'static str>,
}

impl StreamDecl {
    /// A stream with the given name and subjects and server defaults for everything else.
    pub const fn new(name: &'static str, subjects: &'static [&'static str]) -> Self {
        StreamDecl {
            name,
            subjects,
            replicas: None,
            storage: None,
            retention: None,
            max_age: None,
            max_msgs: None,
            max_bytes: None,
            max_msg_size: None,
            discard: None,
            duplicate_window: None,
            description: None,
            placement: None,
            mirror: None,
            sources: &[],
            subject_transform: None,
            allow_msg_ttl: false,
            allow_msg_schedules: false,
            max_msgs_per_subject: None,
            bucket_shape: None,
            external: false,
            version: None,
        }
    }
    /// Sets the maximum messages kept per subject.
    pub const fn max_msgs_per_subject(mut self, max: i64) -> Self {
        self.max_msgs_per_subject = Some(max);
        self
    }
    /// Shapes the stream as a key-value bucket's or an object store's.
    pub const fn bucket_shape(mut self, shape: BucketShape) -> Self {
        self.bucket_shape = Some(shape);
        self
    }
    /// Sets the declaring service's version, stamped on the server's stream.
    pub const fn version(mut self, version: &'static str) -> Self {
        self.version = Some(version);
        self
    }
    /// Sets the number of replicas.
    pub const fn replicas(mut self, replicas: u8) -> Self {
        self.replicas = Some(replicas);
        self
    }
    /// Sets the storage backend.
    pub const fn storage(mut self, storage: Storage) -> Self {
        self.storage = Some(storage);
        self
    }
    /// Sets the retention policy.
    pub const fn retention(mut self, retention: Retention) -> Self {
        self.retention = Some(retention);
        self
    }
    /// Sets the maximum age of a message.
    pub const fn max_age(mut self, max_age: Duration) -> Self {
        self.max_age = Some(max_age);
        self
    }
    /// Sets the maximum number of messages.
    pub const fn max_msgs(mut self, max_msgs: i64) -> Self {
        self.max_msgs = Some(max_msgs);
        self
    }
    /// Sets the maximum total size in bytes.
    pub const fn max_bytes(mut self, max_bytes: i64) -> Self {
        self.max_bytes = Some(max_bytes);
        self
    }
    /// Sets the maximum size of one message in bytes.
    pub const fn max_msg_size(mut self, max_msg_size: i32) -> Self {
        self.max_msg_size = Some(max_msg_size);
        self
    }
    /// Sets the discard policy.
    pub const fn discard(mut self, discard: Discard) -> Self {
        self.discard = Some(discard);
        self
    }
    /// Sets the duplicate window.
    pub const fn duplicate_window(mut self, window: Duration) -> Self {
        self.duplicate_window = Some(window);
        self
    }
    /// Sets the description.
    pub const fn description(mut self, description: &'static str) -> Self {
        self.description = Some(description);
        self
    }
    /// Sets where the stream's replicas live.
    pub const fn placement(mut self, placement: Placement) -> Self {
        self.placement = Some(placement);
        self
    }
    /// A mirror of `origin`, named `name`: it declares no subjects, it holds the origin's.
    pub const fn mirror_of(name: &'static str, origin: Origin) -> Self {
        StreamDecl::new(name, &[]).mirror(origin)
    }
    /// A stream named `name` aggregating `sources`, with no subjects of its own.
    pub const fn sourced(name: &'static str, sources: &'static [Origin]) -> Self {
        StreamDecl::new(name, &[]).sources(sources)
    }
    /// Makes the stream a mirror of `origin`.
    pub const fn mirror(mut self, origin: Origin) -> Self {
        self.mirror = Some(origin);
        self
    }
    /// Sets the streams this one aggregates.
    pub const fn sources(mut self, sources: &'static [Origin]) -> Self {
        self.sources = sources;
        self
    }
    /// Sets the rewrite of the subjects the stream stores.
    pub const fn subject_transform(mut self, transform: SubjectTransform) -> Self {
        self.subject_transform = Some(transform);
        self
    }
    /// Marks the stream as owned elsewhere: verified, never created or changed.
    pub const fn external(mut self) -> Self {
        self.external = true;
        self
    }
}

/// Implemented by `#[stream]` types; lets `stream = MyStream` in a consumer attribute be checked
/// by the compiler.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a stream",
    label = "not a `#[stream]` type",
    note = "declare it with `#[stream(name = \"...\", subjects = [\"...\"])]` on a unit struct, or name a stream declared elsewhere with a string: `stream = \"NAME\"`"
)]
pub trait StreamDef {
    /// The stream's declaration.
    const DECL: StreamDecl;
    /// How the handlers that read it decode its messages unless they name their own codec:
    /// one of the runtime's codec types (`nats_topology::codec::Json` unless the stream says
    /// `codec = ".."`); unbounded here, where no codec is known.
    type Codec;
}

/// How a consumer names its stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StreamRef {
    /// A `#[stream]` type (`stream = MyStream`): checked at compile time.
    Declared(&'static StreamDecl),
    /// A stream name (`stream = "NAME"`): declared elsewhere or external; checked at start-up.
    Named(&'static str),
}

impl StreamRef {
    /// The stream's name on the server.
    pub const fn name(&self) -> &'static str {
        match self {
            StreamRef::Declared(decl) => decl.name,
            StreamRef::Named(name) => name,
        }
    }
}

/// A stream that a mirror copies or a stream sources from, with what is taken from it.
///
/// `stream` is a declared stream ([`Origin::of`], checked at compile time) or a name
/// ([`Origin::named`]) for a stream declared elsewhere, in another domain (`domain`) or reached
/// through another account's API (`api_prefix`).
///
/// ```
/// use topology_core::model::{Origin, StreamDecl, StreamDef};
///
/// struct Orders;
/// impl StreamDef for Orders {
///     const DECL: StreamDecl = StreamDecl::new("ORDERS", &["orders.>"]);
///     type Codec = ();
/// }
/// const ORDERS_EU: StreamDecl =
///     StreamDecl::mirror_of("ORDERS_EU", Origin::of(&Orders::DECL).filter("orders.eu.>"));
/// const HUB: StreamDecl =
///     StreamDecl::mirror_of("ORDERS_HUB", Origin::named("ORDERS").domain("hub"));
/// assert_eq!(ORDERS_EU.mirror.unwrap().name(), "ORDERS");
/// assert!(ORDERS_EU.subjects.is_empty());
/// assert_eq!(HUB.mirror.unwrap().domain, Some("hub"));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Origin {
    /// The stream copied or sourced.
    pub stream: StreamRef,
    /// Only its messages on subjects matching this filter.
    pub filter: Option<&'static str>,
    /// Their subjects rewritten to this destination (a subject mapping: `eu.>`,
    /// `archive.{{wildcard(1)}}`), from `filter` or, without one, from every subject.
    pub transform: Option<&'static str>,
    /// The JetStream domain the stream lives in (its API is `$JS.<domain>.API`).
    pub domain: Option<&'static str>,
    /// The API prefix its JetStream is reached through (another account's import).
    pub api_prefix: Option<&'static str>,
}

impl Origin {
    /// A declared stream (`Origin::of(&Orders::DECL)`).
    pub const fn of(decl: &'static StreamDecl) -> Self {
        Origin::new(StreamRef::Declared(decl))
    }
    /// A stream by its name on the server.
    pub const fn named(name: &'static str) -> Self {
        Origin::new(StreamRef::Named(name))
    }
    const fn new(stream: StreamRef) -> Self {
        Origin {
            stream,
            filter: None,
            transform: None,
            domain: None,
            api_prefix: None,
        }
    }
    /// Takes only the messages whose subject matches `filter`.
    pub const fn filter(mut self, filter: &'static str) -> Self {
        self.filter = Some(filter);
        self
    }
    /// Rewrites the subjects taken to `dest`.
    pub const fn transform(mut self, dest: &'static str) -> Self {
        self.transform = Some(dest);
        self
    }
    /// The stream lives in the JetStream domain `domain`.
    pub const fn domain(mut self, domain: &'static str) -> Self {
        self.domain = Some(domain);
        self
    }
    /// The stream's JetStream is reached through `api_prefix`.
    pub const fn api_prefix(mut self, api_prefix: &'static str) -> Self {
        self.api_prefix = Some(api_prefix);
        self
    }
    /// The stream's name on the server.
    pub const fn name(&self) -> &'static str {
        self.stream.name()
    }
    /// Whether the stream is reached in this JetStream (no domain, no API prefix): only then
    /// can it be this stream itself, or part of a loop among declared streams.
    pub const fn is_local(&self) -> bool {
        self.domain.is_none() && self.api_prefix.is_none()
    }
    /// The API prefix the server is given: `api_prefix`, else `$JS.<domain>.API`; `None` for a
    /// local stream. (Written by the caller, which owns the allocation.)
    pub const fn external(&self) -> Option<External> {
        match (self.api_prefix, self.domain) {
            (Some(prefix), _) => Some(External::Prefix(prefix)),
            (None, Some(domain)) => Some(External::Domain(domain)),
            (None, None) => None,
        }
    }
}

/// How an origin outside this JetStream is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum External {
    /// Through this API prefix.
    Prefix(&'static str),
    /// In this domain: through `$JS.<domain>.API`.
    Domain(&'static str),
}

/// A rewrite of the subjects a stream stores: a message captured on a subject matching `src`
/// is stored under `dest` (a subject mapping, as in `{{wildcard(1)}}`).
///
/// ```
/// use topology_core::model::{StreamDecl, SubjectTransform};
///
/// const EVENTS: StreamDecl = StreamDecl::new("EVENTS", &["in.>"])
///     .subject_transform(SubjectTransform::new("in.>", "events.>"));
/// assert_eq!(EVENTS.subject_transform.unwrap().dest, "events.>");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SubjectTransform {
    /// The subjects rewritten.
    pub src: &'static str,
    /// What they become.
    pub dest: &'static str,
}

impl SubjectTransform {
    /// Rewrites subjects matching `src` to `dest`.
    pub const fn new(src: &'static str, dest: &'static str) -> Self {
        SubjectTransform { src, dest }
    }
}

/// How a queue consumer's messages are split into partitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Partitioning {
    /// How many partitions: fixed for the group (see [`PARTITIONS`](crate::partition::PARTITIONS)).
    pub partitions: u16,
    /// The key: the positions (from 1) of the subject's `*` tokens it is made of, in the
    /// order the stream's `{{partition(..)}}` names them.
    pub key: &'static [u8],
}

impl Partitioning {
    /// `partitions` partitions, keyed by the subject's `*` tokens at `key` (from 1).
    pub const fn new(partitions: u16, key: &'static [u8]) -> Self {
        Partitioning { partitions, key }
    }
}

/// What kind of consumer a declaration makes.
// A queue's settings outweigh a relay's, but declarations are `static`s built in const
// context (nothing to box there) and read in place, never moved on a hot path.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConsumerKind {
    /// Shared work: one durable for all instances; each message handled by one instance.
    Queue(QueueDecl),
    /// Fan-out: an ephemeral consumer per instance; every instance handles every message.
    Broadcast(BroadcastDecl),
}

/// The settings of a queue consumer (`#[queue_consumer]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QueueDecl {
    /// The durable name shared by every instance.
    pub group: &'static str,
    /// Pull (default) or push with `deliver_group = group`.
    pub delivery: Delivery,
    /// Maximum deliveries of one message before it is dead-lettered.
    pub max_deliver: Option<i64>,
    /// How long the server waits for an ack before redelivering.
    pub ack_wait: Option<Duration>,
    /// Redelivery delays, one per attempt (the last repeats).
    pub backoff: &'static [Duration],
    /// Maximum unacknowledged messages across all instances.
    pub max_ack_pending: Option<i64>,
    /// How many pull requests may wait at the consumer at once, all instances' together
    /// (`None`: [`DEFAULT_MAX_WAITING`] for a pull
    /// consumer the runtime creates). The server cannot change it on an existing consumer.
    pub max_waiting: Option<i64>,
    /// Subject to publish dead letters to.
    pub dead_letter: Option<&'static str>,
    /// A previous consumer to migrate from, losslessly.
    pub migrate_from: Option<&'static str>,
    /// With `migrate_from` on a partitioned consumer: the old group is partitioned too, into
    /// this many partitions (`<migrate_from>-p0` ..), read to their end before this group's
    /// partitions start (a partition count changes so).
    pub migrate_from_partitions: Option<u16>,
    /// A description stored on the server.
    pub description: Option<&'static str>,
    /// When a handled message counts as handled (`None`: the runtime's default, see
    /// `RuntimeBuilder::ack`).
    pub ack: Option<AckMode>,
    /// Which instance the server delivers to (priority groups, nats-server 2.11+); `None`:
    /// any instance that pulls.
    pub priority: Option<Priority>,
    /// Messages handled in batches (`None`: one at a time).
    pub batch: Option<BatchDecl>,
    /// Partitioned by key: the messages of one key handled one at a time, in stream order
    /// (see [`partition`](crate::partition)).
    pub partitioned: Option<Partitioning>,
}

impl QueueDecl {
    /// A pull queue consumer with the given group and server defaults for everything else.
    pub const fn new(group: &'static str) -> Self {
        QueueDecl {
            group,
            delivery: Delivery::Pull,
            max_deliver: None,
            ack_wait: None,
            backoff: &[],
            max_ack_pending: None,
            max_waiting: None,
            dead_letter: None,
            migrate_from: None,
            migrate_from_partitions: None,
            description: None,
            ack: None,
            priority: None,
            batch: None,
            partitioned: None,
        }
    }
    /// Sets how messages are received (pull or push).
    pub const fn delivery(mut self, delivery: Delivery) -> Self {
        self.delivery = delivery;
        self
    }
    /// Sets the maximum deliveries of one message.
    pub const fn max_deliver(mut self, max_deliver: i64) -> Self {
        self.max_deliver = Some(max_deliver);
        self
    }
    /// Sets how long the server waits for an ack before redelivering.
    pub const fn ack_wait(mut self, ack_wait: Duration) -> Self {
        self.ack_wait = Some(ack_wait);
        self
    }
    /// Sets the redelivery delays, one per attempt.
    pub const fn backoff(mut self, backoff: &'static [Duration]) -> Self {
        self.backoff = backoff;
        self
    }
    /// Sets the maximum unacknowledged messages across all instances.
    pub const fn max_ack_pending(mut self, max_ack_pending: i64) -> Self {
        self.max_ack_pending = Some(max_ack_pending);
        self
    }
    /// Sets how many pull requests may wait at the consumer at once, all instances' together
    /// (a fleet needs more than its replicas times the requests each keeps open).
    pub const fn max_waiting(mut self, max_waiting: i64) -> Self {
        self.max_waiting = Some(max_waiting);
        self
    }
    /// The consumer a migration pauses and moves from (`migrate_from`), unless this consumer
    /// is partitioned: a partitioned group reads the old consumer to its end beside its
    /// partitions and deletes it instead, so nothing pauses it.
    pub const fn moves_from(&self) -> Option<&'static str> {
        match self.partitioned {
            Some(_) => None,
            None => self.migrate_from,
        }
    }
    /// Sets the subject dead letters are published to.
    pub const fn dead_letter(mut self, subject: &'static str) -> Self {
        self.dead_letter = Some(subject);
        self
    }
    /// Sets the previous consumer to migrate from.
    pub const fn migrate_from(mut self, consumer: &'static str) -> Self {
        self.migrate_from = Some(consumer);
        self
    }
    /// The group migrated from (`migrate_from`) is partitioned, into `partitions`: its
    /// partitions are read to their end, each in order, before this group's start.
    pub const fn migrate_from_partitions(mut self, partitions: u16) -> Self {
        self.migrate_from_partitions = Some(partitions);
        self
    }
    /// Sets the description.
    pub const fn description(mut self, description: &'static str) -> Self {
        self.description = Some(description);
        self
    }
    /// Sets when a handled message counts as handled.
    pub const fn ack(mut self, ack: AckMode) -> Self {
        self.ack = Some(ack);
        self
    }
    /// One instance consumes, the others stand by; another is pinned when the pinned one has
    /// not pulled for `ttl` (see [`Priority::PinnedClient`]).
    pub const fn pinned_client(mut self, ttl: Duration) -> Self {
        self.priority = Some(Priority::PinnedClient { ttl });
        self
    }
    /// Partitioned by key: `partitions` partitions, keyed by the subject's `*` tokens at
    /// positions `key` (from 1); see [`partition`](crate::partition).
    pub const fn partitioned(mut self, partitions: u16, key: &'static [u8]) -> Self {
        self.partitioned = Some(Partitioning::new(partitions, key));
        self
    }
    /// Spill-over instances take work only past the thresholds (see [`Priority::Overflow`]).
    pub const fn overflow(mut self, thresholds: Overflow) -> Self {
        self.priority = Some(Priority::Overflow(thresholds));
        self
    }
    /// The handler gets its messages in batches (see [`BatchDecl`]).
    pub const fn batch(mut self, batch: BatchDecl) -> Self {
        self.batch = Some(batch);
        self
    }
}

/// Which instance of a queue consumer the server delivers to.
///
/// ```
/// use core::time::Duration;
/// use topology_core::model::{Overflow, Priority, QueueDecl};
///
/// // One instance consumes; another takes over 10 s after it stops pulling.
/// const ACTIVE_STANDBY: QueueDecl = QueueDecl::new("sync").pinned_client(Duration::from_secs(10));
/// // Spill-over instances take work only while 100 messages or more wait.
/// const SPILL: QueueDecl = QueueDecl::new("bulk").overflow(Overflow::new().min_pending(100));
/// assert!(matches!(ACTIVE_STANDBY.priority, Some(Priority::PinnedClient { .. })));
/// assert_eq!(SPILL.priority, Some(Priority::Overflow(Overflow { min_pending: Some(100), min_ack_pending: None })));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Priority {
    /// One instance consumes; the others stand by (ready, holding pull requests the server
    /// does not serve). The server moves the pin when the pinned instance has sent no pull
    /// request for `ttl`, or at once when it unpins (the runtime does on a drain).
    PinnedClient {
        /// How long the pinned instance may go without pulling before another is pinned
        /// (the consumer's `priority_timeout`).
        ttl: Duration,
    },
    /// Every instance pulls; a spill-over instance (see `RuntimeBuilder::spill_over`) is
    /// delivered to only while the backlog reaches one of these thresholds.
    Overflow(Overflow),
}

/// The thresholds of a spill-over instance: it is delivered to only while the consumer has at
/// least `min_pending` messages not yet delivered, or at least `min_ack_pending` delivered and
/// unacknowledged (either suffices).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Overflow {
    /// Messages not yet delivered.
    pub min_pending: Option<i64>,
    /// Messages delivered and not yet acknowledged.
    pub min_ack_pending: Option<i64>,
}

impl Overflow {
    /// No threshold yet (a declaration needs at least one).
    pub const fn new() -> Self {
        Overflow {
            min_pending: None,
            min_ack_pending: None,
        }
    }
    /// Sets the backlog of undelivered messages from which spill-over instances take work.
    pub const fn min_pending(mut self, n: i64) -> Self {
        self.min_pending = Some(n);
        self
    }
    /// Sets the number of unacknowledged messages from which spill-over instances take work.
    pub const fn min_ack_pending(mut self, n: i64) -> Self {
        self.min_ack_pending = Some(n);
        self
    }
}

impl Priority {
    /// The policy's name in the server's configuration (`priority_policy`).
    pub const fn policy(&self) -> &'static str {
        match self {
            Priority::PinnedClient { .. } => "pinned_client",
            Priority::Overflow(_) => "overflow",
        }
    }
}

/// How a queue consumer's handler receives its messages in batches.
///
/// ```
/// use core::time::Duration;
/// use topology_core::batch::BatchDecl;
/// use topology_core::model::QueueDecl;
///
/// const BILLING: QueueDecl = QueueDecl::new("billing").batch(BatchDecl::new(50));
/// const SLOW: QueueDecl =
///     QueueDecl::new("audit").batch(BatchDecl::new(500).wait(Duration::from_secs(1)));
/// assert_eq!(BILLING.batch.unwrap().wait, BatchDecl::DEFAULT_WAIT);
/// assert_eq!(SLOW.batch.unwrap().size, 500);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BatchDecl {
    /// The most messages one call of the handler gets.
    pub size: u32,
    /// How long the first message of a batch waits for the others before the handler runs
    /// with what arrived.
    pub wait: Duration,
}

impl BatchDecl {
    /// How long a batch waits to fill when no `batch_wait` is declared.
    pub const DEFAULT_WAIT: Duration = Duration::from_millis(100);

    /// Batches of up to `size` messages, waiting [`BatchDecl::DEFAULT_WAIT`] to fill.
    pub const fn new(size: u32) -> Self {
        BatchDecl {
            size,
            wait: Self::DEFAULT_WAIT,
        }
    }

    /// Sets how long a batch waits to fill.
    pub const fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }
}

/// The settings of a broadcast relay (`#[broadcast]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BroadcastDecl {
    /// Where the relay starts.
    pub deliver: DeliverPolicy,
    /// The key-value bucket whose changes this relay hands to a `#[kv_watch]` handler
    /// (`None`: a `#[broadcast]`): it handles one change at a time, in revision order.
    pub kv_watch: Option<&'static str>,
    /// An ordered replay (`#[broadcast(ordered)]`): every instance rebuilds from the start
    /// of the stream, one message at a time in stream order, each handled once; a gap in
    /// what the server delivers, or a handler failure, restarts the relay after the last
    /// message handled.
    pub ordered: bool,
}

impl BroadcastDecl {
    /// A relay that receives messages published after it starts.
    pub const fn new() -> Self {
        BroadcastDecl {
            deliver: DeliverPolicy::New,
            kv_watch: None,
            ordered: false,
        }
    }
    /// Makes the relay an ordered replay, from the start of the stream unless
    /// [`deliver`](Self::deliver) says `LastPerSubject` (see the `ordered` field).
    pub const fn ordered(mut self) -> Self {
        self.ordered = true;
        if matches!(self.deliver, DeliverPolicy::New) {
            self.deliver = DeliverPolicy::All;
        }
        self
    }
    /// Whether messages are handled one at a time in stream order: an ordered replay or a
    /// key-value watch.
    pub const fn in_order(&self) -> bool {
        self.ordered || self.kv_watch.is_some()
    }
    /// What `plan` and health call the relay: `"ordered replay"` or `"relay"`.
    pub const fn noun(&self) -> &'static str {
        if self.ordered {
            "ordered replay"
        } else {
            "relay"
        }
    }
    /// Makes the relay a watch of the key-value bucket `bucket` (see [`crate::watch`]).
    pub const fn kv_watch(mut self, bucket: &'static str) -> Self {
        self.kv_watch = Some(bucket);
        self
    }
    /// Sets where the relay starts.
    pub const fn deliver(mut self, deliver: DeliverPolicy) -> Self {
        self.deliver = deliver;
        self
    }
}

impl Default for BroadcastDecl {
    fn default() -> Self {
        Self::new()
    }
}

/// A consumer declaration: which stream, which subjects, what kind, which handler.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConsumerDecl {
    /// The handler's path (`module::function`), for reports and logs.
    pub handler: &'static str,
    /// The stream the consumer reads.
    pub stream: StreamRef,
    /// Filter subjects; empty means the whole stream.
    pub subjects: &'static [&'static str],
    /// Queue or broadcast, with their settings.
    pub kind: ConsumerKind,
    /// Maximum messages handled at once by this instance (default 1).
    pub concurrency: Option<u32>,
    /// The version of the service declaring it, stamped on the server (the macros set the
    /// declaring crate's `CARGO_PKG_VERSION`); `None`: the runtime's version, else a hash of
    /// the declaration.
    pub version: Option<&'static str>,
    /// The subjects the handler publishes to (with `Context::publish`; patterns with `*` and
    /// `>` allowed): what the generated permissions grant it, and nothing else, besides its
    /// `dead_letter`. Empty: it publishes nothing.
    pub publishes: &'static [&'static str],
    /// How its payloads are written: what the handler decodes, what its `Content-Type`
    /// accepts and what the export states.
    pub codec: CodecId,
}

impl ConsumerDecl {
    /// The concurrency applied when none is declared.
    pub const DEFAULT_CONCURRENCY: u32 = 1;

    /// A queue consumer of `stream` handled by `handler`.
    pub const fn queue(handler: &'static str, stream: StreamRef, queue: QueueDecl) -> Self {
        ConsumerDecl {
            handler,
            stream,
            subjects: &[],
            kind: ConsumerKind::Queue(queue),
            concurrency: None,
            version: None,
            publishes: &[],
            codec: CodecId::Json,
        }
    }
    /// A broadcast relay of `stream` handled by `handler`.
    pub const fn broadcast(handler: &'static str, stream: StreamRef, relay: BroadcastDecl) -> Self {
        ConsumerDecl {
            handler,
            stream,
            subjects: &[],
            kind: ConsumerKind::Broadcast(relay),
            concurrency: None,
            version: None,
            publishes: &[],
            codec: CodecId::Json,
        }
    }
    /// Sets the filter subjects.
    pub const fn subjects(mut self, subjects: &'static [&'static str]) -> Self {
        self.subjects = subjects;
        self
    }
    /// Sets the concurrency.
    pub const fn concurrency(mut self, concurrency: u32) -> Self {
        self.concurrency = Some(concurrency);
        self
    }
    /// Sets the payload codec (JSON unless declared).
    pub const fn codec(mut self, codec: CodecId) -> Self {
        self.codec = codec;
        self
    }
    /// Sets the declaring service's version, stamped on the server's consumer.
    pub const fn version(mut self, version: &'static str) -> Self {
        self.version = Some(version);
        self
    }
    /// Declares the subjects the handler publishes to (its outputs): the service's generated
    /// permissions grant publishing there, needed by this consumer. Patterns with `*` and `>`
    /// are allowed (`"orders.*.billed"`), as nats-server matches permissions.
    ///
    /// ```
    /// use topology_core::model::{ConsumerDecl, QueueDecl, StreamDecl, StreamRef};
    ///
    /// static ORDERS: StreamDecl = StreamDecl::new("ORDERS", &["orders.>"]);
    /// const BILLING: ConsumerDecl = ConsumerDecl::queue(
    ///     "billing::on_order",
    ///     StreamRef::Declared(&ORDERS),
    ///     QueueDecl::new("billing"),
    /// )
    /// .subjects(&["orders.created"])
    /// .publishes(&["orders.billed"]);
    /// assert_eq!(BILLING.publishes, ["orders.billed"]);
    /// ```
    pub const fn publishes(mut self, subjects: &'static [&'static str]) -> Self {
        self.publishes = subjects;
        self
    }
    /// The concurrency in effect: as declared, else one batch for a batch consumer, else
    /// [`ConsumerDecl::DEFAULT_CONCURRENCY`].
    pub const fn effective_concurrency(&self) -> u32 {
        match (self.concurrency, &self.kind) {
            (Some(n), _) => n,
            (
                None,
                ConsumerKind::Queue(QueueDecl {
                    batch: Some(batch), ..
                }),
            ) => batch.size,
            (None, _) => Self::DEFAULT_CONCURRENCY,
        }
    }
    /// The queue settings, if this is a queue consumer.
    pub const fn as_queue(&self) -> Option<&QueueDecl> {
        match &self.kind {
            ConsumerKind::Queue(q) => Some(q),
            ConsumerKind::Broadcast(_) => None,
        }
    }
}
