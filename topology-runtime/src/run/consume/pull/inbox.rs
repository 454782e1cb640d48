//! What the server sends to a pull session's inbox, classified once ([`Inbox`]), and taken
//! by the session ([`Puller::take`]).
//!
//! Statuses: 100 idle heartbeat (liveness, and the consumer sequence of its last delivery), 408 a request expired, 409 a request ended (the
//! consumer was deleted, its leader changed, a limit was exceeded), 503 no responders (no
//! consumer leader subscribes to the pull subject now: the consumer, its stream or JetStream
//! is unavailable, or a leader is being elected), 423 a request named a pin that is no
//! longer current (a pinned-client priority group). The 408/409 of a request that delivered
//! part of its batch carry how many it did not (`Nats-Pending-Messages`).

use async_nats::StatusCode;
use async_nats::jetstream;
use tokio::time::Instant;

use super::super::ack::Fetched;
use super::super::loss::Loss;
use super::Puller;

/// One thing the server sent to the inbox.
pub(super) enum Inbox {
    /// A message of the consumer.
    Message(async_nats::Message),
    /// An idle heartbeat: the consumer holds a request and has nothing to deliver. It says
    /// the consumer sequence of the last delivery the consumer made (`Nats-Last-Consumer`),
    /// to whichever request.
    Heartbeat { last_delivered: Option<u64> },
    /// The oldest open request ended without delivering the rest of its batch (it expired,
    /// or the server ended it).
    OldestEnded,
    /// The consumer's new leader ended a request the old one held (409 Leadership Change,
    /// nats-server 2.7.1 and later): that request is gone; nothing else is wrong.
    LeaderChanged,
    /// The newest request was refused (the consumer's `max_waiting` is reached), with what
    /// the server said.
    NewestRefused(String),
    /// No responder: no consumer leader takes pull requests now.
    NoResponders,
    /// 423: a request named a pin (priority group) that is no longer current; that request
    /// is ended.
    PinRefused,
    /// The consumer cannot be pulled from any more (deleted, push based, a request limit
    /// exceeded), or an answer that asking again at once could repeat in a hot loop: the
    /// session ends and the supervisor ensures the consumer again, with its backoff.
    Lost(Loss),
}

impl Inbox {
    pub(super) fn of(message: async_nats::Message) -> Inbox {
        let status = message.status.unwrap_or(StatusCode::OK);
        if status == StatusCode::OK {
            return Inbox::Message(message);
        }
        if status == StatusCode::IDLE_HEARTBEAT {
            let last_delivered = message
                .headers
                .as_ref()
                .and_then(|h| h.get("Nats-Last-Consumer"))
                .and_then(|v| v.as_str().parse().ok());
            return Inbox::Heartbeat { last_delivered };
        }
        if status == StatusCode::NO_RESPONDERS {
            return Inbox::NoResponders;
        }
        if status.as_u16() == 423 {
            return Inbox::PinRefused;
        }
        let description = message.description.as_deref().unwrap_or_default();
        if description == "Consumer Deleted"
            || description == "Consumer is push based"
            || description.starts_with("Exceeded MaxRequest")
        {
            return Inbox::Lost(Loss::PullEnded(format!("{status} {description}")));
        }
        if description == "Leadership Change" {
            return Inbox::LeaderChanged;
        }
        let ended_one = message
            .headers
            .as_ref()
            .is_some_and(|h| h.get("Nats-Pending-Messages").is_some());
        if ended_one || status == StatusCode::TIMEOUT || status == StatusCode::NOT_FOUND {
            Inbox::OldestEnded
        } else if description.starts_with("Exceeded MaxWaiting") {
            Inbox::NewestRefused(format!("{status} {description}"))
        } else {
            Inbox::Lost(Loss::UnexpectedAnswer(format!("{status} {description}")))
        }
    }
}

impl Puller {
    /// Accounts for one thing the server sent to the inbox: a message is returned; a status
    /// updates the open requests, or reports the consumer lost.
    pub(super) fn take(&mut self, message: async_nats::Message) -> Result<Option<Fetched>, Loss> {
        let now = Instant::now();
        if self.liveness.is_stalled() {
            // Whatever comes after a silence may have waited in a stalled link while the
            // server gave it to another instance.
            self.suspect();
        }
        let inbox = Inbox::of(message);
        // A 503 is the server saying that no consumer takes the request: not the consumer
        // heard, so the silence its heartbeats measure goes on.
        if !matches!(inbox, Inbox::NoResponders) {
            self.heard = now;
            self.refused = None;
            self.liveness.heard();
        }
        match inbox {
            Inbox::Message(message) => {
                self.admitted();
                let delivered_after = self.requests.delivered(now);
                if self.priority.delivered(&message, &self.slot) {
                    // Pinned: the server holds the requests that do not name the pin; ask
                    // again with it (what the others still deliver is taken as stray).
                    self.requests.forget(|_| true);
                    self.suspect();
                }
                let fetched = Fetched::new(
                    jetstream::Message {
                        message,
                        context: self.common.jetstream.clone(),
                    },
                    delivered_after,
                );
                self.pending_after_last = fetched.meta.pending;
                if let Some(unacked) = &mut self.unacked {
                    unacked.received(&fetched);
                }
                if let Some(received) = &mut self.received
                    && fetched.meta.stream_sequence.is_some()
                {
                    // The only reader receives every delivery, in order: one that does not
                    // follow the last means one lost on the way, or the consumer's state lost
                    // with its node (restarted, it starts over as declared, past what was
                    // published while it was down).
                    let delivered = fetched.meta.consumer_sequence;
                    if delivered != *received + 1 {
                        return Err(Loss::Undelivered {
                            sent: delivered,
                            received: *received,
                        });
                    }
                    *received = delivered;
                }
                Ok(Some(fetched))
            }
            Inbox::Heartbeat { last_delivered } => match (self.received, last_delivered) {
                // A request of this session waits at the consumer.
                _ if self.crowded.is_some() => {
                    self.admitted();
                    Ok(None)
                }
                // The heartbeat follows every earlier delivery to this inbox on the same
                // connection: one it names that did not come went elsewhere, and is lost.
                (Some(received), Some(sent)) if sent != received => {
                    Err(Loss::Undelivered { sent, received })
                }
                _ => Ok(None),
            },
            Inbox::PinRefused => {
                // Every open request named the lost pin: all are refused; ask again without.
                if self.priority.pin_lost(&self.slot) {
                    self.requests.forget(|_| true);
                    self.suspect();
                }
                Ok(None)
            }
            Inbox::OldestEnded | Inbox::LeaderChanged => {
                self.requests.oldest_ended();
                Ok(None)
            }
            Inbox::NewestRefused(said) => {
                self.wait_list_refused(&said);
                Ok(None)
            }
            Inbox::NoResponders => {
                self.no_responder()?;
                Ok(None)
            }
            Inbox::Lost(why) => Err(why),
        }
    }
}
