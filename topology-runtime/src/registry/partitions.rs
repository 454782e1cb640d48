//! A partitioned queue consumer read as what it is on the server: one durable consumer per
//! partition, filtered on the partition token its stream's `subject_transform` writes into
//! each stored subject, each a pinned client delivering one message at a time (see
//! `topology_core::partition` and docs/PARTITIONS.md).

use std::time::Duration;

use topology_core::bucket::BucketDecl;
use topology_core::model::{ConsumerDecl, ConsumerKind, QueueDecl, Storage, StreamDecl};
use topology_core::partition::Partitioning;

use super::sorted::SortedList;
use super::{Consumer, Topology};
use crate::provision::Superseded;

/// How long a partition's pin outlives the last pull request of the replica holding it: the
/// bound within which survivors take over a dead replica's partitions.
pub const PARTITION_PIN_TTL: Duration = Duration::from_secs(3);

/// The key-value bucket the replicas of every partitioned group keep their membership in:
/// a key `<stream>.<group>.<instance>` each, renewed every [`MEMBER_BEAT`] and dropped by the
/// bucket's `max_age` ([`MEMBER_TTL`]) once its replica stops renewing it. Declared (and so
/// provisioned, planned and granted) with the first partitioned consumer.
pub const MEMBERS_BUCKET: &str = "ntopo_members";

/// How often a member renews its key and reads the others'.
pub const MEMBER_BEAT: Duration = Duration::from_secs(1);

/// How long a member's key lives without renewal (the bucket's `max_age`): a replica that
/// died or was cut off is dropped from the members this long after its last renewal.
pub const MEMBER_TTL: Duration = Duration::from_secs(3);

/// The members' bucket, with as many replicas as `replicas` (the most of the partitioned
/// streams'), in memory: it holds nothing a restart of the whole cluster should keep.
fn members_bucket(replicas: u8) -> BucketDecl {
    BucketDecl::kv(MEMBERS_BUCKET)
        .history(1)
        .ttl(MEMBER_TTL)
        .replicas(replicas)
        .storage(Storage::Memory)
        .description("nats-topology: the replicas of each partitioned consumer group")
}

/// A partition's `ack_wait` unless the consumer declares one: a message held by a replica
/// that dies blocks its partition (one message at a time) until it is delivered again, so the
/// survivors take over within this. A running handler keeps its message meanwhile (progress
/// acks every half of it).
pub const PARTITION_ACK_WAIT: Duration = Duration::from_secs(5);

/// One partition of a partitioned group, on the consumer that reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionOf {
    /// The group as declared (each partition's durable is `<group>-p<index>`).
    pub group: &'static str,
    /// This partition, from 0.
    pub index: u16,
    /// How many the group has.
    pub of: u16,
    /// Where the key is in a stored subject: the positions of its tokens (`None` when the
    /// stream's transform does not write every key token as it is). Two messages whose
    /// subjects differ at one of them have different keys.
    pub key: Option<&'static [usize]>,
}

/// A token of the stream's transform destination, as a partition's filter reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    /// Written as it is.
    Literal(String),
    /// The trailing `>`.
    Any(&'static str),
    /// A source wildcard written again (`$n`, `{{wildcard(n)}}`): its number.
    Wildcard(u8),
    /// The partition number.
    Partition,
}

/// How a partitioned consumer's messages are stored: the destination of its stream's
/// transform, by token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    tokens: Vec<Token>,
}

impl Route {
    /// The positions of `key`'s tokens (source wildcards, from 1) in a stored subject; `None`
    /// when one of them is not written as it is.
    pub fn key_positions(&self, key: &[u8]) -> Option<Vec<usize>> {
        key.iter()
            .map(|k| {
                self.tokens
                    .iter()
                    .position(|token| *token == Token::Wildcard(*k))
            })
            .collect()
    }

