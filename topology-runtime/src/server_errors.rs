//! What a connection's server says outside any request: a `-ERR 'Permissions Violation for
//! Publish to "…"'` reaches only the connection's event callback (async-nats reports it as
//! `Event::ServerError`), never the request or the subscription it concerns, which just get
//! no answer. The connections [`connect`](fn@crate::connect) makes carry a callback that keeps
//! them here, so that the runtime on such a connection can say in health which declaration a
//! denied subject concerns (see `run/watchers/violations.rs`).
//!
//! The callback is set before the client exists; the client is found again by its
//! statistics, which every clone of it shares and nothing else does.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, Weak};

use async_nats::{Client, ClientError, ConnectOptions, Event, ServerAddr, ServerError, Statistics};
use tokio::sync::broadcast;

use crate::grant::Verb;

/// How many recent violations a connection keeps for a runtime built after they came.
const RECENT: usize = 64;

/// What the runtime hears of its connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Heard {
    /// A denial.
    Violation(Violation),
    /// The connection was (re-)established: the server says each denial once per
    /// connection, so what it said on the last one no longer tells, and what still is
    /// denied is said again.
    Connected,
}

/// One denial the server reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Violation {
    /// A publish (a request is one) or a subscription.
    pub(crate) action: Verb,
    /// The subject denied (a subscription's may be a pattern).
    pub(crate) subject: String,
    /// The queue group of a denied subscription made in one.
    pub(crate) queue: Option<String>,
    /// When it was reported.
    pub(crate) at: tokio::time::Instant,
}

/// One connection's reported violations (the recent ones, and the ones to come), the servers
/// it lists, and the last failure to connect the client reported (until it connects).
pub(crate) struct ServerErrors {
    recent: Mutex<VecDeque<Violation>>,
    coming: broadcast::Sender<Heard>,
    servers: Mutex<Vec<ServerAddr>>,
    failure: Mutex<Option<String>>,
}

impl ServerErrors {
    fn new() -> Arc<ServerErrors> {
        Arc::new(ServerErrors {
            recent: Mutex::new(VecDeque::new()),
            coming: broadcast::Sender::new(RECENT),
            servers: Mutex::new(Vec::new()),
            failure: Mutex::new(None),
        })
    }

    /// The servers the connection lists, and the last failure to connect the client reported
    /// since it was last connected.
    pub(crate) fn connection(&self) -> (Vec<ServerAddr>, Option<String>) {
        let servers = self
            .servers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let failure = self
            .failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        (servers, failure)
    }

    fn failed(&self, what: String) {
        *self.failure.lock().unwrap_or_else(|e| e.into_inner()) = Some(what);
    }

    fn report(&self, violation: Violation) {
        let mut recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        if recent.len() == RECENT {
            recent.pop_front();
        }
        recent.push_back(violation.clone());
        drop(recent);
        let _ = self.coming.send(Heard::Violation(violation));
    }

    fn connected(&self) {
        *self.failure.lock().unwrap_or_else(|e| e.into_inner()) = None;
        self.recent
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        let _ = self.coming.send(Heard::Connected);
    }

    /// The violations reported so far (the last [`RECENT`]) and a receiver of the next ones.
    pub(crate) fn subscribe(&self) -> (Vec<Violation>, broadcast::Receiver<Heard>) {
        // Under the lock: a violation is in the list or comes through the receiver, not both.
        let recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        let receiver = self.coming.subscribe();
        (recent.iter().cloned().collect(), receiver)
    }
}

/// The connections whose server errors are kept, by their statistics.
static CONNECTIONS: Mutex<Vec<(Weak<Statistics>, Arc<ServerErrors>)>> = Mutex::new(Vec::new());

/// `options` with an event callback that keeps the server's permission violations (and logs
/// every server error), and where they are kept; [`register`] the client once connected.
pub(crate) fn keep_server_errors(options: ConnectOptions) -> (ConnectOptions, Arc<ServerErrors>) {
    let errors = ServerErrors::new();
    let kept = errors.clone();
    let options = options.event_callback(move |event| {
        let kept = kept.clone();
        async move {
            match event {
                Event::ServerError(ServerError::Other(text)) => match parse_violation(&text) {
                    // Said at ERROR by the runtime's denial watch, once per entry of the
                    // permissions that would grant it (every ack has a subject of its own).
                    Some(violation) => {
                        tracing::debug!(
                            action = violation.action.as_str(),
                            subject = %violation.subject,
                            "the server denied a {} to `{}`",
                            violation.action.as_str(),
                            violation.subject
                        );
                        kept.report(violation);
                    }
                    None => tracing::warn!(error = %text, "the server reported an error"),
                },
                Event::ServerError(ServerError::AuthorizationViolation) => {
                    tracing::warn!("the server refused the connection's credentials");
                    kept.failed("authorization violation".to_owned());
                }
                Event::ServerError(error) => {
                    tracing::warn!(error = %error, "the server reported an error")
                }
                // A failed attempt to connect: async-nats says only its kind ("IO error",
                // "TLS error", "authorization violation", ...); `connect::diagnose` says more.
                Event::ClientError(ClientError::Other(kind)) => {
                    tracing::debug!(error = %kind, "could not connect");
                    kept.failed(kind);
                }
                Event::Connected => kept.connected(),
                other => tracing::debug!(event = %other, "connection event"),
            }
        }
    });
    (options, errors)
}

