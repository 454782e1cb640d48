//! The leader watch: wakes provisioning retries that wait for a JetStream leader as soon as
//! one is elected, instead of letting them sleep out their full-jitter window (or an
//! unanswered request's whole timeout).
//!
//! What the server says, and to whom (nats-server `server/jetstream_cluster.go`,
//! `sendDomainLeaderElectAdvisory`, `sendStreamLeaderElectAdvisory`,
//! `sendConsumerLeaderElectAdvisory`):
//!
//! - a new **meta** leader: `$JS.EVENT.ADVISORY.DOMAIN.LEADER_ELECTED`, published to the
//!   **system account only**;
//! - a new **stream** leader: `$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED.<stream>`, and a
//!   consumer's: `$JS.EVENT.ADVISORY.CONSUMER.LEADER_ELECTED.<stream>.<consumer>`, both to the
//!   stream's account (and to the system account).
//!
//! An application connection usually lives in an ordinary account, where no meta-leader
//! advisory ever arrives. So while a retry waits, the watch also asks the meta leader
//! itself: a `$JS.API.INFO` request (answered by the meta leader only; by a follower with
//! 10008 once it knows there is none) every [`PROBE_INTERVAL`]. A probe answered after one
//! that was not is the election, seen from this account. Both the advisories and the probe
//! exist only while at least one retry waits: the first waiter starts one task that
//! subscribes and probes; it stops [`LINGER`] after the last one leaves (so that the moment
//! between a backoff sleep and the next attempt does not restart it and forget that the
//! leader was gone). The watch remembers when it last saw each election (and the newest
//! answered probe): a retry asks what came since its attempt started, so an election seen
//! while the attempt was in flight, or while it was being answered with a failure, is not
//! lost; an attempt still unanswered [`IN_FLIGHT_GRACE`] after it was sent, while the API
//! answers probes sent after it, is taken as lost (a consumer create sent as its stream's
//! leader was being elected is never answered, and no later advisory need come) and is made
//! again at once: no election woke a crowd, so there is nothing to spread.
//!
//! **The herd.** One election wakes every waiting replica at once. Each retries after a
//! random delay in `[0, WAKE_SPREAD]` (and never later than its own backoff would have):
//! requests of N replicas arrive over 100 ms rather than in one instant. That is enough
//! because what they send is CREATE first: concurrent identical CREATEs are answered
//! idempotently (measured: 16 processes at one instant all succeed, DESIGN.md §4); the
//! spread only keeps the meta leader's queue short in its first moments, and a longer one
//! would add its whole length to the time to ready.

mod probe;
mod wake;

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use async_nats::jetstream;
use tokio::sync::broadcast;
use tokio::time::Instant;

pub(crate) use wake::StreamWake;

/// Where the server publishes JetStream advisories, in every domain
/// (`$JS.<domain>.EVENT.ADVISORY` is not a thing: advisories keep this prefix and carry the
/// domain in their payload; an account import may map them elsewhere).
pub(crate) const ADVISORY_PREFIX: &str = "$JS.EVENT.ADVISORY";

/// Which leader advisories the watch listens to.
///
/// A JetStream domain's servers publish their advisories in their own account, on their own
/// servers. Across a leaf node connection they reach this connection only when the account's
/// interest crosses it (it does when both ends bind the same account, as the test kit's leaf
/// topology does; an edge whose leaf connection binds another account keeps them), and then
/// mixed with the local domain's own advisories under the same subjects. So in a domain the
/// watch keeps only advisories whose payload names that domain, and relies on the `INFO`
/// probe, which goes through the domain's prefix, for the rest. Behind an arbitrary API prefix
/// (an account import) nothing says which JetStream an advisory came from: the watch probes
/// only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Advisories {
    /// The connection's own JetStream: every advisory is ours.
    All,
    /// Only those whose payload's `domain` is this one.
    Domain(String),
    /// None: probe only.
    None,
}

impl Advisories {
    /// What a runtime talking to `api` listens to.
    pub(crate) fn of(api: &crate::jsapi::JetStreamApi) -> Self {
        use crate::jsapi::JetStreamApi;
        match api {
            JetStreamApi::Local => Advisories::All,
            JetStreamApi::Domain(domain) => Advisories::Domain(domain.clone()),
            JetStreamApi::Prefix(_) => Advisories::None,
        }
    }

    /// Whether an advisory with this payload concerns the watched JetStream.
    pub(crate) fn accepts(&self, payload: &[u8]) -> bool {
        match self {
            Advisories::All => true,
            Advisories::None => false,
            Advisories::Domain(domain) => serde_json::from_slice::<serde_json::Value>(payload)
                .ok()
                .and_then(|v| v.get("domain")?.as_str().map(|d| d == domain))
                .unwrap_or(false),
        }
    }
}

