//! The rules of a valid declaration, and of a consumer reading a stream.
//!
//! The macros call the individual rules (ranges, [`backoff_fits`], [`duplicate_window_fits`],
//! [`dead_letter_loops`], [`allows_broadcast`], and the [`names`], [`subject`] and [`duration`]
//! rules) key by key, to put each error on its token; generated `const _` assertions call
//! [`covered_by`](crate::subject::covered_by), [`allows_broadcast`] and [`dead_letter_loops`]
//! for what needs another item; and the runtime calls [`check_stream`], [`check_consumer`] and
//! [`check_consumer_on_stream`], built from the same rules, on declarations built by hand or
//! naming a stream by string.
//!
//! ```
//! use topology_core::model::{ConsumerDecl, QueueDecl, StreamDecl, StreamRef};
//! use topology_core::rules::{check_consumer, check_consumer_on_stream, check_stream, FitError};
//!
//! static ORDERS: StreamDecl = StreamDecl::new("ORDERS", &["orders.>"]).replicas(3);
//! let consumer = ConsumerDecl::queue("billing::on_order", StreamRef::Named("ORDERS"), QueueDecl::new("billing"))
//!     .subjects(&["invoices.created"]);
//!
//! assert_eq!(check_stream(&ORDERS), Ok(()));
//! assert_eq!(check_consumer(&consumer), Ok(()));
//! assert_eq!(
//!     check_consumer_on_stream(&consumer, &ORDERS),
//!     Err(FitError::SubjectNotCovered { index: 0 }),
//! );
//! ```

use core::time::Duration;

pub use crate::error::{ConsumerError, FitError, StreamError, TransformSite};
pub use crate::limits::{
    CONCURRENCY, DEFAULT_MAX_WAITING, MAX_ACK_PENDING, MAX_BYTES, MAX_DELIVER, MAX_DESCRIPTION_LEN,
    MAX_MSG_SIZE, MAX_MSGS, MAX_WAITING, REPLICAS, description_fits,
};
pub use crate::prim::IntRange;

use crate::duration;
use crate::model::{
    ConsumerDecl, ConsumerKind, DeliverPolicy, Origin, Placement, Retention, StreamDecl,
};
use crate::names;
use crate::origin;
use crate::prim::str_eq;
use crate::subject;

/// Whether a backoff of `len` steps fits `max_deliver`: the server refuses more steps than
/// deliveries (`None`, no limit, accepts any number).
pub const fn backoff_fits(len: usize, max_deliver: Option<i64>) -> bool {
    match max_deliver {
        Some(max) => (len as i128) <= max as i128,
        None => true,
    }
}

/// Whether a duplicate window fits the stream's maximum age: the server refuses a window longer
/// than `max_age` (no `max_age`: any window).
pub const fn duplicate_window_fits(window: Duration, max_age: Option<Duration>) -> bool {
    match max_age {
        Some(max_age) => window.as_nanos() <= max_age.as_nanos(),
        None => true,
    }
}

/// Whether dead letters published to `dead_letter` would come back to the same consumer: they
/// match one of its `filters`, or, when it has none (it reads the whole stream), one of the
/// stream's subjects. Such a consumer would dead-letter its dead letters forever.
pub const fn dead_letter_loops(
    dead_letter: &str,
    filters: &[&str],
    stream_subjects: &[&str],
) -> bool {
    if filters.is_empty() {
        subject::covered_by(dead_letter, stream_subjects)
    } else {
        subject::covered_by(dead_letter, filters)
    }
}

/// Whether a stream with this retention can carry a broadcast. A work-queue stream removes a
/// message once one consumer acknowledges it, refuses overlapping consumers (server error
/// 10100) and any deliver policy but `all` (10101): every instance cannot receive every message.
pub const fn allows_broadcast(retention: Option<Retention>) -> bool {
    !matches!(retention, Some(Retention::WorkQueue))
}

/// Whether `filters` overlap each other: the index of the later of the first overlapping pair.
pub const fn first_overlap(filters: &[&str]) -> Option<(usize, usize)> {
    let mut j = 1;
    while j < filters.len() {
        let mut i = 0;
        while i < j {
            if subject::overlaps(filters[i], filters[j]) {
                return Some((i, j));
            }
            i += 1;
        }
        j += 1;
    }
    None
}

