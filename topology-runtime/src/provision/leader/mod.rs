//! The leader watch: wakes provisioning retries that wait for a JetStream leader as soon as
//! one is elected, instead of letting them sleep out their full-jitter window or an
//! unanswered request's whole timeout. While a retry waits, it listens to the leader-election
//! advisories of the meta leader and of the streams and consumers the waiting retries are for
//! (`advisories`, `election`) and probes the meta leader with `$JS.API.INFO` (`probe`),
//! sharing what its probes find with the other replicas of the service (`fleet`);
//! `wake` is what a retry is given, `waiter` counts the retries waiting, `timings` how long it
//! all waits ([`LeaderTimings`]).
//! Why it works this way, with the measurements: docs/PERFORMANCE.md, "The leader watch".

mod advisories;
mod election;
mod fleet;
mod probe;
mod timings;
mod waiter;
mod wake;
mod waking;

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use async_nats::jetstream;
use tokio::sync::broadcast;
use tokio::time::Instant;

pub(crate) use advisories::{
    ADVISORY_PREFIX, Advisories, consumer_elected, meta_elected, stream_elected,
};
pub(crate) use election::Election;
pub(crate) use fleet::{Fleet, channel as fleet_channel};
pub(crate) use probe::ProbeSchedule;
pub use timings::LeaderTimings;
use waiter::Waiter;
pub(crate) use wake::StreamWake;
pub(crate) use waking::run_waking;

/// When a replica that has heard no other asks whether a meta leader answers, while a
/// retry waits: at once, then fast at first and slower the longer it runs (the fleet's
/// replicas all wait at once, and a fixed interval makes their probes grow with the fleet:
/// docs/PERFORMANCE.md, "The herd at scale").
pub(crate) const PROBES: ProbeSchedule = ProbeSchedule {
    first: Duration::from_millis(50),
    max: Duration::from_secs(1),
};
/// How often a fleet that shares what its probes find (`fleet`) probes as a whole: each of
/// its N replicas probes every N times this, up to [`FLEET_MAX`]. One probe answered then
/// wakes the fleet about this long after the new leader takes office, however large it is.
pub(crate) const FLEET_INTERVAL: Duration = Duration::from_millis(50);
/// The longest interval between one replica's probes in a fleet: it bounds the wait of a
/// replica that misses the note of the probe that was answered.
pub(crate) const FLEET_MAX: Duration = Duration::from_secs(5);
/// How many other replicas a watch counts, at most: with as many, it probes at
/// [`FLEET_MAX`] anyway; a replica that has heard as many sends no note of its own.
const FLEET_COUNTED: usize = (FLEET_MAX.as_millis() / FLEET_INTERVAL.as_millis()) as usize;
/// The spread of a fleet's `waiting` notes: replicas whose probes stop being answered at
/// the same instant tell the others over this, so that those that already heard enough can
/// keep quiet.
const NOTE_SPREAD: Duration = Duration::from_millis(100);
/// How long a probe may go unanswered (at least: [`PATIENCE`]) before its replica tells the
/// fleet that it waits, without waiting for its timeout
/// ([`LeaderTimings::probe_timeout`]): until replicas hear each
/// other each probes on its own fast schedule, and in a fleet of hundreds those first
/// probes are most of what the outage costs the cluster. A healthy meta leader answers
/// `INFO` in a few milliseconds; a wrong note only slows the fleet's probes down.
const SILENT_AFTER: Duration = Duration::from_millis(100);
/// How many times the latest round trip an answer may take before it is taken as never
/// coming: a probe's, and a provisioning request's past its in-flight grace. A
/// loaded meta leader answers slowly but answers (an identical CREATE is answered only once
/// its proposal commits); taking its queue for a lost leader re-sends every request in it.
const PATIENCE: u32 = 4;

/// One per provisioner (clones share it): the elections seen while some retry waits.
#[derive(Clone)]
pub(crate) struct LeaderWatch {
    inner: Arc<Inner>,
}

struct Inner {
    js: jetstream::Context,
    timings: LeaderTimings,
    advisories: Advisories,
    fleet: Fleet,
    elections: broadcast::Sender<Election>,
    state: Mutex<State>,
    /// What the waiting retries ask of the running watch task.
    asks: Arc<Asks>,
}

