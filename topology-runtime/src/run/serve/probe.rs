//! Whether the server routes to this instance's core subscriptions now, proven by round trips
//! through it: a request that this connection itself answers (a service's own
//! `$SRV.PING.<name>.<id>`, or a probe subject of a subscription's own). The server handles a
//! connection's operations in order, so an answer to a request sent after a `SUB` proves that
//! the `SUB` is in place there (a flush would only prove that the bytes left this process).
//! Proven at once after subscribing, then every heartbeat: no answer within a heartbeat makes
//! the subscriptions `stalled`, a connection that is down makes them `disconnected`, both
//! until the next answer.

use std::convert::Infallible;
use std::future::Future;
use std::pin::pin;
use std::time::Duration;

use async_nats::connection::State;
use async_nats::{Client, RequestErrorKind, Subject, Subscriber};
use bytes::Bytes;
use futures::StreamExt;
use tokio::time::Instant;

use crate::health::ServingState;
use crate::run::Settings;

/// Proves the subscriptions of one connection through a subject this connection answers.
pub(in crate::run) struct Prober {
    client: Client,
    subject: Subject,
    heartbeat: Duration,
    reconnect_check: Duration,
    /// The subscription that answers the probes, when nothing else does (a core
    /// subscription's own probe subject).
    echo: Option<Subscriber>,
}

impl Prober {
    /// Proves through `subject`, which something else on this connection answers (a
    /// service's `$SRV.PING.<name>.<id>`).
    pub(in crate::run) fn answered_by_others(
        client: &Client,
        subject: String,
        settings: &Settings,
    ) -> Prober {
        Prober {
            client: client.clone(),
            subject: subject.into(),
            heartbeat: settings.heartbeat,
            reconnect_check: settings.reconnect_check,
            echo: None,
        }
    }

    /// Proves through an inbox subject of its own, which it answers itself while it proves.
    pub(in crate::run) async fn with_echo(
        client: &Client,
        settings: &Settings,
    ) -> Result<Prober, async_nats::SubscribeError> {
        let subject: Subject = client.new_inbox().into();
        let echo = client.subscribe(subject.clone()).await?;
        Ok(Prober {
            client: client.clone(),
            subject,
            heartbeat: settings.heartbeat,
            reconnect_check: settings.reconnect_check,
            echo: Some(echo),
        })
    }

    /// The subject it proves through, which this connection answers while it proves.
    pub(in crate::run) fn subject(&self) -> Subject {
        self.subject.clone()
    }

    /// Proves the link now, then every heartbeat, reporting the state each proof shows
    /// (`Running`, `Stalled`, `Disconnected`); never returns. Cancel-safe: dropping it stops
    /// proving.
    pub(in crate::run) async fn keep_proving(
        &mut self,
        report: impl Fn(ServingState),
    ) -> Infallible {
        let mut answered = Instant::now();
        let mut due = Instant::now();
        loop {
            // Until the next proof is due, the connection is checked every `reconnect_check`:
            // a connection that is down is reported at once, and proven as soon as it is up.
            loop {
                if self.client.connection_state() != State::Connected {
                    report(ServingState::Disconnected);
                    due = Instant::now();
                    let wait = tokio::time::sleep(self.reconnect_check);
                    self.answering(wait).await;
                    continue;
                }
                let now = Instant::now();
                if now >= due {
                    break;
                }
                let wait = tokio::time::sleep_until(due.min(now + self.reconnect_check));
                self.answering(wait).await;
            }
            let sent = Instant::now();
            match self.round_trip().await {
                Ok(_) => {
                    answered = Instant::now();
                    report(ServingState::Running);
                    due = sent + self.heartbeat;
                }
                Err(e) if self.client.connection_state() != State::Connected => {
                    tracing::debug!(subject = %self.subject, error = %e, "probe lost with the connection");
                    report(ServingState::Disconnected);
                    due = Instant::now();
                }
                Err(e) => {
                    let cause = match e.kind() {
                        RequestErrorKind::TimedOut => format!(
                            "no answer within {:?} to the probe on `{}`, which this connection \
                             answers itself: a stalled link, or a server that does not route to \
                             this instance; proven again at once",
                            self.heartbeat, self.subject
                        ),
                        RequestErrorKind::NoResponders => format!(
                            "the server knows no subscription on `{}` (the probe subject this \
                             connection answers): its subscriptions are not in place there; \
                             proven again every {:?}",
                            self.subject, self.reconnect_check
                        ),
                        _ => format!("the probe on `{}` failed: {e}", self.subject),
                    };
                    report(ServingState::Stalled {
                        silent_for: answered.elapsed(),
                        cause,
                    });
                    due = match e.kind() {
                        // It already waited a heartbeat.
                        RequestErrorKind::TimedOut => Instant::now(),
                        _ => Instant::now() + self.reconnect_check,
                    };
                }
            }
        }
    }

    /// One round trip, bounded by a heartbeat (answering the echo subject meanwhile).
    pub(in crate::run) async fn round_trip(&mut self) -> Result<(), async_nats::RequestError> {
        let client = self.client.clone();
        let subject = self.subject.clone();
        let asked = round_trip(&client, &subject, self.heartbeat);
        self.answering(asked).await
    }

    /// Runs `work`, answering the echo subject meanwhile.
    async fn answering<F: Future>(&mut self, work: F) -> F::Output {
        let mut work = pin!(work);
        loop {
            let Some(echo) = self.echo.as_mut() else {
                return work.await;
            };
            tokio::select! {
                biased;
                out = &mut work => return out,
                probe = echo.next() => match probe {
                    Some(probe) => {
                        if let Some(reply) = probe.reply {
                            // Fails only on a closed client: the probe then goes unanswered.
                            let _ = self.client.publish(reply, Bytes::new()).await;
                        }
                    }
                    // The client closed: nothing answers the probes any more.
                    None => self.echo = None,
                },
            }
        }
    }
}

/// A request to `subject` that this connection answers, bounded by `timeout`.
async fn round_trip(
    client: &Client,
    subject: &Subject,
    timeout: Duration,
) -> Result<(), async_nats::RequestError> {
    let request = async_nats::Request::new()
        .payload(Bytes::new())
        .timeout(Some(timeout));
    client
        .send_request(subject.clone(), request)
        .await
        .map(drop)
}
