//! Which instance of a stream a consumer reads, and where a re-created consumer starts in it.

use async_nats::jetstream;

/// One instance of a stream: a stream deleted and created again under the same name is
/// another instance, whose sequences start again at 1. Its `created` time tells them apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamInstance {
    /// The stream's name.
    pub name: String,
    /// Its creation time, as the server reports it (compared, never parsed).
    pub created: std::sync::Arc<str>,
    /// Its last sequence when this was read (a point past it belongs to another instance).
    pub last_sequence: u64,
}

impl StreamInstance {
    /// The instance `info` describes.
    pub fn of(info: &jetstream::stream::Info) -> Self {
        StreamInstance {
            name: info.config.name.clone(),
            created: info.created.to_string().into(),
            last_sequence: info.state.last_sequence,
        }
    }

    /// Whether `other` is the same stream instance (the same name and creation time).
    pub fn same_as(&self, other: &StreamInstance) -> bool {
        self.name == other.name && self.created == other.created
    }
}

/// A resume point: every stream sequence up to `after` was handled, in `stream`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResumePoint {
    /// The stream instance the sequence belongs to.
    pub stream: StreamInstance,
    /// The last sequence handled (a queue consumer's ack floor).
    pub after: u64,
}

/// Where a consumer created again after a loss starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Start {
    /// After this sequence, in the same stream instance as the resume point.
    After(u64),
    /// As declared: the stream is not the instance the resume point belongs to.
    Fresh(&'static str),
}

impl ResumePoint {
    /// Where to start in the stream instance `now` (read just before creating the consumer).
    /// A purged stream (its first sequence moved past the point) is the same stream: the
    /// server starts at its first message. A point past the last sequence belongs to another
    /// instance (or to a server that lost its newest messages): those sequences will be
    /// given to new messages, so resuming there would skip them.
    pub(crate) fn start_in(&self, now: &StreamInstance) -> Start {
        if !self.stream.same_as(now) {
            Start::Fresh("the stream was deleted and created again")
        } else if self.after > now.last_sequence {
            Start::Fresh("the resume point is past the stream's last sequence")
        } else {
            Start::After(self.after)
        }
    }
}
