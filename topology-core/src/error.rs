//! Why a declaration is invalid: the errors of the stream and consumer checks of
//! [`rules`](crate::rules), and of the parts a consumer check covers (priority groups, batches,
//! ordered replays), each with its `const fn message`.

use crate::limits::DESCRIPTION_TOO_LONG;
use crate::names::NameError;
use crate::subject::SubjectError;
use crate::transform::TransformError;

/// Why a stream declaration is invalid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StreamError {
    /// The stream name.
    Name(NameError),
    /// No subjects.
    NoSubjects,
    /// The subject at `index`.
    Subject {
        /// Its position in `subjects`.
        index: usize,
        /// What is wrong with it.
        error: SubjectError,
    },
    /// The subjects at `first` and `second` overlap (the server refuses overlapping subjects in
    /// one stream).
    SubjectsOverlap {
        /// The earlier one.
        first: usize,
        /// The later one.
        second: usize,
    },
    /// `replicas` outside [`REPLICAS`](crate::rules::REPLICAS).
    Replicas,
    /// `max_msgs` outside [`MAX_MSGS`](crate::rules::MAX_MSGS).
    MaxMsgs,
    /// `max_bytes` outside [`MAX_BYTES`](crate::rules::MAX_BYTES).
    MaxBytes,
    /// `max_msg_size` outside [`MAX_MSG_SIZE`](crate::rules::MAX_MSG_SIZE).
    MaxMsgSize,
    /// `max_age` is zero or too long.
    MaxAge,
    /// `duplicate_window` is zero or too long.
    DuplicateWindow,
    /// `duplicate_window` is longer than `max_age`.
    DuplicateWindowExceedsMaxAge,
    /// The description is longer than [`MAX_DESCRIPTION_LEN`](crate::rules::MAX_DESCRIPTION_LEN).
    DescriptionTooLong,
    /// Settings on an external stream, which is never created or changed here.
    ExternalWithSettings,
    /// A placement with neither a cluster nor a tag.
    PlacementEmpty,
    /// A placement's cluster name or a tag is empty or has whitespace (see
    /// [`placement_name_ok`](crate::rules::placement_name_ok)).
    PlacementName,
    /// A mirror that declares subjects: it holds its origin's.
    MirrorWithSubjects,
    /// Both a mirror and sources: a mirror copies one stream as it is.
    MirrorAndSources,
    /// The stream is its own mirror or one of its own sources.
    NamesItself,
    /// An origin's stream name is not a valid stream name.
    OriginName,
    /// An origin's `filter`, or a `transform` / `subject_transform` subject, is not a valid
    /// subject filter, or a transform's destination is empty.
    OriginSubject,
    /// An origin with both `domain` and `api_prefix`: the domain is a shorthand for the prefix.
    OriginDomainAndPrefix,
    /// A subject transform nats-server refuses (see [`crate::transform`]).
    Transform {
        /// Which transform: the stream's own, its mirror's or a source's.
        site: TransformSite,
        /// What is wrong with it.
        error: TransformError,
    },
}

/// Where a stream declares a subject transform.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TransformSite {
    /// Its `subject_transform`.
    Stream,
    /// Its mirror's `transform`.
    Mirror,
    /// The `transform` of its source at this index.
    Source(usize),
}

impl TransformSite {
    /// The attribute key it is written under.
    pub const fn key(&self) -> &'static str {
        match self {
            TransformSite::Stream => "subject_transform",
            TransformSite::Mirror => "mirror",
            TransformSite::Source(_) => "sources",
        }
    }
}

