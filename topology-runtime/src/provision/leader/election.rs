//! [`Election`]: what the leader watch saw, from an advisory's subject or its own probes.

use std::time::Duration;

use tokio::time::Instant;

use super::ADVISORY_PREFIX;

/// What the watch saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Election {
    /// A meta leader (advisory, or a probe answered after one that was not, this watch's or
    /// another replica's). Requests sent before `lost_before` may have found none: the
    /// moment the answered probe was sent (a leader answers only once in office, so it took
    /// office about then), or the moment the advisory or the other replica's note arrived.
    Meta { lost_before: Instant },
    /// A leader of this stream: a request on one of its consumers in flight may be lost (a
    /// consumer create sent while the stream's leader is elected is never answered); the
    /// stream's own creates are answered by that leader.
    Stream(String),
    /// A leader of one of this stream's consumers: worth waking the stream's retries that
    /// sleep; it loses no request in flight (the creates that made it are answered as it
    /// takes office, slowly under a herd's load; the one that is not goes unanswered past
    /// its grace).
    Consumer { stream: String, consumer: String },
    /// Not an election: the meta leader answered a probe sent at `sent`, after `rtt`. An
    /// attempt in flight past its grace while the API answers is taken as lost.
    Answered { sent: Instant, rtt: Duration },
}

impl Election {
    /// The election an advisory subject announces, if it is one (arrived `now`).
    pub(crate) fn from_subject(subject: &str, now: Instant) -> Option<Election> {
        let rest = subject.strip_prefix(ADVISORY_PREFIX)?.strip_prefix('.')?;
        if rest == "DOMAIN.LEADER_ELECTED" {
            return Some(Election::Meta { lost_before: now });
        }
        if let Some(stream) = rest.strip_prefix("STREAM.LEADER_ELECTED.") {
            let stream = stream.split('.').next().filter(|s| !s.is_empty())?;
            return Some(Election::Stream(stream.to_owned()));
        }
        let (stream, consumer) = rest
            .strip_prefix("CONSUMER.LEADER_ELECTED.")?
            .split_once('.')?;
        (!stream.is_empty() && !consumer.is_empty()).then(|| Election::Consumer {
            stream: stream.to_owned(),
            consumer: consumer.to_owned(),
        })
    }

    /// Whether a retry on `stream` (`""`: none in particular) is worth waking.
    pub(super) fn concerns(&self, stream: &str) -> bool {
        match self {
            Election::Meta { .. } => true,
            Election::Stream(name) | Election::Consumer { stream: name, .. } => {
                stream.is_empty() || name == stream
            }
            Election::Answered { .. } => false,
        }
    }
}