/// How often the watch asks whether a meta leader answers, while a retry waits.
pub(crate) const PROBE_INTERVAL: Duration = Duration::from_millis(50);
/// How long one probe waits for its answer (probes overlap: one goes out every interval).
const PROBE_TIMEOUT: Duration = Duration::from_millis(1000);
/// The spread of the retries one election wakes (see the module documentation).
pub(crate) const WAKE_SPREAD: Duration = Duration::from_millis(100);
/// How long a first request may go unanswered before it also waits for an election: a
/// healthy create of a replicated stream is answered in tens of milliseconds (about 60 ms on
/// 2.11.2 and later, nats-facts §6.1).
pub(crate) const IN_FLIGHT_GRACE: Duration = Duration::from_millis(250);
/// How long the watch outlives its last waiter.
const LINGER: Duration = Duration::from_secs(1);
/// The longest wait before retrying a request refused for want of a peer ("no suitable
/// peers for placement, peer offline", 10005), for the first [`PEER_POLL_FOR`] of such
/// refusals. The meta leader answers so when a replicated stream's placement needs a node
/// it knows to be offline: typically a node that is restarting and not yet caught up, back
/// within a few hundred milliseconds. Nothing announces its return to an application's
/// account, so a retry asks again within this (a cheap refusal, about ten a second per
/// replica), rather than over its growing full-jitter window. Past [`PEER_POLL_FOR`] (a node
/// down for longer) the usual backoff resumes.
pub(crate) const PEER_POLL: Duration = Duration::from_millis(200);
/// See [`PEER_POLL`].
pub(crate) const PEER_POLL_FOR: Duration = Duration::from_secs(3);

/// What the watch saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Election {
    /// A meta leader (advisory, or a probe answered after one that was not).
    Meta,
    /// A leader of this stream, or of one of its consumers.
    Stream(String),
    /// Not an election: the meta leader answered a probe (sent at the instant given). An
    /// attempt in flight past its grace while the API answers is taken as lost.
    Answered(Instant),
}

impl Election {
    /// The election an advisory subject announces, if it is one.
    pub(crate) fn from_subject(subject: &str) -> Option<Election> {
        let rest = subject.strip_prefix(ADVISORY_PREFIX)?.strip_prefix('.')?;
        if rest == "DOMAIN.LEADER_ELECTED" {
            return Some(Election::Meta);
        }
        let rest = rest
            .strip_prefix("STREAM.LEADER_ELECTED.")
            .or_else(|| rest.strip_prefix("CONSUMER.LEADER_ELECTED."))?;
        let stream = rest.split('.').next().filter(|s| !s.is_empty())?;
        Some(Election::Stream(stream.to_owned()))
    }

    /// Whether a retry on `stream` (`""`: none in particular) is worth waking.
    fn concerns(&self, stream: &str) -> bool {
        match self {
            Election::Meta => true,
            Election::Stream(name) => stream.is_empty() || name == stream,
            Election::Answered(_) => false,
        }
    }
}

/// One per provisioner (clones share it): the elections seen while some retry waits.
#[derive(Clone)]
pub(crate) struct LeaderWatch {
    inner: Arc<Inner>,
}

struct Inner {
    js: jetstream::Context,
    advisories: Advisories,
    elections: broadcast::Sender<Election>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    waiters: usize,
    /// Whether the watch task runs.
    running: bool,
    /// Since when no retry waits.
    idle_since: Option<Instant>,
    /// Times the watch started (for tests and reports).
    starts: u64,
    /// When the watch last saw a meta leader elected, and each stream's (or one of its
    /// consumers') leader: a retry asks whether one came since its attempt started.
    last_meta: Option<Instant>,
    last_stream: HashMap<String, Instant>,
    /// When the newest probe that was answered was sent.
    last_answered: Option<Instant>,
}

impl State {
    /// When the watch last saw an election that concerns `stream`.
    fn last_concerning(&self, stream: &str) -> Option<Instant> {
        let streams = if stream.is_empty() {
            self.last_stream.values().max().copied()
        } else {
            self.last_stream.get(stream).copied()
        };
        self.last_meta.max(streams)
    }
}

impl LeaderWatch {
    pub(crate) fn new(js: jetstream::Context, advisories: Advisories) -> Self {
        let (elections, _) = broadcast::channel(64);
        LeaderWatch {
            inner: Arc::new(Inner {
                js,
                advisories,
                elections,
                state: Mutex::default(),
            }),
        }
    }

    /// Whether the subscriptions and the probe currently exist.
    #[cfg(test)]
    pub(crate) fn is_watching(&self) -> bool {
        self.inner.state.lock().unwrap().running
    }

