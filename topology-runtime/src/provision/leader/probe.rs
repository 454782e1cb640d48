//! The watch task: the leader advisories and the meta leader's `INFO` probe.

use std::sync::Weak;

use async_nats::jetstream::{self, response::Response};
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use tokio::sync::broadcast;
use tokio::time::Instant;

use super::{
    ADVISORY_PREFIX, Advisories, Election, Inner, PROBE_INTERVAL, PROBE_TIMEOUT, announce,
    should_stop,
};

/// Subscribes to the leader advisories and probes the meta leader, sending each election,
/// until [`should_stop`]; returning drops the subscribers, which unsubscribes.
pub(super) async fn watch(
    js: jetstream::Context,
    accepted: Advisories,
    elections: broadcast::Sender<Election>,
    inner: Weak<Inner>,
) {
    let client = js.client();
    let subjects = [
        format!("{ADVISORY_PREFIX}.DOMAIN.LEADER_ELECTED"),
        format!("{ADVISORY_PREFIX}.STREAM.LEADER_ELECTED.>"),
        format!("{ADVISORY_PREFIX}.CONSUMER.LEADER_ELECTED.>"),
    ];
    let subjects = if accepted == Advisories::None {
        Vec::new()
    } else {
        subjects.to_vec()
    };
    let mut advisories = futures::stream::SelectAll::new();
    for subject in subjects {
        match client.subscribe(subject.clone()).await {
            Ok(subscriber) => advisories.push(subscriber),
            Err(e) => tracing::debug!(%subject, error = %e, "no leader advisories; probing only"),
        }
    }
    let mut probes = FuturesUnordered::new();
    let mut ticker = tokio::time::interval(PROBE_INTERVAL);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut sent = 0u64;
    // The newest probe whose outcome is known, and whether it was answered.
    let mut newest: Option<(u64, bool)> = None;
    loop {
        tokio::select! {
            Some(message) = advisories.next() => {
                if !accepted.accepts(&message.payload) {
                    continue; // another domain's
                }
                if let Some(election) = Election::from_subject(&message.subject) {
                    tracing::debug!(?election, "leader elected (advisory)");
                    announce(&inner, &elections, election);
                }
            }
            _ = ticker.tick() => {
                if should_stop(&inner) {
                    return;
                }
                sent += 1;
                probes.push(probe(js.clone(), sent, Instant::now()));
            }
            Some((seq, outcome, sent_at)) = probes.next(), if !probes.is_empty() => {
                let answered = outcome.is_ok();
                if answered {
                    announce(&inner, &elections, Election::Answered(sent_at));
                }
                if newest.is_some_and(|(newest, _)| seq < newest) {
                    continue; // a late outcome of an older probe says nothing new
                }
                if answered && newest.is_some_and(|(_, was)| !was) {
                    tracing::debug!("meta leader answers again");
                    announce(&inner, &elections, Election::Meta);
                }
                if let Err(why) = &outcome
                    && newest.is_none_or(|(_, was)| was)
                {
                    tracing::debug!(%why, "meta leader does not answer");
                }
                newest = Some((seq, answered));
            }
        }
    }
}

/// Whether the meta leader answers `INFO` within [`PROBE_TIMEOUT`] (if not, why).
async fn probe(
    js: jetstream::Context,
    seq: u64,
    sent_at: Instant,
) -> (u64, Result<(), String>, Instant) {
    let body = serde_json::json!({});
    let request = js.request::<_, _, Response<serde_json::Value>>("INFO".to_owned(), &body);
    let outcome = match tokio::time::timeout(PROBE_TIMEOUT, request).await {
        Ok(Ok(Response::Ok(_))) => Ok(()),
        Ok(Ok(Response::Err { error })) => Err(format!("error {}", error.error_code().0)),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {PROBE_TIMEOUT:?}")),
    };
    (seq, outcome, sent_at)
}
