//! The watch task: the leader advisories (the meta leader's, and those of the streams and
//! consumers the waiting retries are for, subscribed as retries come), the meta leader's
//! `INFO` probe and the fleet channel.

use std::sync::Weak;
use std::time::Duration;

use async_nats::jetstream::{self, response::Response};
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use tokio::sync::broadcast;
use tokio::time::Instant;

use super::fleet::{Census, Fleet, Note};
use super::{
    Advisories, Asks, Election, Inner, NOTE_SPREAD, PROBES, SILENT_AFTER, announce, patience,
    probe_sent, should_stop, watched,
};
use crate::retry::full_jitter;

/// When the watch probes: at once when it starts, then after intervals that double from
/// `first` up to `max` (a fleet that shares its findings: its own interval, see
/// [`Census::interval`]), each drawn from the upper half of its interval, so that the probes
/// of replicas that started waiting together do not stay in step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ProbeSchedule {
    /// The interval after the first probe.
    pub(crate) first: Duration,
    /// The longest interval of a replica alone.
    pub(crate) max: Duration,
}

impl ProbeSchedule {
    /// The interval after probe `n` (0: the first): `min(max, first * 2^n)`, or `fleet`'s.
    pub(crate) fn interval(&self, n: u32, fleet: Option<Duration>) -> Duration {
        match fleet {
            Some(fleet) => fleet.max(self.first),
            None => {
                let factor = 1u32.checked_shl(n.min(31)).unwrap_or(u32::MAX);
                self.first.saturating_mul(factor).min(self.max)
            }
        }
    }

    /// The wait after probe `n` for a draw in `[0, 1]` (uniform: the wait is uniform in
    /// `[interval / 2, interval]`): `interval / 2 * (1 + draw)`. The same
    /// draw gives the same place in the interval when the fleet's interval changes, so that
    /// replicas that probed together stay spread over it.
    pub(crate) fn delay_drawn(&self, n: u32, fleet: Option<Duration>, draw: f64) -> Duration {
        let half = self.interval(n, fleet) / 2;
        half + half.mul_f64(draw.clamp(0.0, 1.0))
    }
}

/// The newest probe whose outcome is known (a probe unanswered past its silence counts as
/// unanswered until its own outcome comes).
#[derive(Debug, Clone, Copy)]
struct Newest {
    seq: u64,
    answered: bool,
}