    /// The filter subject of partition `index`: the stored subjects it holds.
    pub fn filter(&self, index: u16) -> String {
        let tokens = self.tokens.iter().map(|token| match token {
            Token::Literal(literal) => literal.clone(),
            Token::Any(any) => (*any).to_owned(),
            Token::Wildcard(_) => "*".to_owned(),
            Token::Partition => index.to_string(),
        });
        tokens.collect::<Vec<_>>().join(".")
    }
}

/// The route of the partitioned consumer reading `subject` by `partitioning` through
/// `stream`'s `subject_transform`; why the stream cannot carry the partition otherwise (what
/// is wrong and the transform to declare).
pub fn route(
    stream: &StreamDecl,
    subject: &str,
    partitioning: &Partitioning,
) -> Result<Route, String> {
    let wanted = wanted_transform(subject, partitioning);
    let fix = format!(
        "declare on stream `{}`: `subject_transform = {{ src = \"{subject}\", dest = \"{wanted}\" }}` (the partition becomes the first token of each stored subject; other consumers of the stream filter on stored subjects, e.g. `*.{subject}`)",
        stream.name
    );
    let Some(transform) = stream.subject_transform else {
        return Err(format!(
            "stream `{}` stores `{subject}` as published, so no consumer can read one partition of it: {fix}",
            stream.name
        ));
    };
    if transform.src != subject {
        return Err(format!(
            "stream `{}` rewrites `{}`, not the consumer's subject `{subject}`: {fix}",
            stream.name, transform.src
        ));
    }
    let argument = format!(
        "{{{{partition({},{})}}}}",
        partitioning.partitions,
        key_list(partitioning)
    );
    let mut tokens = Vec::new();
    let mut partitions = 0;
    for token in transform.dest.split('.') {
        let squeezed: String = token.chars().filter(|c| !c.is_whitespace()).collect();
        if topology_core::transform::is_partition(token) {
            if !squeezed.eq_ignore_ascii_case(&argument) {
                return Err(format!(
                    "stream `{}` routes by `{token}`, not by this consumer's key and partition count (`{argument}`): the count is fixed per group, and the key must be the one the stream routes by; {fix}",
                    stream.name
                ));
            }
            partitions += 1;
            tokens.push(Token::Partition);
        } else if token == ">" {
            tokens.push(Token::Any(">"));
        } else if let Some(n) = wildcard_reference(&squeezed) {
            tokens.push(Token::Wildcard(n));
        } else if token.contains("{{") || token.starts_with('$') {
            return Err(format!(
                "stream `{}` writes `{token}` into its stored subjects, which a partition's filter cannot name: a partitioned route keeps the subject's tokens as they are (`$n` or `{{{{wildcard(n)}}}}`) beside the partition; {fix}",
                stream.name
            ));
        } else {
            tokens.push(Token::Literal(token.to_owned()));
        }
    }
    if partitions != 1 {
        return Err(format!(
            "stream `{}` writes {partitions} partition tokens into `{}`; a route has exactly one: {fix}",
            stream.name, transform.dest
        ));
    }
    Ok(Route { tokens })
}

/// The transform a stream declares for `subject` partitioned by `partitioning`.
fn wanted_transform(subject: &str, partitioning: &Partitioning) -> String {
    let mut wildcard = 0;
    let rest = subject.split('.').map(|token| match token {
        "*" => {
            wildcard += 1;
            format!("{{{{wildcard({wildcard})}}}}")
        }
        other => other.to_owned(),
    });
    let rest: Vec<String> = rest.collect();
    format!(
        "{{{{partition({},{})}}}}.{}",
        partitioning.partitions,
        key_list(partitioning),
        rest.join(".")
    )
}

fn key_list(partitioning: &Partitioning) -> String {
    let key = partitioning.key.iter().map(u8::to_string);
    key.collect::<Vec<_>>().join(",")
}

/// `n` of `$n` or `{{wildcard(n)}}` (spaces removed).
fn wildcard_reference(token: &str) -> Option<u8> {
    let number = |s: &str| -> Option<u8> {
        (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse().ok())
            .flatten()
    };
    if let Some(n) = token.strip_prefix('$') {
        return number(n);
    }
    let lower = token.to_ascii_lowercase();
    lower
        .strip_prefix("{{wildcard(")
        .and_then(|rest| rest.strip_suffix(")}}"))
        .and_then(number)
}

