//! Whole-topology checks that need more than one declaration; every problem reported at once.

use std::collections::HashMap;
use std::fmt;

use crate::registry::Topology;
use topology_core::model::{ConsumerKind, StreamDecl};

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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidationError {
    /// The problems, in declaration order.
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

/// Checks a topology; returns every problem at once.
pub fn validate(topology: &Topology) -> Result<(), ValidationError> {
    let mut problems = Vec::new();
    let mut by_name: HashMap<&str, &StreamDecl> = HashMap::new();
    for stream in topology.streams() {
        if let Some(other) = by_name.insert(stream.name, stream)
            && other != stream
        {
            problems.push(Problem {
                location: format!("stream `{}`", stream.name),
                message: "declared twice with different settings; keep one declaration and \
                          refer to it from every consumer"
                    .to_owned(),
            });
        }
    }
    for consumer in topology.consumers() {
        let decl = &consumer.decl;
        let stream = decl.stream.name();
        let location = format!("stream `{stream}`, handler `{}`", decl.handler);
        let Some(stream_decl) = by_name.get(stream) else {
            problems.push(Problem {
                location,
                message: format!(
                    "no stream named `{stream}` is declared; declare it with \
                     `#[stream(name = \"{stream}\", subjects = [...])]`, or with `external` if \
                     another service owns it"
                ),
            });
            continue;
        };
        for subject in decl.subjects {
            if !stream_decl.external
                && !stream_decl
                    .subjects
                    .iter()
                    .any(|pattern| crate::provision::subject_within(subject, pattern))
            {
                problems.push(Problem {
                    location: location.clone(),
                    message: format!(
                        "subject `{subject}` is not covered by the stream's subjects {:?}; \
                         add it to the stream or change the consumer's subject",
                        stream_decl.subjects
                    ),
                });
            }
        }
        if let ConsumerKind::Queue(queue) = &decl.kind {
            let shapes: Vec<_> = topology
                .consumers()
                .iter()
                .filter(|c| {
                    c.decl.stream.name() == stream
                        && c.decl.as_queue().is_some_and(|q| q.group == queue.group)
                })
                .collect();
            if shapes.len() > 1 && shapes[0].decl.handler == decl.handler {
                problems.push(Problem {
                    location: location.clone(),
                    message: format!(
                        "group `{}` is declared by {} handlers on one stream; a group is one \
                         durable with one handler: give each handler its own group",
                        queue.group,
                        shapes.len()
                    ),
                });
            }
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(ValidationError { problems })
    }
}
