//! The fleet channel: what the replicas of one service that wait on one JetStream tell each
//! other, so that one probe answered wakes them all and each can probe less the more of them
//! there are.
//!
//! Two notes, core NATS messages under the connection's inbox prefix (the service's own:
//! `_INBOX_<service>` with the generated permissions, which grant it to this service's user
//! only), naming the JetStream API (its prefix): [`channel`].
//!
//! - `waiting`: "my probes go unanswered", sent once per outage (once a probe has failed, or
//!   gone unanswered for [`SILENT_AFTER`](super::SILENT_AFTER)), after a random delay in
//!   `[0, NOTE_SPREAD]`, by a replica that has not yet heard [`FLEET_COUNTED`] others;
//!   every replica counts the senders it hears (its estimate of the fleet);
//! - `answers`: "a probe of mine was answered after one that was not", sent by a replica
//!   whose own probe saw it: a replica whose probes go unanswered takes it as the election.
//!
//! Why the inbox prefix: it is what tells one service from another on a connection (the
//! runtime knows no service name; the permissions name the user by it), it is the same for
//! every replica and every version of a service (it is configuration, not code), and its
//! subscription is granted already (`<inbox prefix>.>`, for replies). Services that share an
//! inbox prefix (the default `_INBOX`, say) share a channel, as every service of an account
//! once did: the notes are hints about one JetStream, the same for all.
//!
//! A note is a hint, never trusted further: a wrong `answers` wakes retries that find no
//! leader and wait again. Where the account may not use these subjects (permissions), no
//! note arrives, not even a replica's own, and the watch probes as a lone replica.

use std::collections::HashSet;
use std::time::Duration;

use super::{FLEET_COUNTED, FLEET_INTERVAL, FLEET_MAX};

/// The token after the inbox prefix that names the channel:
/// `<inbox prefix>._NT_FLEET.<kind>.<API prefix>`. (No inbox async-nats makes has it: those
/// are `<inbox prefix>.<22 random characters>[.<token>]`.)
pub(crate) const FLEET_TOKEN: &str = "_NT_FLEET";

/// The fleet channel of the service whose connection uses `inbox_prefix`, for the JetStream
/// whose API is under `api_prefix`: both notes (`<kind>` is `*`), as the watch subscribes
/// to it and the permissions grant it.
pub(crate) fn channel(inbox_prefix: &str, api_prefix: &str) -> String {
    note_subject(inbox_prefix, "*", api_prefix)
}

fn note_subject(inbox_prefix: &str, kind: &str, api_prefix: &str) -> String {
    format!("{inbox_prefix}.{FLEET_TOKEN}.{kind}.{api_prefix}")
}

/// One watch's end of the fleet channel of one service and one JetStream API.
#[derive(Debug, Clone)]
pub(crate) struct Fleet {
    waiting: String,
    answers: String,
    both: String,
    /// This watch's sender id (random), so that it does not count itself.
    me: u64,
}

/// A note read from the channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Note {
    Waiting(u64),
    Answers(u64),
}

impl Fleet {
    /// The channel of the service whose connection uses `inbox_prefix` (`_INBOX_billing`),
    /// for the JetStream whose API is under `api_prefix` (`$JS.API`).
    pub(crate) fn new(inbox_prefix: &str, api_prefix: &str) -> Fleet {
        Fleet {
            waiting: note_subject(inbox_prefix, "WAITING", api_prefix),
            answers: note_subject(inbox_prefix, "ANSWERS", api_prefix),
            both: channel(inbox_prefix, api_prefix),
            me: rand::random(),
        }
    }

    /// The subject to subscribe to: both notes.
    pub(super) fn subjects(&self) -> String {
        self.both.clone()
    }

    /// The subject and payload of this watch's `waiting` note, or of its `answers` one.
    pub(super) fn note(&self, waiting: bool) -> (String, String) {
        let subject = if waiting {
            &self.waiting
        } else {
            &self.answers
        };
        (subject.clone(), self.me.to_string())
    }

    /// The note a message on [`Fleet::subjects`] carries, if it is one.
    pub(super) fn read(&self, subject: &str, payload: &[u8]) -> Option<Note> {
        let sender = std::str::from_utf8(payload).ok()?.parse().ok()?;
        if subject == self.waiting {
            Some(Note::Waiting(sender))
        } else if subject == self.answers {
            Some(Note::Answers(sender))
        } else {
            None
        }
    }

    /// Whether `sender` is this watch.
    pub(super) fn is_me(&self, sender: u64) -> bool {
        sender == self.me
    }
}

/// What one watch has heard of its fleet while it runs.
#[derive(Debug, Default)]
pub(super) struct Census {
    /// Whether any note arrived, this watch's own included: the channel works.
    heard: bool,
    /// The other replicas that said they were waiting.
    others: HashSet<u64>,
}

impl Census {
    /// Records a note from `sender` (`me`: this watch's own, echoed back).
    pub(super) fn heard(&mut self, sender: u64, me: bool, waiting: bool) {
        self.heard = true;
        if waiting && !me && self.others.len() < FLEET_COUNTED {
            self.others.insert(sender);
        }
    }

    /// Whether this watch still tells the fleet it waits: not once it has heard enough
    /// others to probe at [`FLEET_MAX`] anyway.
    pub(super) fn worth_telling(&self) -> bool {
        self.others.len() < FLEET_COUNTED
    }

    /// The longest interval between this watch's probes, when the fleet shares what its
    /// probes find: the fleet's replicas (this one included) times [`FLEET_INTERVAL`], so
    /// that the fleet as a whole probes about every [`FLEET_INTERVAL`], up to [`FLEET_MAX`].
    /// `None` while no note arrived (alone, or the channel is closed to this account).
    pub(super) fn interval(&self) -> Option<Duration> {
        let replicas = u32::try_from(self.others.len() + 1).unwrap_or(u32::MAX);
        self.heard
            .then(|| FLEET_INTERVAL.saturating_mul(replicas).min(FLEET_MAX))
    }
}
