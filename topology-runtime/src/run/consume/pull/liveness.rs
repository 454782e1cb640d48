//! Whether a pull session hears its consumer. Nothing from the server for two idle heartbeats
//! (plus the round trip) while it should have spoken turns the consumer `stalled`; the
//! consumer is then asked whether it answers through this connection (`CONSUMER.INFO`, which
//! its leader answers) every heartbeat, until the server is heard again. While no request is
//! open (every handler busy) the server has nothing to say, so the same question, asked
//! every heartbeat, stands for the heartbeats. And a replicated consumer's leader is
//! followed: a new leader's advisory makes the session pull again at once (the old leader took
//! the open requests with it).

use super::super::loss::Loss;
use super::super::settled::LastSettled;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tokio::time::Instant;

use crate::health::{ConsumerState, Slot};
use crate::provision::{ADVISORY_PREFIX, Advisories};

/// What the session must act on.
pub(super) enum Event {
    /// The consumer has a new leader: the open requests are gone with the old one.
    LeaderElected,
    /// The consumer answered a probe: it exists, and its leader answers through this
    /// connection; `full` says so when its wait list is full (as many requests wait as its
    /// `max_waiting`: the server drops more without a word).
    Answered { full: Option<String> },
    /// The consumer or its stream is gone: the session ends.
    Gone(Loss),
}

/// A probe's outcome.
enum Probe {
    /// Answered, after this round trip; whether its wait list is full, and how.
    Answers(Duration, Option<String>),
    Gone(String),
    Unanswered(String),
}

type Probing = Pin<Box<dyn Future<Output = Probe> + Send>>;

/// One pull session's liveness: see the module documentation.
pub(super) struct Liveness {
    slot: Arc<Slot>,
    stalls: metrics::Counter,
    heartbeat: Duration,
    /// The round trip to the consumer as last measured (the session's first request, a
    /// probe): silence is counted from when the server could have answered.
    rtt: Duration,
    /// `<api prefix>.CONSUMER.INFO.<stream>.<consumer>`.
    info_subject: async_nats::Subject,
    /// The consumer's leader advisories (none behind an arbitrary API prefix, where nothing
    /// says whose they are).
    advisories: Option<(async_nats::Subscriber, Advisories)>,
    stalled: bool,
    /// The connection changed and the consumer has not answered through the new one yet:
    /// `stalled` in health until it does (the silence deadline still runs).
    unproven: bool,
    /// See [`Watch::only_reader`]: a silence ends the session (the consumer is created again)
    /// instead of turning it `stalled`.
    only_reader: bool,
    probe: Option<Probing>,
    /// When the next probe may be sent.
    next_probe: Instant,
}

/// What a session's liveness needs from its supervisor.
pub(in crate::run) struct Watch {
    pub(in crate::run) slot: Arc<Slot>,
    /// The session is its consumer's only reader (a relay): every delivery the consumer makes
    /// is for it, so a heartbeat naming a later delivery than the last received means one was
    /// lost on the way.
    pub(in crate::run) only_reader: bool,
    pub(in crate::run) stalls: metrics::Counter,
    pub(in crate::run) advisories: Advisories,
    /// For a consumer that delivers one message at a time: how this session last settled a
    /// message, sent again if it was lost with a connection (see `unacked`).
    pub(in crate::run) last: Option<LastSettled>,
}

impl Liveness {
    pub(super) async fn new(
        client: &async_nats::Client,
        (api_prefix, stream, consumer): (&str, &str, &str),
        heartbeat: Duration,
        watch: Watch,
    ) -> Liveness {
        let advisories = match watch.advisories {
            Advisories::None => None,
            accepted => {
                let subject =
                    format!("{ADVISORY_PREFIX}.CONSUMER.LEADER_ELECTED.{stream}.{consumer}");
                match client.subscribe(subject).await {
                    Ok(subscriber) => Some((subscriber, accepted)),
                    Err(e) => {
                        tracing::debug!(stream, consumer, error = %e, "no leader advisories; a lost leader is noticed by silence");
                        None
                    }
                }
            }
        };
        Liveness {
            slot: watch.slot,
            stalls: watch.stalls,
            heartbeat,
            rtt: Duration::ZERO,
            info_subject: format!("{api_prefix}.CONSUMER.INFO.{stream}.{consumer}").into(),
            advisories,
            stalled: false,
            unproven: false,
            only_reader: watch.only_reader,
            probe: None,
            next_probe: Instant::now(),
        }
    }

