//! A pull session's place in its consumer's priority group (nats-server 2.11, ADR-42): what
//! its pull requests say (`group`; the pin `id` of a pinned client; the thresholds of a
//! spill-over instance), and whether it is pinned.
//!
//! Pinned client, as the server runs it: the first request to be served while nobody is pinned
//! takes the pin, and every message then carries it (`Nats-Pin-Id`). Requests that name it
//! renew it; requests without an id are held (this instance stands by) until the pin is
//! released: by `$JS.API.CONSUMER.UNPIN` (a drain here) or after `priority_timeout` without a
//! request naming it. A request naming a pin that is no longer current is answered 423.

use std::sync::Arc;
use std::time::Duration;

use topology_core::model::{Overflow, Priority};

use crate::health::Slot;
use crate::provision::PRIORITY_GROUP;

/// The header carrying the pin on a pinned consumer's messages.
const PIN_HEADER: &str = "Nats-Pin-Id";

/// How a session's requests take part in the priority group.
pub(in crate::run) enum PullPriority {
    /// No priority group.
    None,
    /// A pinned client: the pin this session holds, if any.
    Pinned { pin: Option<String> },
    /// Overflow; `Some` thresholds on a spill-over instance.
    Overflow(Option<Overflow>),
}

impl PullPriority {
    /// The session's part for `priority` (declared); `spill_over`: this instance applies the
    /// declared overflow thresholds.
    pub(in crate::run) fn of(priority: Option<&Priority>, spill_over: bool) -> PullPriority {
        match priority {
            None => PullPriority::None,
            Some(Priority::PinnedClient { .. }) => PullPriority::Pinned { pin: None },
            Some(Priority::Overflow(thresholds)) => {
                PullPriority::Overflow(spill_over.then_some(*thresholds))
            }
        }
    }

    /// Whether this session stands by: a pinned client without the pin.
    pub(super) fn stands_by(&self) -> bool {
        matches!(self, PullPriority::Pinned { pin: None })
    }

    /// The pin this session holds.
    pub(super) fn pin(&self) -> Option<&str> {
        match self {
            PullPriority::Pinned { pin } => pin.as_deref(),
            _ => None,
        }
    }

    /// Adds the priority fields to a pull request (JSON, written without its closing brace).
    pub(super) fn fields(&self, request: &mut String) {
        use std::fmt::Write;
        // The group's name is a constant of letters: written as it is, with no JSON value built
        // for it on every request.
        const _: () = assert!(
            is_plain(PRIORITY_GROUP),
            "the group name needs no JSON escape"
        );
        let group = format_args!("\"{PRIORITY_GROUP}\"");
        match self {
            PullPriority::None => {}
            PullPriority::Pinned { pin } => {
                let _ = write!(request, ",\"group\":{group}");
                if let Some(pin) = pin {
                    let _ = write!(request, ",\"id\":{}", serde_json::Value::from(pin.as_str()));
                }
            }
            PullPriority::Overflow(thresholds) => {
                let _ = write!(request, ",\"group\":{group}");
                let thresholds = thresholds.unwrap_or_default();
                if let Some(n) = thresholds.min_pending {
                    let _ = write!(request, ",\"min_pending\":{n}");
                }
                if let Some(n) = thresholds.min_ack_pending {
                    let _ = write!(request, ",\"min_ack_pending\":{n}");
                }
            }
        }
    }

    /// A message arrived: on a pinned consumer it carries the pin. Returns true when this
    /// session just took the pin (its requests without it are held by the server: the caller
    /// asks again with it).
    pub(super) fn delivered(&mut self, message: &async_nats::Message, slot: &Arc<Slot>) -> bool {
        let PullPriority::Pinned { pin } = self else {
            return false;
        };
        let Some(id) = (message.headers.as_ref()).and_then(|h| h.get(PIN_HEADER)) else {
            return false;
        };
        if pin.as_deref() == Some(id.as_str()) {
            return false;
        }
        tracing::info!(stream = %slot.stream, consumer = %slot.consumer, "pinned: this instance consumes; the others stand by");
        *pin = Some(id.as_str().to_owned());
        slot.standby(false);
        true
    }

    /// A 423: a request named a pin that is no longer current. Returns true when this session
    /// held that pin (it stands by again; its requests naming it are all refused); false for
    /// the refusal of a request already forgotten.
    pub(super) fn pin_lost(&mut self, slot: &Arc<Slot>) -> bool {
        let PullPriority::Pinned { pin } = self else {
            return false;
        };
        if pin.take().is_none() {
            return false;
        }
        tracing::info!(stream = %slot.stream, consumer = %slot.consumer, "the pin moved to another instance; standing by");
        slot.standby(true);
        true
    }
}

/// Releases the pin `pin` of a session that ends (`subject`: the consumer's
/// `$JS.API.CONSUMER.UNPIN.<stream>.<consumer>`), so that a standby instance takes over now
/// rather than after `pinned_ttl` (a rolling deploy does not wait it out). Waits at most
/// `wait` for the answer; a failure leaves the handover to `pinned_ttl`, with a warning.
pub(super) async fn unpin(client: &async_nats::Client, subject: &str, pin: &str, wait: Duration) {
    let body = serde_json::json!({ "group": PRIORITY_GROUP }).to_string();
    let request = client.request(subject.to_owned(), body.into());
    let failure = match tokio::time::timeout(wait, request).await {
        Ok(Ok(answer)) => {
            let answer = String::from_utf8_lossy(&answer.payload);
            if !answer.contains("\"error\"") {
                tracing::info!(subject, pin, "unpinned: another instance takes over");
                return;
            }
            answer.into_owned()
        }
        Ok(Err(e)) => e.to_string(),
        Err(_) => format!("no answer within {wait:?}"),
    };
    tracing::warn!(
        subject,
        pin,
        failure,
        "could not unpin; another instance takes over after pinned_ttl"
    );
}

/// Whether `name` is letters, digits, `-` and `_` only (written into JSON as it is).
const fn is_plain(name: &str) -> bool {
    let bytes = name.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if !(bytes[i].is_ascii_alphanumeric() || bytes[i] == b'-' || bytes[i] == b'_') {
            return false;
        }
        i += 1;
    }
    true
}