impl StreamError {
    /// What is wrong, in lowercase.
    pub const fn message(&self) -> &'static str {
        match self {
            StreamError::Name(error) => error.message(),
            StreamError::NoSubjects => "a stream needs at least one subject",
            StreamError::Subject { error, .. } => error.message(),
            StreamError::SubjectsOverlap { .. } => {
                "the subjects of one stream cannot overlap; keep the wider one"
            }
            StreamError::Replicas => "replicas must be between 1 and 5",
            StreamError::MaxMsgs => "max_msgs must be at least 1; omit it for no limit",
            StreamError::MaxBytes => "max_bytes must be at least 1; omit it for no limit",
            StreamError::MaxMsgSize => {
                "max_msg_size must be between 1 and 2147483647; omit it for the server's limit"
            }
            StreamError::MaxAge => {
                "max_age must be more than zero and at most about 292 years; omit it for no limit"
            }
            StreamError::DuplicateWindow => {
                "duplicate_window must be more than zero and at most about 292 years"
            }
            StreamError::DuplicateWindowExceedsMaxAge => {
                "duplicate_window cannot be longer than max_age"
            }
            StreamError::DescriptionTooLong => DESCRIPTION_TOO_LONG,
            StreamError::PlacementEmpty => {
                "a placement needs a cluster, tags or both, as in `placement = { cluster = \"east\", tags = [\"ssd\"] }`; omit it to let the server choose"
            }
            StreamError::PlacementName => {
                "a placement's cluster and tags must be non-empty and without whitespace; tags are matched as written in the servers' `server_tags` (case-insensitively)"
            }
            StreamError::MirrorWithSubjects => {
                "a mirror declares no subjects: it holds the messages of the stream it mirrors (narrow them with the mirror's `filter`); remove `subjects`"
            }
            StreamError::MirrorAndSources => {
                "a stream is either a mirror (a copy of one stream) or has sources (an aggregate of several), not both; use `sources = [..]` to aggregate"
            }
            StreamError::NamesItself => {
                "a stream cannot be its own mirror or source; name another stream (or the same name in another `domain`)"
            }
            StreamError::OriginName => {
                "the stream mirrored or sourced must have a valid stream name (letters, digits, `-` and `_`)"
            }
            StreamError::OriginSubject => {
                "a mirror's or source's `filter` and a `subject_transform`'s `src` must be valid subject filters, and a transform's destination must not be empty"
            }
            StreamError::OriginDomainAndPrefix => {
                "give a mirror or source either `domain` (its API is `$JS.<domain>.API`) or `api_prefix`, not both"
            }
            StreamError::ExternalWithSettings => {
                "an external stream is never created or changed here, so it takes no settings but its name, subjects and retention"
            }
            StreamError::Transform { error, .. } => error.message(),
        }
    }
}

/// Why a consumer declaration is invalid (on its own, whatever its stream).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConsumerError {
    /// The stream name of a `StreamRef::Named`.
    StreamName(NameError),
    /// The queue group (the durable name).
    Group(NameError),
    /// The filter subject at `index`.
    Subject {
        /// Its position in `subjects`.
        index: usize,
        /// What is wrong with it.
        error: SubjectError,
    },
    /// The filters at `first` and `second` overlap (the server refuses overlapping filters in
    /// one consumer).
    SubjectsOverlap {
        /// The earlier one.
        first: usize,
        /// The later one.
        second: usize,
    },
    /// `concurrency` outside [`CONCURRENCY`](crate::rules::CONCURRENCY).
    Concurrency,
    /// `max_deliver` outside [`MAX_DELIVER`](crate::rules::MAX_DELIVER).
    MaxDeliver,
    /// `max_ack_pending` outside [`MAX_ACK_PENDING`](crate::rules::MAX_ACK_PENDING).
    MaxAckPending,
    /// `max_waiting` outside [`MAX_WAITING`](crate::rules::MAX_WAITING).
    MaxWaiting,
    /// `max_waiting` on a push consumer, which has no wait list.
    MaxWaitingOnPush,
    /// `ack_wait` is zero or too long.
    AckWait,
    /// The backoff step at `index` is zero or too long.
    Backoff {
        /// Its position in `backoff`.
        index: usize,
    },
    /// More backoff steps than `max_deliver`.
    BackoffLongerThanMaxDeliver,
    /// The dead-letter subject.
    DeadLetter(SubjectError),
    /// The subject at `index` of what the handler publishes to (`publishes`).
    Publishes {
        /// Its position in `publishes`.
        index: usize,
        /// What is wrong with it.
        error: SubjectError,
    },
    /// Dead letters would match the consumer's own filters.
    DeadLetterLoops,
    /// The consumer to migrate from.
    MigrateFrom(NameError),
    /// `migrate_from` names the group itself.
    MigrateFromItself,
    /// The description is longer than [`MAX_DESCRIPTION_LEN`](crate::rules::MAX_DESCRIPTION_LEN).
    DescriptionTooLong,
    /// The priority group settings.
    Priority(PriorityError),
    /// The batch settings.
    Batch(BatchError),
    /// The partitioning of a partitioned queue consumer.
    Partition(PartitionError),
    /// An ordered replay with a `concurrency` above 1.
    OrderedConcurrency,
    /// An ordered replay that starts with new messages, or the last one only.
    OrderedDeliver,
}

