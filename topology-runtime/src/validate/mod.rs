//! Start-up validation of a whole topology: every problem at once.
//!
//! The per-declaration rules are those of `topology_core::rules`, the same functions the
//! macros run at expansion and the generated `const` assertions run at compile time; here
//! they also cover what the compiler cannot see (string stream references, hand-built
//! topologies) and what needs more than one declaration.
//!
//! It grows with the number of declarations, not with the number of pairs of them: overlaps
//! between streams, and between the consumers of a work-queue stream, are found through a
//! subject tree (`index`); consumers come sorted by stream, so each stream's are a run of
//! the list, looked up once and grouped by sorting the run. Services, endpoints and core
//! subscriptions are checked in `services`; key-value buckets and object stores in `buckets`
//! (their streams take part in the overlap checks as any owned stream).

mod buckets;
mod index;
mod origins;
mod services;

use std::collections::BTreeMap;
use std::fmt;

use crate::registry::{Consumer, Topology};
use topology_core::model::{ConsumerDecl, ConsumerKind, Retention, StreamDecl};
use topology_core::{rules, subject};

use index::SubjectIndex;

/// One problem found in a topology.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Where: the stream and, if it concerns one, the consumer's handler.
    pub location: String,
    /// What is wrong and what to do.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.location, self.message)
    }
}

/// Every problem found in a topology.
#[derive(Clone, PartialEq, Eq)]
pub struct ValidationError {
    /// The problems: streams first, then consumers, each in name order; then services,
    /// endpoints and subscriptions.
    pub problems: Vec<Problem>,
}