    /// Waits for the next election that concerns `stream`; the watch runs while this future
    /// lives.
    pub(crate) fn next_election(
        &self,
        stream: &str,
    ) -> impl Future<Output = ()> + Send + 'static + use<> {
        self.election_since(stream, None)
    }

    /// As [`LeaderWatch::next_election`], but resolves at once when the watch already saw
    /// one at or after `since`.
    pub(crate) fn election_since(
        &self,
        stream: &str,
        since: Option<Instant>,
    ) -> impl Future<Output = ()> + Send + 'static + use<> {
        // Subscribed before looking at what was seen: an election announced in between is
        // then in one or the other.
        let mut events = self.inner.elections.subscribe();
        let guard = Waiter::enter(self.inner.clone());
        let seen = since.is_some_and(|since| {
            let state = self.inner.state.lock().unwrap();
            state.last_concerning(stream).is_some_and(|at| at >= since)
        });
        let stream = stream.to_owned();
        async move {
            let _guard = guard;
            if seen {
                return;
            }
            loop {
                match events.recv().await {
                    Ok(election) if election.concerns(&stream) => return,
                    Ok(_) => {}
                    // Missed some: one of them may have been ours.
                    Err(broadcast::error::RecvError::Lagged(_)) => return,
                    Err(broadcast::error::RecvError::Closed) => std::future::pending().await,
                }
            }
        }
    }

    /// Resolves when an attempt on `stream` started at `started` looks lost: an election
    /// that concerns it came since `started`, or, once it has been in flight for `grace`, a
    /// probe sent after it was answered (the API answers; this request did not). The watch
    /// starts only at the end of the grace unless it already runs (a healthy request is
    /// answered within it, and costs no subscription); running, it reports an election
    /// during the grace at once.
    pub(crate) fn stalled(
        &self,
        stream: &str,
        started: Instant,
        grace: Duration,
    ) -> impl Future<Output = ()> + Send + 'static + use<> {
        let mut events = self.inner.elections.subscribe();
        let inner = self.inner.clone();
        let running = inner.state.lock().unwrap().running;
        let mut guard = running.then(|| Waiter::enter(inner.clone()));
        let stream = stream.to_owned();
        let grace_end = started + grace;
        async move {
            if guard.is_none() {
                tokio::time::sleep_until(grace_end).await;
                guard = Some(Waiter::enter(inner.clone()));
            }
            let _guard = guard;
            loop {
                {
                    let state = inner.state.lock().unwrap();
                    if state
                        .last_concerning(&stream)
                        .is_some_and(|at| at >= started)
                    {
                        return;
                    }
                    if Instant::now() >= grace_end
                        && state.last_answered.is_some_and(|sent| sent >= started)
                    {
                        return;
                    }
                }
                tokio::select! {
                    event = events.recv() => match event {
                        Ok(_) => {}
                        Err(broadcast::error::RecvError::Lagged(_)) => {}
                        Err(broadcast::error::RecvError::Closed) => std::future::pending().await,
                    },
                    () = tokio::time::sleep_until(grace_end), if Instant::now() < grace_end => {}
                }
            }
        }
    }

    /// A [`Wake`] for the retries of one stream (or its consumers).
    pub(crate) fn wake_for<'a>(&'a self, stream: &'a str) -> StreamWake<'a> {
        StreamWake::new(self, stream)
    }
}

/// Counts one waiting retry; the first starts the watch (which stops by itself once none
/// has waited for [`LINGER`]).
struct Waiter(Arc<Inner>);

impl Waiter {
    fn enter(inner: Arc<Inner>) -> Waiter {
        {
            let mut state = inner.state.lock().unwrap();
            state.waiters += 1;
            state.idle_since = None;
            if !state.running {
                state.running = true;
                state.starts += 1;
                tokio::spawn(probe::watch(
                    inner.js.clone(),
                    inner.advisories.clone(),
                    inner.elections.clone(),
                    Arc::downgrade(&inner),
                ));
            }
        }
        Waiter(inner)
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        let mut state = self.0.state.lock().unwrap();
        state.waiters -= 1;
        if state.waiters == 0 {
            state.idle_since = Some(Instant::now());
        }
    }
}

/// Whether the watch should stop: no retry has waited for [`LINGER`], or the provisioner is
/// gone. Marks it stopped under the lock, so that a new waiter starts a new one.
fn should_stop(inner: &Weak<Inner>) -> bool {
    let Some(inner) = inner.upgrade() else {
        return true;
    };
    let mut state = inner.state.lock().unwrap();
    let idle = state.waiters == 0 && state.idle_since.is_none_or(|t| t.elapsed() >= LINGER);
    if idle {
        state.running = false;
    }
    idle
}

/// Records `election` (for retries that ask what came since their attempt started), then
/// sends it to the waiting ones.
fn announce(inner: &Weak<Inner>, elections: &broadcast::Sender<Election>, election: Election) {
    if let Some(inner) = inner.upgrade() {
        let mut state = inner.state.lock().unwrap();
        let now = Instant::now();
        match &election {
            Election::Meta => state.last_meta = Some(now),
            Election::Stream(name) => {
                state.last_stream.insert(name.clone(), now);
            }
            Election::Answered(sent) => {
                state.last_answered = state.last_answered.max(Some(*sent));
            }
        }
    }
    let _ = elections.send(election);
}

#[cfg(test)]
mod tests;