    /// Records a round trip measured by the session (its first request's answer).
    pub(super) fn measured(&mut self, rtt: Duration) {
        self.rtt = rtt;
    }

    pub(super) fn is_stalled(&self) -> bool {
        self.stalled
    }

    /// How long the session may hear nothing while a request is open.
    fn silence(&self) -> Duration {
        self.heartbeat * 2 + self.rtt
    }

    /// `<api prefix>.CONSUMER.INFO.<stream>.<consumer>`.
    pub(super) fn info_subject(&self) -> &async_nats::Subject {
        &self.info_subject
    }

    /// The server was heard: a stalled consumer runs again (unless its leader here is cut
    /// off from its peers: the ack-floor read decides that one).
    pub(super) fn heard(&mut self) {
        if self.stalled || self.unproven {
            self.stalled = false;
            self.unproven = false;
            self.probe = None;
            if !self.slot.is_cut_off() {
                self.slot.up();
            }
        }
    }

    /// The session ends: nothing more is reported.
    pub(super) fn forget(&mut self) {
        self.stalled = false;
        self.unproven = false;
        self.probe = None;
    }

    /// The session's connection changed (`heard`: when that was noticed): until the consumer
    /// answers through the new one, nothing says it delivers here, so health says `stalled`.
    /// Only the sessions that ask at once after a reconnection (a relay's) report it: the
    /// others would wait a heartbeat for their first answer.
    pub(super) fn reconnected(&mut self, heard: Instant) {
        self.unproven = true;
        self.report(
            heard,
            "the connection moved to another server: waiting for the consumer to answer this \
             instance's pull request through it"
                .to_owned(),
        );
    }

    /// The consumer answers, but its open requests were lost (with an old leader, or a
    /// server that restarted): the session pulls again, and stays stalled until it hears.
    pub(super) fn pulling_again(&self, heard: Instant) {
        self.report(
            heard,
            "the consumer answers, but nothing came to its pull requests (lost with an old \
             leader?): pulling again"
                .to_owned(),
        );
    }

    /// The next event the session must act on, given when it last heard the server and
    /// whether a request is open. Cancel-safe: a probe in flight is kept across calls.
    pub(super) async fn next_event(
        &mut self,
        client: &async_nats::Client,
        heard: Instant,
        open: bool,
    ) -> Event {
        loop {
            let silent_at = heard + self.silence();
            let probing = self.stalled || !open;
            let probe_at = if self.stalled {
                self.next_probe
            } else {
                self.next_probe.max(heard + self.heartbeat)
            };
            tokio::select! {
                biased;
                elected = next_advisory(&mut self.advisories) => {
                    if elected {
                        return Event::LeaderElected;
                    }
                }
                outcome = poll(&mut self.probe), if self.probe.is_some() => {
                    self.probe = None;
                    self.next_probe = Instant::now() + self.heartbeat;
                    match outcome {
                        Probe::Answers(rtt, full) => {
                            self.rtt = rtt;
                            return Event::Answered { full };
                        }
                        Probe::Gone(why) => return Event::Gone(Loss::Gone(why)),
                        Probe::Unanswered(why) if self.stalled => self.report(
                            heard,
                            format!(
                                "the consumer does not answer through this connection ({why}): \
                                 a stalled link, a partition, or its leader being elected; it \
                                 is asked again every heartbeat"
                            ),
                        ),
                        // Not stalled yet: the silence deadline decides.
                        Probe::Unanswered(_) => {}
                    }
                }
                _ = tokio::time::sleep_until(silent_at), if !self.stalled => {
                    if self.only_reader {
                        self.stalls.increment(1);
                        return Event::Gone(Loss::Silent(self.silence()));
                    }
                    self.stalled = true;
                    self.stalls.increment(1);
                    self.next_probe = Instant::now();
                    self.report(
                        heard,
                        format!(
                            "no idle heartbeat for {:?}: asking the consumer whether it answers",
                            self.silence()
                        ),
                    );
                }
                _ = tokio::time::sleep_until(probe_at), if probing && self.probe.is_none() => {
                    self.probe = Some(Box::pin(probe(
                        client.clone(),
                        self.info_subject.clone(),
                        self.heartbeat + self.rtt,
                    )));
                }
            }
        }
    }