/// Subscribes to the leader advisories and the fleet channel and probes the meta leader,
/// sending each election, until [`should_stop`]; returning drops the subscribers, which
/// unsubscribes. The advisories of a stream or consumer are subscribed to while a retry for it
/// waits (the state's `watched`, announced by `asks.rescope`), never those of the
/// whole account: what the service's generated permissions grant. A fleet of consumers
/// starting together holds no more subscriptions than retries wait.
pub(super) async fn watch(
    js: jetstream::Context,
    probe_timeout: Duration,
    accepted: Advisories,
    fleet: Fleet,
    elections: broadcast::Sender<Election>,
    asks: std::sync::Arc<Asks>,
    inner: Weak<Inner>,
) {
    let client = js.client();
    let mut messages = futures::stream::SelectAll::new();
    let mut subscribed = Subscribed::new();
    let always: Vec<String> = std::iter::once(fleet.subjects())
        .chain(accepted.always())
        .collect();
    rescope(
        &client,
        &always,
        watched(&inner),
        &mut subscribed,
        &mut messages,
    )
    .await;
    let mut probes = FuturesUnordered::new();
    let mut next_probe = Instant::now();
    let mut sent = 0u64;
    let mut newest: Option<Newest> = None;
    let mut census = Census::default();
    // When this watch tells the fleet it waits, and whether it has in this outage (since the
    // last answer): once per outage.
    let mut tell_at: Option<Instant> = None;
    let mut told = false;
    // The oldest probe sent since the last answer whose outcome is not known yet, and when
    // it counts as unanswered for telling the fleet: a probe the meta leader does not answer
    // takes its whole timeout (1 s) to fail, and the fleet's replicas probe alone (fast)
    // until they hear each other.
    let mut silent: Option<(u64, Instant)> = None;
    let mut last_sent_at = Instant::now();
    // Where in its interval the next scheduled probe falls (see `ProbeSchedule::delay_drawn`).
    let mut draw: f64 = rand::random();
    loop {
        let tell_deadline = tell_at;
        let silent_deadline = silent.map(|(_, at)| at);
        tokio::select! {
            () = asks.rescope.notified() => {
                rescope(&client, &always, watched(&inner), &mut subscribed, &mut messages).await;
            }
            Some(message) = messages.next() => {
                if let Some(note) = fleet.read(&message.subject, &message.payload) {
                    match note {
                        Note::Waiting(sender) => {
                            let before = census.interval();
                            census.heard(sender, fleet.is_me(sender), true);
                            // Heard more of the fleet: the next probe waits the fleet's
                            // interval from the last one, not this replica's own schedule.
                            if census.interval() > before {
                                let n = u32::try_from(sent).unwrap_or(u32::MAX);
                                let fleet_next = last_sent_at
                                    + PROBES.delay_drawn(n, census.interval(), draw);
                                next_probe = next_probe.max(fleet_next);
                            }
                        }
                        Note::Answers(sender) => {
                            census.heard(sender, fleet.is_me(sender), false);
                            // Another replica's probe was answered while ours were not.
                            if newest.is_some_and(|newest| !newest.answered) && !fleet.is_me(sender) {
                                tracing::debug!("meta leader answers again (another replica's probe)");
                                let lost_before = Instant::now();
                                announce(&inner, &elections, Election::Meta { lost_before });
                                // Outcomes of the probes in flight are older news.
                                newest = Some(Newest { seq: sent, answered: true });
                                told = false;
                                silent = None;
                            }
                        }
                    }
                    continue;
                }
                if !accepted.accepts(&message.payload) {
                    continue; // another domain's
                }
                if let Some(election) = Election::from_subject(&message.subject, Instant::now()) {
                    tracing::debug!(?election, "leader elected (advisory)");
                    announce(&inner, &elections, election);
                }
            }
            () = tokio::time::sleep_until(tell_deadline.unwrap_or(next_probe)),
                if tell_deadline.is_some() =>
            {
                tell_at = None;
                if census.worth_telling() {
                    tell(&client, &fleet, true).await;
                }
            }
            () = tokio::time::sleep_until(silent_deadline.unwrap_or(next_probe)),
                if silent_deadline.is_some() =>
            {
                let (seq, _) = silent.take().expect("a deadline is a silent probe's");
                // Unanswered so far: a later probe answered first is an election (its own
                // late answer is not: the leader was slow, not gone).
                if newest.is_none_or(|newest| newest.seq < seq) {
                    newest = Some(Newest { seq, answered: false });
                }
                if !told {
                    tracing::debug!("meta leader slow to answer; telling the fleet");
                    told = true;
                    tell_at = Some(Instant::now() + full_jitter(NOTE_SPREAD));
                }
            }
            scheduled = async {
                tokio::select! {
                    () = tokio::time::sleep_until(next_probe) => true,
                    () = asks.probe_now.notified() => false,
                }
            } => {
                if should_stop(&inner) {
                    return;
                }
                let patience = patience(&inner);
                let timeout = probe_timeout.max(patience);
                last_sent_at = Instant::now();
                probes.push(probe(js.clone(), sent, last_sent_at, timeout));
                probe_sent(&inner);
                if !told && silent.is_none() {
                    silent = Some((sent, last_sent_at + SILENT_AFTER.max(patience)));
                }
                if scheduled {
                    let n = u32::try_from(sent).unwrap_or(u32::MAX);
                    draw = rand::random();
                    next_probe = Instant::now() + PROBES.delay_drawn(n, census.interval(), draw);
                }
                sent += 1;
            }
            Some((seq, outcome, sent_at)) = probes.next(), if !probes.is_empty() => {
                let answered = outcome.is_ok();
                if answered {
                    let rtt = sent_at.elapsed();
                    announce(&inner, &elections, Election::Answered { sent: sent_at, rtt });
                    // This probe, or a later one, was answered: no outage to tell of.
                    if silent.is_some_and(|(oldest, _)| oldest <= seq) {
                        silent = None;
                    }
                }
                if newest.is_some_and(|newest| seq < newest.seq) {
                    continue; // a late outcome of an older probe says nothing new
                }
                match (newest, answered) {
                    // The probe that had gone silent, answered late: a slow leader.
                    (Some(Newest { answered: false, seq: silent_seq }), true) if silent_seq == seq => {}
                    (Some(Newest { answered: false, .. }), true) => {
                        tracing::debug!("meta leader answers again");
                        announce(&inner, &elections, Election::Meta { lost_before: sent_at });
                        tell(&client, &fleet, false).await;
                    }
                    (None | Some(Newest { answered: true, .. }), false) => {
                        if let Err(why) = &outcome {
                            tracing::debug!(%why, "meta leader does not answer");
                        }
                        if !told {
                            told = true;
                            tell_at = Some(Instant::now() + full_jitter(NOTE_SPREAD));
                        }
                    }
                    _ => {}
                }
                if answered {
                    told = false;
                }
                newest = Some(Newest { seq, answered });
            }
        }
    }
}