/// Records that `client` (connected to `servers`) keeps its server errors in `errors`.
pub(crate) fn register(client: &Client, servers: Vec<ServerAddr>, errors: Arc<ServerErrors>) {
    *errors.servers.lock().unwrap_or_else(|e| e.into_inner()) = servers;
    let mut connections = CONNECTIONS.lock().unwrap_or_else(|e| e.into_inner());
    connections.retain(|(stats, _)| stats.strong_count() > 0);
    connections.push((Arc::downgrade(&client.statistics()), errors));
}

/// Where `client`'s server errors are kept, if it was made by [`crate::connect`](fn@crate::connect) (or
/// registered otherwise).
pub(crate) fn of(client: &Client) -> Option<Arc<ServerErrors>> {
    let stats = client.statistics();
    let connections = CONNECTIONS.lock().unwrap_or_else(|e| e.into_inner());
    connections
        .iter()
        .find(|(kept, _)| std::ptr::eq(kept.as_ptr(), Arc::as_ptr(&stats)))
        .map(|(_, errors)| errors.clone())
}

/// What makes a request from `client` to `subject` go unanswered for good: the server
/// denied publishing to `subject`, or subscribing to the connection's inboxes (where the
/// answer would come).
struct RequestDenial<'a> {
    subject: &'a str,
    inboxes: String,
}

impl RequestDenial<'_> {
    fn matches(&self, violation: &Violation) -> bool {
        match violation.action {
            Verb::Publish => violation.subject == self.subject,
            Verb::Subscribe => violation.subject.starts_with(&self.inboxes),
        }
    }
}

/// How long a request whose subject was denied earlier on this connection may take before
/// it counts as denied again (the server says a denial once per connection, so only an
/// answer shows that it was granted since).
const DENIED_AGAIN_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

/// Runs `request` (from `client`, to `subject`) until it is answered, or until the server
/// says (or has said on this connection) that it denies it: then the denial, at once rather
/// than after the request's timeout and its retries.
pub(crate) async fn unless_denied<T>(
    client: &Client,
    subject: &str,
    request: impl std::future::Future<Output = T>,
) -> Result<T, Violation> {
    let Some(errors) = of(client) else {
        return Ok(request.await);
    };
    let denial = RequestDenial {
        subject,
        inboxes: format!("{}.", inbox_prefix(client)),
    };
    let (recent, mut coming) = errors.subscribe();
    if let Some(earlier) = recent.into_iter().find(|v| denial.matches(v)) {
        return tokio::time::timeout(DENIED_AGAIN_AFTER, request)
            .await
            .map_err(|_| earlier);
    }
    let denied = async {
        loop {
            match coming.recv().await {
                Ok(Heard::Violation(v)) if denial.matches(&v) => return v,
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => std::future::pending::<()>().await,
            }
        }
    };
    tokio::select! {
        answered = request => Ok(answered),
        violation = denied => Err(violation),
    }
}

/// The prefix of `client`'s inboxes (its `custom_inbox_prefix`, `_INBOX` by default), which
/// the client does not expose: an inbox without its last token.
pub(crate) fn inbox_prefix(client: &Client) -> String {
    let inbox = client.new_inbox();
    match inbox.rsplit_once('.') {
        Some((prefix, _)) => prefix.to_owned(),
        None => inbox,
    }
}

/// `Permissions Violation for Publish to "a.b"` and `… for Subscription to "a.>" using queue
/// "q"` (nats-server's wording; async-nats passes it without the outer quotes).
fn parse_violation(text: &str) -> Option<Violation> {
    let rest = text.trim().trim_matches('\'');
    let rest = rest.strip_prefix("Permissions Violation for ")?;
    let (action, rest) = if let Some(rest) = rest.strip_prefix("Publish to ") {
        (Verb::Publish, rest)
    } else if let Some(rest) = rest.strip_prefix("Subscription to ") {
        (Verb::Subscribe, rest)
    } else {
        return None;
    };
    let subject = rest.strip_prefix('"')?;
    let end = subject.find('"')?;
    let queue = subject[end + 1..]
        .trim_start()
        .strip_prefix("using queue \"")
        .and_then(|queue| queue.find('"').map(|end| queue[..end].to_owned()));
    Some(Violation {
        action,
        subject: subject[..end].to_owned(),
        queue,
        at: tokio::time::Instant::now(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> Option<(Verb, String)> {
        parse_violation(text).map(|v| (v.action, v.subject))
    }

    #[test]
    fn a_refused_queue_subscription_names_its_group() {
        let queue = |text: &str| parse_violation(text).and_then(|v| v.queue);
        assert_eq!(
            queue(r#"'Permissions Violation for Subscription to "a.>" using queue "q"'"#),
            Some("q".into())
        );
        assert_eq!(
            queue(r#"Permissions Violation for Subscription to "a.>""#),
            None
        );
        assert_eq!(queue(r#"Permissions Violation for Publish to "a.b""#), None);
    }

    #[test]
    fn violations_as_nats_server_words_them() {
        assert_eq!(
            parsed(r#"Permissions Violation for Publish to "$JS.API.INFO""#),
            Some((Verb::Publish, "$JS.API.INFO".into()))
        );
        assert_eq!(
            parsed(r#"'Permissions Violation for Subscription to "a.>" using queue "q"'"#),
            Some((Verb::Subscribe, "a.>".into()))
        );
        assert_eq!(parsed("Maximum Payload Violation"), None);
        assert_eq!(parsed("Permissions Violation for Publish to x"), None);
        assert_eq!(
            parsed(r#"Permissions Violation for Publish with Reply of "_INBOX.x""#),
            None
        );
    }
}
