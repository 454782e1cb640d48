//! Why a consumer's session ended before shutdown ([`Loss`]): its supervisor ensures the
//! consumer again and resumes, and health shows the reason while it does.

use std::fmt;
use std::time::Duration;

/// Why a consumer's session was lost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::run) enum Loss {
    /// The consumer or its stream is gone from the server (a probe's or a poll's answer).
    Gone(String),
    /// The server ended the session's pull requests for good (the consumer deleted, turned
    /// push-based, or its request limits exceeded): status and description.
    PullEnded(String),
    /// The server answered a pull request with a status this runtime does not know.
    UnexpectedAnswer(String),
    /// No consumer leader took the pull requests for this long.
    NoResponders(Duration),
    /// A push consumer's delivery failed for good.
    PushFailed(String),
    /// The subscription the messages arrive on ended (the connection closed): `"pull"` or
    /// `"push"`.
    SubscriptionEnded(&'static str),
    /// The session could not be opened or go on: subscribing, or sending a pull request.
    Client(String),
    /// Nothing came from the consumer for this long while a request was open (no idle
    /// heartbeat): for a relay, whose consumer is its own, the consumer is created again from
    /// the relay's resume point rather than waited for (its single replica may be on a lost
    /// node; a queue consumer's is shared and replicated, and is probed instead).
    Silent(Duration),
    /// The consumer delivered up to consumer sequence `sent` (its idle heartbeat says so) while
    /// this session, its only reader, last received `received`: deliveries were lost on the
    /// way (with a connection or a node), or the consumer started over (its state lost with a
    /// node). A lost delivery holds a watch (`max_ack_pending = 1`) until its `ack_wait` and an
    /// ordered replay for good: the consumer is created again after the last message handled.
    Undelivered { sent: u64, received: u64 },
    /// An ordered replay restarts after its last handled message, on a consumer created
    /// again there (see `replay`); `at_once`: without waiting (a delivery lost), rather than
    /// after a backoff (a handler failure).
    Replay { why: String, at_once: bool },
}

impl Loss {
    /// Whether a relay that ran for a while is ensured again without waiting.
    pub(in crate::run) fn at_once(&self) -> bool {
        !matches!(self, Loss::Replay { at_once: false, .. })
    }

    /// Whether a relay's consumer is deleted and created again from the relay's own resume
    /// point, rather than read on: it holds a delivery that never arrived, or no leader takes
    /// its pull requests (a relay's consumer has one replica: one on a lost node stays
    /// unavailable until that node returns, while a new one is placed on a live node).
    pub(in crate::run) fn recreates(&self) -> bool {
        matches!(
            self,
            Loss::Undelivered { .. }
                | Loss::NoResponders(_)
                | Loss::Silent(_)
                | Loss::Replay { .. }
        )
    }
}

impl fmt::Display for Loss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Loss::Gone(why) => write!(f, "the consumer is gone: {why}"),
            Loss::PullEnded(status) => write!(f, "pull request ended: {status}"),
            Loss::UnexpectedAnswer(status) => {
                write!(f, "unexpected answer to a pull request: {status}")
            }
            Loss::NoResponders(window) => write!(
                f,
                "no responders to the pull requests for {window:?}: the consumer, its stream or \
                 JetStream is unavailable"
            ),
            Loss::PushFailed(why) => write!(f, "push delivery failed: {why}"),
            Loss::SubscriptionEnded(kind) => write!(f, "the {kind} subscription ended"),
            Loss::Client(why) => f.write_str(why),
            Loss::Silent(silence) => write!(
                f,
                "no idle heartbeat for {silence:?}: the consumer, its node or the link to it is \
                 lost; the consumer is created again after the last message handled"
            ),
            Loss::Undelivered { sent, received } if sent > received => write!(
                f,
                "the consumer delivered up to {sent} but this instance last received {received}: \
                 a delivery was lost on the way; the consumer is created again after the last \
                 message handled"
            ),
            Loss::Undelivered { sent, received } => write!(
                f,
                "the consumer's deliveries started over ({sent} after {received}): its state \
                 was lost with a node; the consumer is created again after the last message \
                 handled"
            ),
            Loss::Replay { why, .. } => {
                write!(
                    f,
                    "the ordered replay restarts after its last handled message: {why}"
                )
            }
        }
    }
}