/// The subjects the watch is subscribed to, each with what ends its subscription.
type Subscribed = std::collections::HashMap<String, futures::stream::AbortHandle>;

/// Makes the watch's subscriptions `always` and `watched`: ends those no longer wanted (their
/// subscriber ends, leaves `messages` and unsubscribes) and subscribes to each one missing,
/// adding it to `messages`. A subscription that fails (the client closed) leaves the watch
/// with what it has: its probes are enough.
async fn rescope(
    client: &async_nats::Client,
    always: &[String],
    watched: Vec<String>,
    subscribed: &mut Subscribed,
    messages: &mut futures::stream::SelectAll<futures::stream::Abortable<async_nats::Subscriber>>,
) {
    let wanted: std::collections::HashSet<&String> = always.iter().chain(&watched).collect();
    subscribed.retain(|subject, end| {
        let keep = wanted.contains(subject);
        if !keep {
            end.abort();
        }
        keep
    });
    for subject in always.iter().chain(&watched) {
        if subscribed.contains_key(subject) {
            continue;
        }
        match client.subscribe(subject.clone()).await {
            Ok(subscriber) => {
                let (subscriber, end) = futures::stream::abortable(subscriber);
                messages.push(subscriber);
                subscribed.insert(subject.clone(), end);
            }
            Err(e) => tracing::debug!(%subject, error = %e, "not subscribed; probing alone"),
        }
    }
}

/// Publishes this watch's `waiting` note, or its `answers` one. Best effort: a note that
/// cannot go out costs the fleet a faster probe or a later wake, no more.
async fn tell(client: &async_nats::Client, fleet: &Fleet, waiting: bool) {
    let (subject, payload) = fleet.note(waiting);
    if let Err(e) = client.publish(subject, payload.into()).await {
        tracing::debug!(error = %e, "fleet note not sent");
    }
}

/// Whether the meta leader answers `INFO` within `timeout` (if not, why).
async fn probe(
    js: jetstream::Context,
    seq: u64,
    sent_at: Instant,
    timeout: Duration,
) -> (u64, Result<(), String>, Instant) {
    let body = serde_json::json!({});
    let request = js.request::<_, _, Response<serde_json::Value>>("INFO".to_owned(), &body);
    let outcome = match tokio::time::timeout(timeout, request).await {
        Ok(Ok(Response::Ok(_))) => Ok(()),
        Ok(Ok(Response::Err { error })) => Err(format!("error {}", error.error_code().0)),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {timeout:?}")),
    };
    (seq, outcome, sent_at)
}