/// Checks a stream declaration.
pub const fn check_stream(decl: &StreamDecl) -> Result<(), StreamError> {
    if let Err(error) = names::check_stream_name(decl.name) {
        return Err(StreamError::Name(error));
    }
    if decl.mirror.is_some() && !decl.sources.is_empty() {
        return Err(StreamError::MirrorAndSources);
    }
    if decl.mirror.is_some() && !decl.subjects.is_empty() {
        return Err(StreamError::MirrorWithSubjects);
    }
    if decl.subjects.is_empty() && decl.mirror.is_none() && decl.sources.is_empty() {
        return Err(StreamError::NoSubjects);
    }
    if let Err(error) = check_origins(decl) {
        return Err(error);
    }
    let mut i = 0;
    while i < decl.subjects.len() {
        if let Err(error) = subject::check_filter(decl.subjects[i]) {
            return Err(StreamError::Subject { index: i, error });
        }
        i += 1;
    }
    if let Some((first, second)) = first_overlap(decl.subjects) {
        return Err(StreamError::SubjectsOverlap { first, second });
    }
    if decl.external && (has_settings(decl) || !decl.sources.is_empty()) {
        return Err(StreamError::ExternalWithSettings);
    }
    if let Some(n) = decl.replicas
        && !REPLICAS.contains(n as i128)
    {
        return Err(StreamError::Replicas);
    }
    if let Some(n) = decl.max_msgs
        && !MAX_MSGS.contains(n as i128)
    {
        return Err(StreamError::MaxMsgs);
    }
    if let Some(n) = decl.max_bytes
        && !MAX_BYTES.contains(n as i128)
    {
        return Err(StreamError::MaxBytes);
    }
    if let Some(n) = decl.max_msg_size
        && !MAX_MSG_SIZE.contains(n as i128)
    {
        return Err(StreamError::MaxMsgSize);
    }
    if let Some(d) = decl.max_age
        && (d.is_zero() || !duration::fits(d))
    {
        return Err(StreamError::MaxAge);
    }
    if let Some(d) = decl.duplicate_window {
        if d.is_zero() || !duration::fits(d) {
            return Err(StreamError::DuplicateWindow);
        }
        if !duplicate_window_fits(d, decl.max_age) {
            return Err(StreamError::DuplicateWindowExceedsMaxAge);
        }
    }
    if let Some(d) = decl.description
        && !description_fits(d)
    {
        return Err(StreamError::DescriptionTooLong);
    }
    if let Some(placement) = decl.placement {
        return check_placement(&placement);
    }
    Ok(())
}

/// Checks a placement: a cluster or tags, each a name the server can match.
pub const fn check_placement(placement: &Placement) -> Result<(), StreamError> {
    if placement.cluster.is_none() && placement.tags.is_empty() {
        return Err(StreamError::PlacementEmpty);
    }
    if let Some(cluster) = placement.cluster
        && !placement_name_ok(cluster)
    {
        return Err(StreamError::PlacementName);
    }
    let mut i = 0;
    while i < placement.tags.len() {
        if !placement_name_ok(placement.tags[i]) {
            return Err(StreamError::PlacementName);
        }
        i += 1;
    }
    Ok(())
}

/// A cluster name or a server tag: not empty, no whitespace or control characters.
pub const fn placement_name_ok(name: &str) -> bool {
    let bytes = name.as_bytes();
    if bytes.is_empty() {
        return false;
    }
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i].is_ascii_whitespace() || bytes[i].is_ascii_control() {
            return false;
        }
        i += 1;
    }
    true
}