impl ConsumerError {
    /// What is wrong, in lowercase.
    pub const fn message(&self) -> &'static str {
        match self {
            ConsumerError::StreamName(error)
            | ConsumerError::Group(error)
            | ConsumerError::MigrateFrom(error) => error.message(),
            ConsumerError::Subject { error, .. }
            | ConsumerError::DeadLetter(error)
            | ConsumerError::Publishes { error, .. } => error.message(),
            ConsumerError::SubjectsOverlap { .. } => {
                "the filter subjects of one consumer cannot overlap; keep the wider one"
            }
            ConsumerError::Concurrency => "concurrency must be at least 1",
            ConsumerError::MaxDeliver => {
                "max_deliver must be at least 1; omit it for unlimited deliveries"
            }
            ConsumerError::MaxAckPending => {
                "max_ack_pending must be at least 1; omit it for the server's default"
            }
            ConsumerError::MaxWaiting => {
                "max_waiting must be 1 to 100000 (the server reserves room for that many pull requests); omit it for 4096"
            }
            ConsumerError::MaxWaitingOnPush => {
                "a push consumer has no wait list: max_waiting applies to pull delivery; remove it, or remove `delivery = \"push\"`"
            }
            ConsumerError::AckWait => "ack_wait must be more than zero and at most about 292 years",
            ConsumerError::Backoff { .. } => {
                "a backoff step must be more than zero and at most about 292 years"
            }
            ConsumerError::BackoffLongerThanMaxDeliver => {
                "backoff has more steps than max_deliver allows deliveries; the server refuses it"
            }
            ConsumerError::DeadLetterLoops => {
                "dead letters would be delivered to the same consumer again, forever"
            }
            ConsumerError::MigrateFromItself => {
                "migrate_from names the consumer's own group; name the previous consumer"
            }
            ConsumerError::DescriptionTooLong => DESCRIPTION_TOO_LONG,
            ConsumerError::Priority(error) => error.message(),
            ConsumerError::Partition(error) => error.message(),
            ConsumerError::Batch(error) => error.message(),
            ConsumerError::OrderedConcurrency => ORDERED_CONCURRENCY,
            ConsumerError::OrderedDeliver => ORDERED_DELIVER,
        }
    }
}

/// Why a consumer cannot read the stream it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FitError {
    /// The filter subject at `index` is not covered by the stream's subjects.
    SubjectNotCovered {
        /// Its position in the consumer's `subjects`.
        index: usize,
    },
    /// A broadcast on a work-queue stream.
    BroadcastOnWorkQueue,
    /// A deliver policy other than `all` on a work-queue stream.
    DeliverPolicyOnWorkQueue,
    /// Dead letters would be published into the stream the consumer reads in full.
    DeadLetterLoops,
}

impl FitError {
    /// What is wrong, in lowercase.
    pub const fn message(&self) -> &'static str {
        match self {
            FitError::SubjectNotCovered { .. } => {
                "the filter subject is not covered by the stream's subjects, so it would never receive a message"
            }
            FitError::BroadcastOnWorkQueue => {
                "a work-queue stream hands each message to one consumer and allows only the deliver policy `all`, so it cannot carry a broadcast; use a queue consumer, or a stream with `limits` or `interest` retention"
            }
            FitError::DeliverPolicyOnWorkQueue => {
                "a consumer of a work-queue stream must deliver all messages (deliver policy `all`)"
            }
            FitError::DeadLetterLoops => {
                "dead letters would be published into the stream this consumer reads in full, and delivered to it again, forever"
            }
        }
    }
}

/// What is wrong with a priority declaration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PriorityError {
    /// A pinned ttl shorter than [`MIN_PINNED_TTL`](crate::priority::MIN_PINNED_TTL), or too long.
    PinnedTtl,
    /// Overflow without `min_pending` nor `min_ack_pending`.
    OverflowWithoutThreshold,
    /// A threshold below 1.
    Threshold,
    /// Priority groups on a push consumer (the server refuses it).
    Push,
}

impl PriorityError {
    /// What is wrong, in lowercase.
    pub const fn message(&self) -> &'static str {
        match self {
            PriorityError::PinnedTtl => {
                "pinned_ttl must be at least 1s (the pinned instance renews its pin by asking again within half of it) and at most about 292 years"
            }
            PriorityError::OverflowWithoutThreshold => {
                "overflow needs a threshold: `min_pending` or `min_ack_pending` (spill-over instances take work only past it)"
            }
            PriorityError::Threshold => "min_pending and min_ack_pending must be at least 1",
            PriorityError::Push => {
                "priority groups are for pull consumers; the server refuses them on a push consumer"
            }
        }
    }
}