impl Topology {
    /// The topology with each partitioned queue consumer replaced by the consumers of its
    /// partitions (`<group>-p0` .. `<group>-p<n-1>`, in order), as the runtime provisions and
    /// runs them, and as `plan` and the exports show them; with `migrate_from`, followed by
    /// the consumer it migrates from (see [`Consumer::superseded_by`]). A partitioned
    /// consumer whose stream does not route it stays as it is: validation reports it.
    pub fn partitioned(&self) -> Topology {
        if !self
            .consumers
            .iter_added()
            .any(|c| c.decl.as_queue().is_some_and(|q| q.partitioned.is_some()))
        {
            return self.clone();
        }
        let mut topology = Topology {
            consumers: SortedList::default(),
            ..self.clone()
        };
        let mut replicas = None;
        for consumer in self.consumers.get() {
            let stream = self.find_stream(consumer.decl.stream.name());
            match expand(consumer, stream) {
                Some(partitions) => {
                    let stream_replicas = stream.and_then(|s| s.replicas).unwrap_or(1);
                    replicas = replicas.max(Some(stream_replicas));
                    partitions
                        .into_iter()
                        .for_each(|p| topology.consumers.push(p));
                }
                None => topology.consumers.push(consumer.clone()),
            }
        }
        if let Some(replicas) = replicas {
            topology.add_bucket(members_bucket(replicas));
            topology.sort_in_place();
        }
        topology
    }
}

/// The consumers of `consumer`'s partitions, and of the plain queue consumer it migrates from,
/// when it is partitioned and its stream routes it (`None` otherwise: validation reports why). Their names and filters are leaked: built once
/// per runtime, they live as long as it.
fn expand(consumer: &Consumer, stream: Option<&StreamDecl>) -> Option<Vec<Consumer>> {
    let queue = consumer.decl.as_queue()?;
    let partitioning = queue.partitioned?;
    let subject = *consumer.decl.subjects.first()?;
    let route = route(stream?, subject, &partitioning).ok()?;
    let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
    let key: Option<&'static [usize]> = route
        .key_positions(partitioning.key)
        .map(|positions| &*Box::leak(positions.into_boxed_slice()));
    let partitions = (0..partitioning.partitions).map(|index| {
        let filter: &'static [&'static str] = Box::leak(Box::new([leak(route.filter(index))]));
        let mut decl: ConsumerDecl = consumer.decl;
        decl.subjects = filter;
        let mut partition = partition_of(queue, leak(format!("{}-p{index}", queue.group)));
        // What it migrates from, in its metadata: an old instance that finds that consumer
        // deleted does not create it again. From a partitioned group, partition `i` names the
        // old partition `i` (with fewer partitions than before, the last old ones are named by
        // none, and left: see `migrated` in the runtime).
        partition.migrate_from = match (queue.migrate_from, queue.migrate_from_partitions) {
            (Some(old), Some(of)) => (index < of).then(|| leak(format!("{old}-p{index}"))),
            (old, _) => old,
        };
        decl.kind = ConsumerKind::Queue(partition);
        Consumer {
            decl: partition_decl(decl),
            handler: consumer.handler.clone(),
            batch: None,
            states: consumer.states,
            partition: Some(PartitionOf {
                group: queue.group,
                index,
                of: partitioning.partitions,
                key,
            }),
            superseded_by: None,
        }
    });
    let mut consumers: Vec<Consumer> = partitions.collect();
    // Migrating from a partitioned group (a new partition count): its partitions, as they
    // are on the server (bound, never created), each read to its end in order, by whichever
    // replica the server pins, before any partition of the new count starts. The stream's
    // new layout stores nothing they read (checked at start-up).
    if let (Some(old), Some(of)) = (queue.migrate_from, queue.migrate_from_partitions) {
        for index in 0..of {
            let mut decl: ConsumerDecl = consumer.decl;
            decl.kind = ConsumerKind::Queue(QueueDecl {
                migrate_from: None,
                migrate_from_partitions: None,
                partitioned: None,
                ..partition_of(queue, leak(format!("{old}-p{index}")))
            });
            consumers.push(Consumer {
                decl: partition_decl(decl),
                handler: consumer.handler.clone(),
                batch: None,
                states: consumer.states,
                // The old route is not known here: its messages are not run ahead.
                partition: Some(PartitionOf {
                    group: old,
                    index,
                    of,
                    key: None,
                }),
                superseded_by: Some(queue.group),
            });
        }
        return Some(consumers);
    }
    // Migrating from a plain queue consumer: what it stored before the stream routed by
    // partition is read through it (its subjects carry no partition), with the same
    // handler, before any partition starts.
    if let Some(old) = queue.migrate_from {
        let mut decl: ConsumerDecl = consumer.decl;
        // No order to keep within it: as many at once as the group runs partitions.
        decl.concurrency = Some(u32::from(partitioning.partitions));
        decl.kind = ConsumerKind::Queue(QueueDecl {
            group: old,
            migrate_from: None,
            migrate_from_partitions: None,
            partitioned: None,
            ..*queue
        });
        consumers.push(Consumer {
            decl,
            handler: consumer.handler.clone(),
            batch: None,
            states: consumer.states,
            partition: None,
            superseded_by: Some(queue.group),
        });
    }
    Some(consumers)
}