/// Writes the settings an external stream cannot take once: as the keys of `#[stream]` (each
/// named as its field of [`StreamDecl`]) and as the check of a declaration.
macro_rules! external_refuses {
    ($($field:ident),* $(,)?) => {
        /// The keys of `#[stream]` that an external stream cannot take: it is never created or
        /// changed here, so only its `name`, `subjects` and `retention` are declared, for checks.
        /// Each is the name of a field of [`StreamDecl`] ([`check_stream`] refuses a declaration
        /// that sets one with [`StreamError::ExternalWithSettings`]).
        pub const EXTERNAL_REFUSED_KEYS: &[&str] = &[$(stringify!($field)),*];

        /// Whether a stream declaration sets anything an external stream cannot take.
        const fn has_settings(decl: &StreamDecl) -> bool {
            false $(|| decl.$field.is_some())*
        }
    };
}

external_refuses!(
    replicas,
    storage,
    max_age,
    max_msgs,
    max_bytes,
    max_msg_size,
    discard,
    duplicate_window,
    description,
    placement,
    mirror,
    subject_transform,
);

/// Checks a stream's mirror, sources and subject transform on their own: names and subjects
/// valid, not the stream itself. (Loops through other streams are found at start-up.)
pub const fn check_origins(decl: &StreamDecl) -> Result<(), StreamError> {
    if origin::names_itself(decl) {
        return Err(StreamError::NamesItself);
    }
    if let Some(mirror) = &decl.mirror {
        if let Err(error) = check_origin(mirror) {
            return Err(error);
        }
        if let Err(error) = check_origin_transform(mirror) {
            return Err(StreamError::Transform {
                site: TransformSite::Mirror,
                error,
            });
        }
    }
    let mut i = 0;
    while i < decl.sources.len() {
        if let Err(error) = check_origin(&decl.sources[i]) {
            return Err(error);
        }
        if let Err(error) = check_origin_transform(&decl.sources[i]) {
            return Err(StreamError::Transform {
                site: TransformSite::Source(i),
                error,
            });
        }
        i += 1;
    }
    if let Some(transform) = decl.subject_transform {
        if subject::check_filter(transform.src).is_err() || transform.dest.is_empty() {
            return Err(StreamError::OriginSubject);
        }
        if let Err(error) = crate::transform::check_transform(transform.src, transform.dest) {
            return Err(StreamError::Transform {
                site: TransformSite::Stream,
                error,
            });
        }
    }
    Ok(())
}

/// Checks a mirror's or source's `transform` of its `filter` (all of the origin without one) as
/// nats-server does.
pub const fn check_origin_transform(
    origin: &Origin,
) -> Result<(), crate::transform::TransformError> {
    match origin.transform {
        Some(dest) => {
            let src = match origin.filter {
                Some(filter) => filter,
                None => ">",
            };
            crate::transform::check_transform(src, dest)
        }
        None => Ok(()),
    }
}

/// Checks one mirror or source.
pub const fn check_origin(origin: &Origin) -> Result<(), StreamError> {
    if names::check_stream_name(origin.name()).is_err() {
        return Err(StreamError::OriginName);
    }
    if let Some(filter) = origin.filter
        && subject::check_filter(filter).is_err()
    {
        return Err(StreamError::OriginSubject);
    }
    if let Some(dest) = origin.transform
        && dest.is_empty()
    {
        return Err(StreamError::OriginSubject);
    }
    if origin.domain.is_some() && origin.api_prefix.is_some() {
        return Err(StreamError::OriginDomainAndPrefix);
    }
    Ok(())
}