/// What the waiting retries ask of the running watch task.
#[derive(Default)]
pub(super) struct Asks {
    /// A probe now: an attempt past its grace has no probe sent after it to tell it from the
    /// API (a fleet's replica probes seconds apart).
    pub(super) probe_now: tokio::sync::Notify,
    /// The advisories [`State::watched`] gained or let go since the task read it.
    pub(super) rescope: tokio::sync::Notify,
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
    /// The advisories of the streams and consumers the waiting retries are for
    /// ([`Advisories::of_retry`]), each with how many wait on it; the watch task subscribes
    /// to each, beside [`Advisories::always`], and unsubscribes once none waits. Cleared
    /// when the watch stops.
    watched: std::collections::BTreeMap<String, usize>,
    /// When the watch last saw a meta leader elected, each stream's leader and a leader of
    /// one of its consumers: a retry asks whether one came since its attempt started.
    last_meta: Option<Instant>,
    last_stream: HashMap<String, Instant>,
    last_consumer: HashMap<(String, String), Instant>,
    /// Requests sent before this found no meta leader (the newest election's `lost_before`).
    meta_lost_before: Option<Instant>,
    /// When the watch last sent a probe.
    last_probe_sent: Option<Instant>,
    /// When the newest probe that was answered was sent, and how long its answer took.
    last_answered: Option<Instant>,
    last_rtt: Duration,
    /// How long the latest answered provisioning request took.
    last_request_rtt: Duration,
}

impl State {
    /// When the watch last saw an election that concerns `stream` (worth waking for).
    fn last_concerning(&self, stream: &str) -> Option<Instant> {
        let ours = |name: &str| stream.is_empty() || name == stream;
        let streams = self.last_stream.iter().filter(|(name, _)| ours(name));
        let consumers = self
            .last_consumer
            .iter()
            .filter(|((name, _), _)| ours(name));
        let newest = streams
            .map(|(_, at)| *at)
            .chain(consumers.map(|(_, at)| *at))
            .max();
        self.last_meta.max(newest)
    }

    /// The newest instant before which a request on `stream` (for one of its consumers
    /// when `consumer`) may have been lost to an election: the meta leader's `lost_before`,
    /// and for a consumer's request the stream leader's election (see [`Election`]).
    fn lost_before(&self, stream: &str, consumer: bool) -> Option<Instant> {
        let stream_leader = consumer
            .then(|| self.last_stream.get(stream).copied())
            .flatten();
        self.meta_lost_before.max(stream_leader)
    }

    /// How long an answer may take now: [`PATIENCE`] times the latest round trip of a probe
    /// or of a provisioning request, whichever is longer (a create waits for a proposal to
    /// commit and for a new group's leader, which a probe does not show).
    fn patience(&self) -> Duration {
        self.last_rtt.max(self.last_request_rtt) * PATIENCE
    }
}

impl LeaderWatch {
    pub(crate) fn new(
        js: jetstream::Context,
        advisories: Advisories,
        fleet: Fleet,
        timings: LeaderTimings,
    ) -> Self {
        let (elections, _) = broadcast::channel(64);
        LeaderWatch {
            inner: Arc::new(Inner {
                js,
                timings,
                advisories,
                fleet,
                elections,
                state: Mutex::default(),
                asks: Arc::default(),
            }),
        }
    }

    /// Whether the subscriptions and the probe currently exist.
    #[cfg(test)]
    pub(crate) fn is_watching(&self) -> bool {
        self.inner.state.lock().unwrap().running
    }