/// What is wrong with a partitioned queue consumer (`key`, `partitions`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PartitionError {
    /// A partition count outside [`PARTITIONS`](crate::partition::PARTITIONS).
    Count,
    /// A key of no token.
    EmptyKey,
    /// A key token the subject does not have: position `position` (from 1) of a subject
    /// with `wildcards` `*` tokens.
    KeyPastWildcards {
        /// The position named.
        position: u8,
        /// How many `*` tokens the subject has.
        wildcards: u8,
    },
    /// A key naming one token twice.
    KeyRepeated {
        /// The position named twice.
        position: u8,
    },
    /// Not exactly one filter subject.
    OneSubject,
    /// A push consumer.
    Push,
    /// A priority policy of its own.
    Priority,
    /// A `max_ack_pending` of its own.
    MaxAckPending,
    /// A batch handler.
    Batch,
    /// A `concurrency` of its own.
    Concurrency,
    /// `migrate_from_partitions` without `migrate_from`, or on a consumer that is not
    /// partitioned.
    MigrateFromPartitionsAlone,
    /// `migrate_from_partitions` outside [`PARTITIONS`](crate::partition::PARTITIONS).
    MigrateFromPartitionsCount,
}

impl PartitionError {
    /// What is wrong, in lowercase.
    pub const fn message(&self) -> &'static str {
        match self {
            PartitionError::Count => {
                "partitions must be 1 to 1024 (each partition is a consumer on the server; the count is fixed for the group)"
            }
            PartitionError::EmptyKey => {
                "the key names no subject token: write the positions of the subject's `*` tokens it is made of, e.g. `key = \"{1}\"`"
            }
            PartitionError::KeyPastWildcards { .. } => {
                "the key names a `*` token the subject does not have: the key is made of the subject's `*` tokens, counted from 1 (a subject without `*` has no key)"
            }
            PartitionError::KeyRepeated { .. } => "the key names one subject token twice",
            PartitionError::OneSubject => {
                "a partitioned consumer reads one subject, the one the stream's `{{partition(..)}}` transform routes"
            }
            PartitionError::Push => {
                "partitions are pulled (each by the one replica the server pins); remove `delivery = \"push\"`"
            }
            PartitionError::Priority => {
                "each partition is already a pinned client (one replica at a time); remove `priority`"
            }
            PartitionError::MaxAckPending => {
                "each partition delivers one message at a time (that is the order per key); remove `max_ack_pending`"
            }
            PartitionError::Batch => {
                "a partitioned consumer handles messages one at a time per partition; remove `batch`"
            }
            PartitionError::Concurrency => {
                "a replica handles one message at a time per partition it holds, so its share of the partitions is its concurrency; remove `concurrency` (more partitions give more parallelism)"
            }
            PartitionError::MigrateFromPartitionsAlone => {
                "`migrate_from_partitions` says how many partitions the group named by `migrate_from` has, when a partitioned group moves to a new partition count: write it beside `migrate_from`, `key` and `partitions`, or remove it"
            }
            PartitionError::MigrateFromPartitionsCount => {
                "`migrate_from_partitions` must be 1 to 1024: the partition count of the group named by `migrate_from`"
            }
        }
    }
}

/// What is wrong with a batch declaration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BatchError {
    /// `size` outside [`BATCH_SIZE`](crate::batch::BATCH_SIZE).
    Size,
    /// `wait` is zero or too long.
    Wait,
    /// A declared `concurrency` below the batch size: no batch could fill.
    ConcurrencyBelowSize,
    /// A declared `max_ack_pending` below the batch size: the server would never deliver a
    /// whole batch.
    MaxAckPendingBelowSize,
}

impl BatchError {
    /// What is wrong, in lowercase, with what to do.
    pub const fn message(&self) -> &'static str {
        match self {
            BatchError::Size => "a batch holds at least 1 and at most 10000 messages",
            BatchError::Wait => {
                "batch_wait must be more than zero and at most about 292 years; omit it for 100ms"
            }
            BatchError::ConcurrencyBelowSize => {
                "a batch consumer holds a whole batch at once, so its concurrency (counted in messages) must be at least the batch size: omit it for one batch at a time, or set a multiple of the batch size to run that many batches at once"
            }
            BatchError::MaxAckPendingBelowSize => {
                "the server would never deliver a whole batch: raise max_ack_pending to at least the batch size times the replicas, or omit it"
            }
        }
    }
}

/// Why an ordered replay takes no `concurrency` above 1.
pub const ORDERED_CONCURRENCY: &str = "an ordered replay handles one message at a time, in stream order; remove `concurrency`, or drop `ordered` for a relay whose messages may be handled in any order";

/// Why an ordered replay starts from the stream's messages.
pub const ORDERED_DELIVER: &str = "an ordered replay rebuilds from what the stream holds: `deliver` is `\"all\"` (the default with `ordered`) or `\"last_per_subject\"`; for a relay of new messages only, drop `ordered`";