/// Checks a consumer declaration on its own (see [`check_consumer_on_stream`] for the rules
/// that need its stream).
pub const fn check_consumer(decl: &ConsumerDecl) -> Result<(), ConsumerError> {
    if let crate::model::StreamRef::Named(name) = decl.stream
        && let Err(error) = names::check_stream_name(name)
    {
        return Err(ConsumerError::StreamName(error));
    }
    let mut i = 0;
    while i < decl.subjects.len() {
        if let Err(error) = subject::check_filter(decl.subjects[i]) {
            return Err(ConsumerError::Subject { index: i, error });
        }
        i += 1;
    }
    if let Some((first, second)) = first_overlap(decl.subjects) {
        return Err(ConsumerError::SubjectsOverlap { first, second });
    }
    if let Some(n) = decl.concurrency
        && !CONCURRENCY.contains(n as i128)
    {
        return Err(ConsumerError::Concurrency);
    }
    let mut i = 0;
    while i < decl.publishes.len() {
        if let Err(error) = subject::check_filter(decl.publishes[i]) {
            return Err(ConsumerError::Publishes { index: i, error });
        }
        i += 1;
    }
    let queue = match &decl.kind {
        ConsumerKind::Queue(queue) => queue,
        ConsumerKind::Broadcast(relay) => return crate::ordered::check_ordered(decl, relay),
    };
    if let Err(error) = names::check_consumer_name(queue.group) {
        return Err(ConsumerError::Group(error));
    }
    if let Some(n) = queue.max_deliver
        && !MAX_DELIVER.contains(n as i128)
    {
        return Err(ConsumerError::MaxDeliver);
    }
    if let Some(n) = queue.max_ack_pending
        && !MAX_ACK_PENDING.contains(n as i128)
    {
        return Err(ConsumerError::MaxAckPending);
    }
    if let Some(n) = queue.max_waiting {
        if !MAX_WAITING.contains(n as i128) {
            return Err(ConsumerError::MaxWaiting);
        }
        if matches!(queue.delivery, crate::model::Delivery::Push) {
            return Err(ConsumerError::MaxWaitingOnPush);
        }
    }
    if let Some(d) = queue.ack_wait
        && (d.is_zero() || !duration::fits(d))
    {
        return Err(ConsumerError::AckWait);
    }
    let mut i = 0;
    while i < queue.backoff.len() {
        let d = queue.backoff[i];
        if d.is_zero() || !duration::fits(d) {
            return Err(ConsumerError::Backoff { index: i });
        }
        i += 1;
    }
    if !backoff_fits(queue.backoff.len(), queue.max_deliver) {
        return Err(ConsumerError::BackoffLongerThanMaxDeliver);
    }
    if let Some(dead_letter) = queue.dead_letter {
        if let Err(error) = subject::check_subject(dead_letter) {
            return Err(ConsumerError::DeadLetter(error));
        }
        if !decl.subjects.is_empty() && dead_letter_loops(dead_letter, decl.subjects, &[]) {
            return Err(ConsumerError::DeadLetterLoops);
        }
    }
    if let Some(old) = queue.migrate_from {
        if let Err(error) = names::check_consumer_name(old) {
            return Err(ConsumerError::MigrateFrom(error));
        }
        if str_eq(old, queue.group) {
            return Err(ConsumerError::MigrateFromItself);
        }
    }
    if let Some(d) = queue.description
        && !description_fits(d)
    {
        return Err(ConsumerError::DescriptionTooLong);
    }
    if let Some(priority) = &queue.priority
        && let Err(error) = crate::priority::check_priority(priority, queue.delivery)
    {
        return Err(ConsumerError::Priority(error));
    }
    if let Some(batch) = &queue.batch
        && let Err(error) =
            crate::batch::check_batch(batch, decl.concurrency, queue.max_ack_pending)
    {
        return Err(ConsumerError::Batch(error));
    }
    if let Err(error) = crate::partition::check_partitioned_consumer(decl) {
        return Err(ConsumerError::Partition(error));
    }
    Ok(())
}

/// Checks what a consumer needs of its stream: its filters are covered by the stream's subjects,
/// a work-queue stream carries no broadcast and only deliver policy `all`, and dead letters do not
/// come back to it.
pub const fn check_consumer_on_stream(
    consumer: &ConsumerDecl,
    stream: &StreamDecl,
) -> Result<(), FitError> {
    check_consumer_among(consumer, stream, &[])
}