/// A partition's queue declaration, named `name`: a pinned client that delivers one message
/// at a time.
fn partition_of(queue: &QueueDecl, name: &'static str) -> QueueDecl {
    QueueDecl {
        group: name,
        ..*queue
    }
    .pinned_client(PARTITION_PIN_TTL)
    .max_ack_pending(1)
    .ack_wait(queue.ack_wait.unwrap_or(PARTITION_ACK_WAIT))
}

/// `decl` as a partition's consumer runs it: the server delivers one message at a time
/// (`max_ack_pending = 1`); a second slot keeps a pull request open while one runs, so that
/// the next message comes with the ack rather than a round trip after it.
fn partition_decl(mut decl: ConsumerDecl) -> ConsumerDecl {
    decl.concurrency = Some(2);
    decl
}

impl Topology {
    /// Whether `consumer`, read to its end by the partitioned group migrating from it, is then
    /// deleted: when a partition of the group names it (`migrate_from`, in its metadata), so
    /// that an old instance finding it gone does not create it again. One named by none (the
    /// last partitions of an old group larger than the new one) is left for an operator.
    pub(crate) fn deletes_once_read(&self, consumer: &Consumer) -> bool {
        let Some(old) = consumer.decl.as_queue().map(|q| q.group) else {
            return false;
        };
        let stream = consumer.decl.stream.name();
        consumer.superseded_by.is_some()
            && self.consumers_of(stream).iter().any(|c| {
                c.superseded_by.is_none()
                    && c.decl.as_queue().and_then(|q| q.migrate_from) == Some(old)
            })
    }

    /// What the refusals read of `consumer` when a partitioned group migrates from it
    /// (`None` otherwise): the old consumer, its partition if it is one, the group, and the
    /// filters of the group's partitions.
    pub(crate) fn superseded<'a>(&'a self, consumer: &'a Consumer) -> Option<Superseded<'a>> {
        let group = consumer.superseded_by?;
        let stream = consumer.decl.stream.name();
        let partitions = self
            .consumers_of(stream)
            .iter()
            .filter(|c| c.superseded_by.is_none() && c.partition.is_some_and(|p| p.group == group));
        Some(Superseded {
            stream,
            old: consumer.decl.as_queue()?.group,
            partition: consumer.partition.map(|p| (p.group, p.index, p.of)),
            group,
            filters: partitions
                .flat_map(|c| c.decl.subjects.iter().copied())
                .collect(),
        })
    }
}

#[cfg(test)]
mod tests;