    fn report(&self, heard: Instant, cause: String) {
        // Silent because its requests are refused: `crowded out` says why.
        if self.slot.is_crowded() {
            return;
        }
        self.slot.transition(ConsumerState::Stalled {
            silent_for: heard.elapsed(),
            cause,
        });
    }
}

impl Liveness {
    /// Whether the consumer's wait list is full (how, if so), as its info says now.
    pub(super) fn wait_list_full(
        &self,
        client: &async_nats::Client,
    ) -> impl Future<Output = Option<String>> + Send + 'static {
        let asked = probe(
            client.clone(),
            self.info_subject.clone(),
            self.heartbeat + self.rtt,
        );
        async move {
            match asked.await {
                Probe::Answers(_, full) => full,
                Probe::Gone(_) | Probe::Unanswered(_) => None,
            }
        }
    }
}

/// Polls the probe in flight (only called while there is one).
async fn poll(probe: &mut Option<Probing>) -> Probe {
    match probe {
        Some(probe) => probe.await,
        None => std::future::pending().await,
    }
}

/// Whether the next leader advisory (of the accepted JetStream) came; pending forever
/// without advisories. A subscription that ended is dropped.
async fn next_advisory(advisories: &mut Option<(async_nats::Subscriber, Advisories)>) -> bool {
    let Some((subscriber, accepted)) = advisories else {
        return std::future::pending().await;
    };
    match subscriber.next().await {
        Some(message) => accepted.accepts(&message.payload),
        None => {
            *advisories = None;
            false
        }
    }
}

/// Asks the consumer's leader for its info, at most `timeout`.
async fn probe(
    client: async_nats::Client,
    subject: async_nats::Subject,
    timeout: Duration,
) -> Probe {
    let sent = Instant::now();
    let request = async_nats::Request::new().timeout(Some(timeout));
    let reply = match client.send_request(subject, request).await {
        Ok(reply) => reply,
        Err(e) if e.kind() == async_nats::RequestErrorKind::TimedOut => {
            return Probe::Unanswered(format!("no answer within {timeout:?}"));
        }
        Err(e) if e.kind() == async_nats::RequestErrorKind::NoResponders => {
            return Probe::Unanswered("no responders".to_owned());
        }
        Err(e) => return Probe::Unanswered(e.to_string()),
    };
    let rtt = sent.elapsed();
    #[derive(serde::Deserialize)]
    struct ApiError {
        #[serde(default)]
        err_code: u64,
        #[serde(default)]
        description: String,
    }
    #[derive(serde::Deserialize)]
    struct Config {
        #[serde(default)]
        max_waiting: i64,
    }
    #[derive(serde::Deserialize)]
    struct Answer {
        error: Option<ApiError>,
        #[serde(default)]
        num_waiting: i64,
        config: Option<Config>,
    }
    match serde_json::from_slice::<Answer>(&reply.payload) {
        Ok(Answer {
            error: None,
            num_waiting,
            config,
        }) => {
            let max_waiting = config.map_or(0, |c| c.max_waiting);
            let full = (max_waiting > 0 && num_waiting >= max_waiting)
                .then(|| format!("{num_waiting} requests wait, its max_waiting of {max_waiting}"));
            Probe::Answers(rtt, full)
        }
        // Consumer not found, stream not found.
        Ok(Answer {
            error:
                Some(
                    e @ ApiError {
                        err_code: 10014 | 10059,
                        ..
                    },
                ),
            ..
        }) => Probe::Gone(e.description),
        Ok(Answer { error: Some(e), .. }) => {
            Probe::Unanswered(format!("{} (error {})", e.description, e.err_code))
        }
        Err(e) => Probe::Unanswered(format!("an answer that is not a consumer's info: {e}")),
    }
}

/// The connection `client` is on now (server id, client id): another after a reconnect.
pub(super) fn connection_of(client: &async_nats::Client) -> (String, u64) {
    let info = client.server_info();
    (info.server_id, info.client_id)
}