/// [`check_consumer_on_stream`], where the origins of a mirror or of sources named by string
/// are looked up in `declared` (see [`origin::delivers`]).
pub const fn check_consumer_among(
    consumer: &ConsumerDecl,
    stream: &StreamDecl,
    declared: &[&StreamDecl],
) -> Result<(), FitError> {
    let mut i = 0;
    while i < consumer.subjects.len() {
        if !origin::delivers(consumer.subjects[i], stream, declared) {
            return Err(FitError::SubjectNotCovered { index: i });
        }
        i += 1;
    }
    match &consumer.kind {
        ConsumerKind::Broadcast(relay) => {
            if !allows_broadcast(stream.retention) {
                return Err(if matches!(relay.deliver, DeliverPolicy::All) {
                    FitError::BroadcastOnWorkQueue
                } else {
                    FitError::DeliverPolicyOnWorkQueue
                });
            }
        }
        ConsumerKind::Queue(queue) => {
            if let Some(dead_letter) = queue.dead_letter
                && dead_letter_loops(dead_letter, consumer.subjects, stream.subjects)
            {
                return Err(FitError::DeadLetterLoops);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{BroadcastDecl, Delivery, QueueDecl, StreamRef};
    use crate::names::NameError;
    use crate::subject::SubjectError;

    const ORDERS: StreamDecl = StreamDecl::new("ORDERS", &["orders.>", "refunds.*"]);
    const S1: Duration = Duration::from_secs(1);
    const S2: Duration = Duration::from_secs(2);
    const QUEUE: ConsumerDecl = ConsumerDecl::queue(
        "app::on_order",
        StreamRef::Named("ORDERS"),
        QueueDecl::new("billing"),
    );

    #[test]
    fn the_description_messages_state_the_limit() {
        assert_eq!(MAX_DESCRIPTION_LEN, 4096);
        let expected = "a description cannot be longer than 4096 bytes";
        assert_eq!(StreamError::DescriptionTooLong.message(), expected);
        assert_eq!(ConsumerError::DescriptionTooLong.message(), expected);
    }

    #[test]
    fn ranges() {
        assert!(REPLICAS.contains(1) && REPLICAS.contains(5));
        assert!(!REPLICAS.contains(0) && !REPLICAS.contains(6));
        assert!(!MAX_DELIVER.contains(-1));
        assert!(CONCURRENCY.contains(u32::MAX as i128));
        assert!(!CONCURRENCY.contains(u32::MAX as i128 + 1));
        assert!(!MAX_MSG_SIZE.contains(i32::MAX as i128 + 1));
    }

    #[test]
    fn pairwise_rules() {
        assert!(backoff_fits(3, Some(3)));
        assert!(!backoff_fits(4, Some(3)));
        assert!(backoff_fits(100, None));
        let s = Duration::from_secs;
        assert!(duplicate_window_fits(s(120), Some(s(120))));
        assert!(!duplicate_window_fits(s(121), Some(s(120))));
        assert!(duplicate_window_fits(s(121), None));
        assert!(dead_letter_loops("orders.dead", &[], &["orders.>"]));
        assert!(!dead_letter_loops(
            "orders.dead",
            &["orders.created"],
            &["orders.>"]
        ));
        assert!(dead_letter_loops(
            "orders.dead",
            &["orders.*"],
            &["orders.>"]
        ));
        assert!(!dead_letter_loops("dlq.orders", &[], &["orders.>"]));
        assert!(allows_broadcast(None));
        assert!(allows_broadcast(Some(Retention::Interest)));
        assert!(!allows_broadcast(Some(Retention::WorkQueue)));
        assert_eq!(first_overlap(&["a.*", "b.*", "a.b"]), Some((0, 2)));
        assert_eq!(first_overlap(&["a.*", "b.*"]), None);
    }

    #[test]
    fn streams() {
        assert_eq!(check_stream(&ORDERS), Ok(()));
        let full = StreamDecl::new("FULL", &["full.>"])
            .replicas(3)
            .max_age(Duration::from_secs(3600))
            .duplicate_window(Duration::from_secs(120))
            .max_msgs(10)
            .max_bytes(10)
            .max_msg_size(10)
            .description("d");
        assert_eq!(check_stream(&full), Ok(()));
        let cases = [
            (
                StreamDecl::new("A.B", &["a"]),
                StreamError::Name(NameError::Dot),
            ),
            (StreamDecl::new("A", &[]), StreamError::NoSubjects),
            (
                StreamDecl::new("A", &["a"]).mirror(Origin::named("B")),
                StreamError::MirrorWithSubjects,
            ),
            (
                StreamDecl::mirror_of("A", Origin::named("B"))
                    .sources(const { &[Origin::named("C")] }),
                StreamError::MirrorAndSources,
            ),
            (
                StreamDecl::mirror_of("A", Origin::named("A")),
                StreamError::NamesItself,
            ),
            (
                StreamDecl::sourced("A", const { &[Origin::named("B.C")] }),
                StreamError::OriginName,
            ),
            (
                StreamDecl::mirror_of("A", Origin::named("B").filter("b..c")),
                StreamError::OriginSubject,
            ),
            (
                StreamDecl::mirror_of("A", Origin::named("B").domain("d").api_prefix("$JS.d.API")),
                StreamError::OriginDomainAndPrefix,
            ),
            (
                StreamDecl::new("A", &["a"])
                    .external()
                    .mirror(Origin::named("B")),
                StreamError::MirrorWithSubjects,
            ),
            (
                StreamDecl::new("A", &["a"])
                    .external()
                    .sources(const { &[Origin::named("B")] }),
                StreamError::ExternalWithSettings,
            ),
            (
                StreamDecl::new("A", &["a", "b..c"]),
                StreamError::Subject {
                    index: 1,
                    error: SubjectError::EmptyToken,
                },
            ),
            (
                StreamDecl::new("A", &["a.>", "a.b"]),
                StreamError::SubjectsOverlap {
                    first: 0,
                    second: 1,
                },
            ),
            (
                StreamDecl::new("A", &["a"]).replicas(6),
                StreamError::Replicas,
            ),
            (
                StreamDecl::new("A", &["a"]).replicas(0),
                StreamError::Replicas,
            ),
            (
                StreamDecl::new("A", &["a"]).max_msgs(-1),
                StreamError::MaxMsgs,
            ),
            (
                StreamDecl::new("A", &["a"]).max_bytes(0),
                StreamError::MaxBytes,
            ),
            (
                StreamDecl::new("A", &["a"]).max_msg_size(0),
                StreamError::MaxMsgSize,
            ),
            (
                StreamDecl::new("A", &["a"]).max_age(Duration::ZERO),
                StreamError::MaxAge,
            ),
            (
                StreamDecl::new("A", &["a"]).duplicate_window(Duration::ZERO),
                StreamError::DuplicateWindow,
            ),
            (
                StreamDecl::new("A", &["a"])
                    .max_age(Duration::from_secs(60))
                    .duplicate_window(Duration::from_secs(120)),
                StreamError::DuplicateWindowExceedsMaxAge,
            ),
            (
                StreamDecl::new("A", &["a"]).external().replicas(3),
                StreamError::ExternalWithSettings,
            ),
        ];
        for (decl, error) in cases {
            assert_eq!(check_stream(&decl), Err(error), "{decl:?}");
            assert!(!error.message().is_empty());
        }
        let external = StreamDecl::new("EXT", &["ext.>"])
            .external()
            .retention(Retention::WorkQueue);
        assert_eq!(check_stream(&external), Ok(()));
    }

    #[test]
    fn consumers() {
        assert_eq!(check_consumer(&QUEUE), Ok(()));
        let queue = |q: QueueDecl| ConsumerDecl::queue("h", StreamRef::Named("ORDERS"), q);
        let s = Duration::from_secs;
        let good = queue(
            QueueDecl::new("billing")
                .delivery(Delivery::Push)
                .max_deliver(3)
                .ack_wait(s(30))
                .backoff(&[S1, S2, S2])
                .max_ack_pending(100)
                .dead_letter("dlq.billing")
                .migrate_from("billing_v1")
                .description("bills"),
        )
        .subjects(&["orders.created"])
        .concurrency(4);
        assert_eq!(check_consumer(&good), Ok(()));
        let cases = [
            (
                ConsumerDecl::queue("h", StreamRef::Named("A B"), QueueDecl::new("g")),
                ConsumerError::StreamName(NameError::Whitespace),
            ),
            (
                queue(QueueDecl::new("a.b")),
                ConsumerError::Group(NameError::Dot),
            ),
            (
                queue(QueueDecl::new("g")).subjects(&["a.>.b"]),
                ConsumerError::Subject {
                    index: 0,
                    error: SubjectError::TailNotLast,
                },
            ),
            (
                queue(QueueDecl::new("g")).subjects(&["a.*", "a.b"]),
                ConsumerError::SubjectsOverlap {
                    first: 0,
                    second: 1,
                },
            ),
            (
                queue(QueueDecl::new("g")).concurrency(0),
                ConsumerError::Concurrency,
            ),
            (
                queue(QueueDecl::new("g").max_deliver(0)),
                ConsumerError::MaxDeliver,
            ),
            (
                queue(QueueDecl::new("g").max_deliver(-1)),
                ConsumerError::MaxDeliver,
            ),
            (
                queue(QueueDecl::new("g").max_ack_pending(0)),
                ConsumerError::MaxAckPending,
            ),
            (
                queue(QueueDecl::new("g").ack_wait(Duration::ZERO)),
                ConsumerError::AckWait,
            ),
            (
                queue(QueueDecl::new("g").backoff(&[S1, Duration::ZERO])),
                ConsumerError::Backoff { index: 1 },
            ),
            (
                queue(QueueDecl::new("g").max_deliver(1).backoff(&[S1, S2])),
                ConsumerError::BackoffLongerThanMaxDeliver,
            ),
            (
                queue(QueueDecl::new("g").dead_letter("dlq.*")),
                ConsumerError::DeadLetter(SubjectError::Wildcard),
            ),
            (
                queue(QueueDecl::new("g").dead_letter("orders.dead")).subjects(&["orders.*"]),
                ConsumerError::DeadLetterLoops,
            ),
            (
                queue(QueueDecl::new("g")).publishes(&["orders.billed", "orders..paid"]),
                ConsumerError::Publishes {
                    index: 1,
                    error: SubjectError::EmptyToken,
                },
            ),
            (
                queue(QueueDecl::new("g").migrate_from("a>")),
                ConsumerError::MigrateFrom(NameError::Wildcard),
            ),
            (
                queue(QueueDecl::new("g").migrate_from("g")),
                ConsumerError::MigrateFromItself,
            ),
        ];
        for (decl, error) in cases {
            assert_eq!(check_consumer(&decl), Err(error), "{decl:?}");
            assert!(!error.message().is_empty());
        }
    }

    #[test]
    fn consumers_on_streams() {
        assert_eq!(
            check_consumer_on_stream(
                &QUEUE.subjects(&["orders.eu.created", "refunds.x"]),
                &ORDERS
            ),
            Ok(())
        );
        assert_eq!(
            check_consumer_on_stream(&QUEUE.subjects(&["orders.x", "refunds.x.y"]), &ORDERS),
            Err(FitError::SubjectNotCovered { index: 1 })
        );
        let work = StreamDecl::new("WORK", &["work.>"]).retention(Retention::WorkQueue);
        let relay = ConsumerDecl::broadcast("h", StreamRef::Named("WORK"), BroadcastDecl::new());
        assert_eq!(
            check_consumer_on_stream(&relay, &work),
            Err(FitError::DeliverPolicyOnWorkQueue)
        );
        let relay_all = ConsumerDecl::broadcast(
            "h",
            StreamRef::Named("WORK"),
            BroadcastDecl::new().deliver(DeliverPolicy::All),
        );
        assert_eq!(
            check_consumer_on_stream(&relay_all, &work),
            Err(FitError::BroadcastOnWorkQueue)
        );
        assert_eq!(check_consumer_on_stream(&relay, &ORDERS), Ok(()));
        assert_eq!(
            check_consumer_on_stream(&QUEUE, &work),
            Ok(()),
            "a queue consumer delivers all"
        );
        let looping = ConsumerDecl::queue(
            "h",
            StreamRef::Named("ORDERS"),
            QueueDecl::new("g").dead_letter("orders.dead"),
        );
        assert_eq!(
            check_consumer_on_stream(&looping, &ORDERS),
            Err(FitError::DeadLetterLoops)
        );
    }

    #[test]
    fn usable_in_const_context() {
        const OK: bool = check_stream(&ORDERS).is_ok()
            && check_consumer(&QUEUE).is_ok()
            && check_consumer_on_stream(&QUEUE, &ORDERS).is_ok();
        const { assert!(OK) };
    }
}