impl fmt::Display for ValidationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the topology has {} problem(s):", self.problems.len())?;
        for problem in &self.problems {
            write!(f, "\n  - {problem}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ValidationError {}

struct Problems(Vec<Problem>);

impl Problems {
    fn push(&mut self, location: impl Into<String>, message: impl Into<String>) {
        self.0.push(Problem {
            location: location.into(),
            message: message.into(),
        });
    }
}

/// What is wrong with a stream; for a transform, which one and which token.
fn stream_message(stream: &StreamDecl, error: rules::StreamError) -> String {
    let rules::StreamError::Transform { site, error } = error else {
        return error.message().to_owned();
    };
    let (src, dest) = match site {
        rules::TransformSite::Stream => stream.subject_transform.map(|t| (t.src, t.dest)),
        rules::TransformSite::Mirror => stream
            .mirror
            .and_then(|o| Some((o.filter.unwrap_or(">"), o.transform?))),
        rules::TransformSite::Source(i) => stream
            .sources
            .get(i)
            .and_then(|o| Some((o.filter.unwrap_or(">"), o.transform?))),
    }
    .unwrap_or_default();
    let what = match error.token(dest) {
        Some(token) => format!("`{token}`: {}", error.message()),
        None => error.message().to_owned(),
    };
    format!(
        "`{}`: nats-server refuses the transform of {src:?} to {dest:?} when it creates the \
         stream: {what}",
        site.key()
    )
}

fn stream_at(name: &str) -> String {
    format!("stream `{name}`")
}

pub(crate) fn consumer_at(decl: &ConsumerDecl) -> String {
    let name = match &decl.kind {
        ConsumerKind::Queue(q) => format!("queue consumer `{}`", q.group),
        ConsumerKind::Broadcast(_) => "broadcast".to_owned(),
    };
    format!(
        "stream `{}`, {name} (handler `{}`)",
        decl.stream.name(),
        decl.handler
    )
}

/// Checks a topology; returns every problem at once.
pub fn validate(topology: &Topology) -> Result<(), ValidationError> {
    let mut problems = Problems(Vec::new());
    let mut streams: BTreeMap<&str, &StreamDecl> = BTreeMap::new();
    for stream in topology.streams() {
        // A bucket's stream is checked, and reported, as the bucket (`buckets`).
        let of_bucket = topology.bucket_of_stream(stream.name).is_some();
        if !of_bucket && let Err(e) = rules::check_stream(stream) {
            problems.push(stream_at(stream.name), stream_message(stream, e));
        }
        if let Some(other) = streams.insert(stream.name, stream)
            && other != stream
            && !of_bucket
        {
            problems.push(
                stream_at(stream.name),
                "declared twice with different settings; keep one declaration and refer to it \
                 from every consumer",
            );
        }
    }
    buckets::check(topology, &mut problems);
    check_owned_overlaps(&streams, &mut problems);
    origins::check_loops(&streams, &mut problems);
    let declared: Vec<&StreamDecl> = streams.values().copied().collect();
    for consumers in by_stream(topology) {
        let stream = streams.get(consumers[0].decl.stream.name());
        for consumer in consumers {
            check_consumer(&consumer.decl, stream.copied(), &declared, &mut problems);
        }
    }
    check_groups(topology, &mut problems);
    check_work_queues(topology, &streams, &mut problems);
    services::check(topology, &declared, &mut problems);
    if problems.0.is_empty() {
        Ok(())
    } else {
        Err(ValidationError {
            problems: problems.0,
        })
    }
}

/// The consumers of each stream, in stream name order (the topology sorts them by stream).
fn by_stream(topology: &Topology) -> impl Iterator<Item = &[Consumer]> {
    topology
        .consumers()
        .chunk_by(|a, b| a.decl.stream.name() == b.decl.stream.name())
}

/// One consumer's own rules, and how it fits its stream (`None`: not declared).
fn check_consumer(
    decl: &ConsumerDecl,
    stream: Option<&StreamDecl>,
    declared: &[&StreamDecl],
    problems: &mut Problems,
) {
    let own_rules = rules::check_consumer(decl);
    if let Err(e) = own_rules {
        problems.push(consumer_at(decl), e.message());
    }
    let Some(stream) = stream else {
        let name = decl.stream.name();
        problems.push(
            consumer_at(decl),
            format!(
                "no stream named `{name}` is declared; declare it with \
                     `#[stream(name = \"{name}\", subjects = [...])]`, adding `external` if \
                     another service owns it"
            ),
        );
        return;
    };
    match rules::check_consumer_among(decl, stream, declared) {
        Ok(()) => {}
        Err(rules::FitError::SubjectNotCovered { index }) if stream.subjects.is_empty() => problems
            .push(
                consumer_at(decl),
                format!(
                    "subject `{}` is not among the messages the stream holds (those of its \
                     mirror's or sources' streams, within their `filter`), so it would never \
                     receive a message; change the consumer's subject, or the filter",
                    decl.subjects[index]
                ),
            ),
        Err(rules::FitError::SubjectNotCovered { index }) => problems.push(
            consumer_at(decl),
            format!(
                "subject `{}` is not covered by the stream's subjects {:?}, so it would never \
                 receive a message; add it to the stream or change the consumer's subject",
                decl.subjects[index], stream.subjects
            ),
        ),
        Err(e) => problems.push(consumer_at(decl), e.message()),
    }
    // A partitioned consumer reads partitions its stream writes into the stored subjects.
    if let (Ok(()), Some(queue)) = (own_rules, decl.as_queue())
        && let (Some(partitioning), [subject]) = (&queue.partitioned, decl.subjects)
        && let Err(why) = crate::registry::partition_route(stream, subject, partitioning)
    {
        problems.push(consumer_at(decl), why);
    }
}

/// Owned streams whose subjects overlap: the server refuses the second one. Reported per
/// pair of streams in name order, with the first overlapping pair of subjects.
fn check_owned_overlaps(streams: &BTreeMap<&str, &StreamDecl>, problems: &mut Problems) {
    let owned: Vec<&StreamDecl> = streams.values().copied().filter(|s| !s.external).collect();
    let mut index = SubjectIndex::new();
    for (i, stream) in owned.iter().enumerate() {
        for subject in stream.subjects {
            index.insert(i, subject);
        }
    }
    for (i, j) in index.overlapping_owners() {
        let (a, b) = (owned[i], owned[j]);
        let clash = a.subjects.iter().find_map(|x| {
            b.subjects
                .iter()
                .find(|y| subject::overlaps(x, y))
                .map(|y| (*x, *y))
        });
        if let Some((x, y)) = clash {
            problems.push(
                format!("streams `{}` and `{}`", a.name, b.name),
                format!(
                    "subjects `{x}` and `{y}` overlap; the server gives a subject to one \
                     stream only: narrow one of them, or declare one stream `external` if \
                     another service owns it"
                ),
            );
        }
    }
}

/// One durable (stream + group) declared by several handlers.
fn check_groups(topology: &Topology, problems: &mut Problems) {
    let mut groups: Vec<(&str, &ConsumerDecl)> = Vec::new();
    for consumers in by_stream(topology) {
        groups.clear();
        groups.extend(
            consumers
                .iter()
                .filter_map(|c| c.decl.as_queue().map(|q| (q.group, &c.decl))),
        );
        // Stable: each group's handlers stay in consumer order.
        groups.sort_by_key(|&(group, _)| group);
        for decls in groups.chunk_by(|a, b| a.0 == b.0) {
            if decls.len() < 2 {
                continue;
            }
            let (stream, group) = (consumers[0].decl.stream.name(), decls[0].0);
            let handlers: Vec<&str> = decls.iter().map(|(_, d)| d.handler).collect();
            let same_shape = decls
                .windows(2)
                .all(|w| w[0].1.kind == w[1].1.kind && w[0].1.subjects == w[1].1.subjects);
            let what = if same_shape {
                "a group is one durable, and messages would be split between the handlers at \
                 random"
            } else {
                "with different shapes, each start-up would rewrite the other's configuration"
            };
            problems.push(
                format!("stream `{stream}`, queue consumer `{group}`"),
                format!(
                    "declared by {} handlers ({}); {what}: give each handler its own group",
                    handlers.len(),
                    handlers.join(", ")
                ),
            );
        }
    }
}

/// Work-queue streams: consumers may not overlap (each message goes to one consumer).
/// Reported per pair of consumers in declaration order.
fn check_work_queues(
    topology: &Topology,
    streams: &BTreeMap<&str, &StreamDecl>,
    problems: &mut Problems,
) {
    let mut consumers: Vec<&ConsumerDecl> = Vec::new();
    for of_stream in by_stream(topology) {
        let Some(stream) = streams
            .get(of_stream[0].decl.stream.name())
            .filter(|s| s.retention == Some(Retention::WorkQueue))
        else {
            continue;
        };
        consumers.clear();
        consumers.extend(
            of_stream
                .iter()
                .map(|c| &c.decl)
                .filter(|d| d.as_queue().is_some()),
        );
        // A consumer without filters reads the whole stream: it overlaps every other one.
        let mut index = SubjectIndex::new();
        let mut pairs = Vec::new();
        for (i, consumer) in consumers.iter().enumerate() {
            if consumer.subjects.is_empty() {
                pairs.extend(
                    (0..consumers.len())
                        .filter(|&j| j != i)
                        .map(|j| (i.min(j), i.max(j))),
                );
            }
            for subject in consumer.subjects {
                index.insert(i, subject);
            }
        }
        pairs.extend(index.overlapping_owners());
        pairs.sort_unstable();
        pairs.dedup();
        for (i, j) in pairs {
            let (a, b) = (consumers[i], consumers[j]);
            if a.as_queue().map(|q| q.group) == b.as_queue().map(|q| q.group) {
                continue; // reported by check_groups
            }
            let overlap = match (a.subjects, b.subjects) {
                ([], _) | (_, []) => true,
                (xs, ys) => xs
                    .iter()
                    .any(|x| ys.iter().any(|y| subject::overlaps(x, y))),
            };
            if overlap {
                problems.push(
                    stream_at(stream.name),
                    format!(
                        "work-queue stream: consumers `{}` and `{}` have overlapping filters; \
                         a work queue hands each message to one consumer, so give them \
                         disjoint subjects",
                        a.as_queue().map_or("", |q| q.group),
                        b.as_queue().map_or("", |q| q.group)
                    ),
                );
            }
        }
    }
}

debug_as_display!(ValidationError);

#[cfg(test)]
mod tests;
