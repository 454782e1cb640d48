//! Consuming: one supervised task per queue consumer, relay or watch, from the pull request to
//! the settled message. Each step decides one thing:
//!
//! - `supervise`: the task: ensure, consume, re-ensure after a loss, drain.
//! - `open`: a session of an ensured consumer: what its handlers share, its flow, its feed.
//! - `resume`: where a re-created consumer resumes (tied to the stream instance).
//! - `floor`: the ack floor read while a queue consumer runs (resume point, lag, cut off).
//! - `feed`: where a consumer's messages come from (`pull`: our own pull requests; push).
//! - `pull`: the pull requests, their inbox, the liveness of the pulls, priority groups.
//! - `flow`: how many messages to ask for.
//! - `pump`: how many messages are held and started at once.
//! - `loss`: why a consumer's session ended before shutdown; its supervisor ensures it again.
//! - `relay`: a relay's own consumer, deleted and created again where its node was lost.
//! - `dispatch`: one message from fetched to settled (`meta`: what its ack subject says).
//! - `early`: a partition's next message, read from its stream to run as soon as the one
//!   before it is handled.
//! - (`crate::outage`): a queue consumer whose handlers keep failing stops taking messages
//!   and probes with one until a handler succeeds (what they depend on is down).
//! - `ack`: every settle (ack, nak, term, progress): fire-and-forget, or confirmed before the
//!   delivery's deadline, or none for a consumer that takes no acks.
//! - `settled`: how a session delivering one message at a time last settled its messages
//!   (sent again when lost, settled again on a redelivery).
//! - `dead_letter`: a message that will not be handled, published with its error.
//! - `outcome`: one observer of each message's outcome for health, metrics and resume.
//! - `replay`: an ordered replay's own place in its stream.
//! - `partitions`: a partitioned group's membership, and each partition's supervisor, run
//!   while this replica holds it.

mod ack;
mod dead_letter;
mod dispatch;
mod early;
mod early_run;
mod feed;
mod floor;
mod flow;
mod loss;
mod meta;
mod open;
mod outcome;
mod partitions;
mod pull;
mod pump;
mod relay;
mod replay;
mod resume;
mod settled;
mod supervise;

pub(super) use partitions::{hold, share};
pub(super) use supervise::supervise;