    /// Waits for the next election that concerns `stream` (a retry on it, for its consumer
    /// `consumer` when it is one); the watch runs, listening to their advisories too, while
    /// this future lives.
    pub(crate) fn next_election(
        &self,
        stream: &str,
        consumer: Option<&str>,
    ) -> impl Future<Output = ()> + Send + 'static + use<> {
        self.election_since(stream, consumer, None)
    }

    /// As [`LeaderWatch::next_election`], but resolves at once when the watch already saw
    /// one at or after `since`.
    pub(crate) fn election_since(
        &self,
        stream: &str,
        consumer: Option<&str>,
        since: Option<Instant>,
    ) -> impl Future<Output = ()> + Send + 'static + use<> {
        // Subscribed before looking at what was seen: an election announced in between is
        // then in one or the other.
        let mut events = self.inner.elections.subscribe();
        let guard = Waiter::enter(self.inner.clone(), stream, consumer);
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

    /// Resolves when an attempt on `stream` (for its consumer `consumer` when it is one)
    /// started at `started` looks lost: it was sent
    /// before an election that can lose it ([`State::lost_before`]), or, once it has been in
    /// flight for `grace` (or
    /// longer, while the API answers slowly: [`PATIENCE`]), a probe sent after it was
    /// answered (the API answers; this request did not). The watch
    /// starts only at the end of the grace unless it already runs (a healthy request is
    /// answered within it, and costs no subscription); running, it reports an election
    /// during the grace at once.
    pub(crate) fn stalled(
        &self,
        stream: &str,
        consumer: Option<&str>,
        started: Instant,
        grace: Duration,
    ) -> impl Future<Output = ()> + Send + 'static + use<> {
        let mut events = self.inner.elections.subscribe();
        let inner = self.inner.clone();
        let running = inner.state.lock().unwrap().running;
        let mut guard = running.then(|| Waiter::enter(inner.clone(), stream, consumer));
        let stream = stream.to_owned();
        let consumer_name = consumer.map(str::to_owned);
        let consumer = consumer.is_some();
        async move {
            let mut grace_end = started + grace;
            if guard.is_none() {
                tokio::time::sleep_until(grace_end).await;
                guard = Some(Waiter::enter(
                    inner.clone(),
                    &stream,
                    consumer_name.as_deref(),
                ));
            }
            let _guard = guard;
            loop {
                {
                    let state = inner.state.lock().unwrap();
                    let lost_before = state.lost_before(&stream, consumer);
                    if lost_before.is_some_and(|at| at > started) {
                        return;
                    }
                    grace_end = started + grace.max(state.patience());
                    if Instant::now() >= grace_end {
                        if state.last_answered.is_some_and(|sent| sent >= started) {
                            return;
                        }
                        if state.last_probe_sent.is_none_or(|sent| sent < started) {
                            inner.asks.probe_now.notify_one();
                        }
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

    /// Records that a provisioning request was answered after `rtt` (see [`State::patience`]).
    pub(crate) fn answered_after(&self, rtt: Duration) {
        self.inner.state.lock().unwrap().last_request_rtt = rtt;
    }

    /// A [`Wake`](waking::Wake) for the retries of one stream (or one of its consumers).
    pub(crate) fn wake_for<'a>(
        &'a self,
        stream: &'a str,
        consumer: Option<&'a str>,
    ) -> StreamWake<'a> {
        StreamWake::new(self, stream, consumer)
    }
}

/// Whether the watch should stop: no retry has waited for [`LeaderTimings::linger`], or the provisioner is
/// gone. Marks it stopped under the lock, so that a new waiter starts a new one.
fn should_stop(inner: &Weak<Inner>) -> bool {
    let Some(inner) = inner.upgrade() else {
        return true;
    };
    let mut state = inner.state.lock().unwrap();
    let idle = state.waiters == 0
        && state
            .idle_since
            .is_none_or(|t| t.elapsed() >= inner.timings.linger);
    if idle {
        state.running = false;
        // The next watch listens to what its own retries are for.
        state.watched.clear();
    }
    idle
}

/// The advisories the waiting retries are for ([`State::watched`]); none once the
/// provisioner is gone.
fn watched(inner: &Weak<Inner>) -> Vec<String> {
    inner.upgrade().map_or_else(Vec::new, |inner| {
        inner
            .state
            .lock()
            .unwrap()
            .watched
            .keys()
            .cloned()
            .collect()
    })
}

/// Records that the watch sent a probe now.
fn probe_sent(inner: &Weak<Inner>) {
    if let Some(inner) = inner.upgrade() {
        inner.state.lock().unwrap().last_probe_sent = Some(Instant::now());
    }
}

/// How long an answer may take now (see [`State::patience`]); zero once the provisioner is
/// gone.
fn patience(inner: &Weak<Inner>) -> Duration {
    inner.upgrade().map_or(Duration::ZERO, |inner| {
        inner.state.lock().unwrap().patience()
    })
}

/// Records `election` (for retries that ask what came since their attempt started), then
/// sends it to the waiting ones.
fn announce(inner: &Weak<Inner>, elections: &broadcast::Sender<Election>, election: Election) {
    if let Some(inner) = inner.upgrade() {
        let mut state = inner.state.lock().unwrap();
        let now = Instant::now();
        match &election {
            Election::Meta { lost_before } => {
                state.last_meta = Some(now);
                state.meta_lost_before = state.meta_lost_before.max(Some(*lost_before));
            }
            Election::Stream(name) => {
                state.last_stream.insert(name.clone(), now);
            }
            Election::Consumer { stream, consumer } => {
                let key = (stream.clone(), consumer.clone());
                state.last_consumer.insert(key, now);
            }
            Election::Answered { sent, rtt } => {
                if state.last_answered.is_none_or(|last| *sent >= last) {
                    state.last_answered = Some(*sent);
                    state.last_rtt = *rtt;
                }
            }
        }
    }
    let _ = elections.send(election);
}

#[cfg(test)]
mod tests;
