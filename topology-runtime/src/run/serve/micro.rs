//! The NATS micro protocol (ADR-32) for one service instance: `$SRV.PING`, `$SRV.INFO` and
//! `$SRV.STATS` (each bare, by name and by name and id) answered with the protocol's JSON
//! (async-nats' own response types), and the per-endpoint statistics they report.
//!
//! Here rather than through async-nats' `service` module, whose `Endpoint` hides its
//! subscription: stopping an endpoint there unsubscribes at once and the client forgets the
//! subscription, so a request that the server routed here just before it processed the
//! `UNSUB` is dropped unanswered. The endpoints subscribe themselves (`run/serve/endpoint.rs`)
//! and drain, which keeps the subscription until the connection's next poll and narrows that
//! window (docs/FAULTS.md); this file answers what the protocol asks of the instance. The
//! statistics are read from each endpoint's tally (`ServeSlot`, which health and the metrics
//! read too), counted since the instance started.

use std::collections::HashMap;
use std::sync::Arc;

use async_nats::service::{self, endpoint};
use async_nats::{Client, Message, Subscriber};
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::SelectAll;
use rand::distr::{Alphanumeric, SampleString};
use tokio::task::JoinHandle;

use crate::health::ServeSlot;

/// What the protocol says of one endpoint, and where it reads what the endpoint answered.
pub(super) struct EndpointStats {
    info: endpoint::Info,
    /// The endpoint's slot, whose tally records every answer.
    slot: Arc<ServeSlot>,
    /// The tally when this instance started: `STATS` counts what was answered since.
    started: endpoint::Stats,
}

impl EndpointStats {
    pub(super) fn new(
        slot: Arc<ServeSlot>,
        name: &str,
        subject: &str,
        queue_group: &str,
        metadata: &[(&str, &str)],
    ) -> Self {
        EndpointStats {
            info: endpoint::Info {
                name: name.to_owned(),
                subject: subject.to_owned(),
                queue_group: queue_group.to_owned(),
                metadata: owned(metadata),
            },
            started: slot.stats_since(&endpoint::Stats::default()),
            slot,
        }
    }

    fn snapshot(&self) -> endpoint::Stats {
        endpoint::Stats {
            name: self.info.name.clone(),
            subject: self.info.subject.clone(),
            queue_group: self.info.queue_group.clone(),
            ..self.slot.stats_since(&self.started)
        }
    }
}

/// How a service instance describes itself.
pub(super) struct Described<'a> {
    pub(super) name: &'a str,
    pub(super) version: &'a str,
    pub(super) description: Option<&'a str>,
    pub(super) metadata: &'a [(&'a str, &'a str)],
}

/// One running instance: its id, and the task answering the protocol's requests until it is
/// stopped or dropped.
pub(super) struct Instance {
    id: String,
    answering: JoinHandle<()>,
}

impl Instance {
    /// Subscribes the protocol's nine subjects for a new instance id and answers them from a
    /// task of its own, reporting `endpoints` (in this order).
    pub(super) async fn start(
        client: &Client,
        described: &Described<'_>,
        endpoints: Vec<Arc<EndpointStats>>,
    ) -> Result<Instance, async_nats::SubscribeError> {
        let id = Alphanumeric.sample_string(&mut rand::rng(), 22);
        let mut requests = SelectAll::new();
        for verb in Verb::ALL {
            for subject in verb.subjects(described.name, &id) {
                let subscriber: Subscriber = client.subscribe(subject).await?;
                requests.push(subscriber.map(move |message| (verb, message)));
            }
        }
        let metadata = owned(described.metadata);
        let ping = json(&service::PingResponse {
            kind: "io.nats.micro.v1.ping_response".to_owned(),
            name: described.name.to_owned(),
            id: id.clone(),
            version: described.version.to_owned(),
            metadata: metadata.clone(),
        });
        let info = json(&service::Info {
            kind: "io.nats.micro.v1.info_response".to_owned(),
            name: described.name.to_owned(),
            id: id.clone(),
            description: described.description.unwrap_or_default().to_owned(),
            version: described.version.to_owned(),
            metadata,
            endpoints: endpoints.iter().map(|e| e.info.clone()).collect(),
        });
        let answers = Answers {
            client: client.clone(),
            ping,
            info,
            name: described.name.to_owned(),
            id: id.clone(),
            version: described.version.to_owned(),
            started: async_nats::datetime::now(),
            endpoints,
        };
        let answering = tokio::spawn(async move {
            while let Some((verb, message)) = requests.next().await {
                answers.answer(verb, message).await;
            }
        });
        Ok(Instance { id, answering })
    }

    /// This instance's id, as `$SRV.PING` reports it.
    pub(super) fn id(&self) -> &str {
        &self.id
    }

    /// Answers the protocol no more (its subscriptions are dropped: unsubscribed).
    pub(super) fn stop(self) {}
}

impl Drop for Instance {
    fn drop(&mut self) {
        self.answering.abort();
    }
}

#[derive(Clone, Copy, Debug)]
enum Verb {
    Ping,
    Info,
    Stats,
}

impl Verb {
    const ALL: [Verb; 3] = [Verb::Ping, Verb::Info, Verb::Stats];

    /// `$SRV.<VERB>`, `$SRV.<VERB>.<name>` and `$SRV.<VERB>.<name>.<id>`.
    fn subjects(self, name: &str, id: &str) -> [String; 3] {
        let verb = match self {
            Verb::Ping => "PING",
            Verb::Info => "INFO",
            Verb::Stats => "STATS",
        };
        [
            format!("$SRV.{verb}"),
            format!("$SRV.{verb}.{name}"),
            format!("$SRV.{verb}.{name}.{id}"),
        ]
    }
}

/// What the answering task holds.
struct Answers {
    client: Client,
    /// The `PING` and `INFO` answers never change: serialised once.
    ping: Bytes,
    info: Bytes,
    name: String,
    id: String,
    version: String,
    started: async_nats::datetime::DateTime,
    endpoints: Vec<Arc<EndpointStats>>,
}

impl Answers {
    async fn answer(&self, verb: Verb, message: Message) {
        let Some(reply) = message.reply else {
            return;
        };
        let body = match verb {
            Verb::Ping => self.ping.clone(),
            Verb::Info => self.info.clone(),
            Verb::Stats => json(&service::Stats {
                kind: "io.nats.micro.v1.stats_response".to_owned(),
                name: self.name.clone(),
                id: self.id.clone(),
                version: self.version.clone(),
                started: self.started,
                endpoints: self.endpoints.iter().map(|e| e.snapshot()).collect(),
            }),
        };
        if let Err(e) = self.client.publish(reply, body).await {
            tracing::debug!(service = %self.name, ?verb, error = %e, "could not answer a $SRV request");
        }
    }
}

fn owned(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// The protocol's types serialise without failing (strings, numbers and maps of strings).
fn json(value: &impl serde::Serialize) -> Bytes {
    serde_json::to_vec(value)
        .map(Bytes::from)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::time::Duration;

    use crate::health::{Served, Shared};
    use crate::telemetry::EndpointMetrics;

    fn slot() -> Arc<ServeSlot> {
        let served = Served::Endpoint {
            service: "members".to_owned(),
            endpoint: "get".to_owned(),
            queue_group: "q".to_owned(),
        };
        let shared = Arc::new(Shared::new(Vec::<String>::new()));
        Arc::new(ServeSlot::new(served, "members.get", "app::get", shared))
    }

    fn refused() -> service::error::Error {
        service::error::Error {
            status: "no such member".to_owned(),
            code: 404,
        }
    }

    #[test]
    fn stats_count_answers_errors_and_the_mean_time() {
        let slot = slot();
        let mut metrics = EndpointMetrics::new("members", "get");
        let stats = EndpointStats::new(slot.clone(), "get", "members.get", "q", &[("k", "v")]);
        slot.answered(&mut metrics, Duration::from_millis(2), None);
        let refused = refused();
        slot.answered(
            &mut metrics,
            Duration::from_millis(4),
            Some(refused.clone()),
        );
        let snapshot = stats.snapshot();
        assert_eq!(snapshot.requests, 2);
        assert_eq!(snapshot.errors, 1);
        assert_eq!(snapshot.processing_time, Duration::from_millis(6));
        assert_eq!(snapshot.average_processing_time, Duration::from_millis(3));
        assert_eq!(snapshot.last_error, Some(refused));
        assert_eq!(snapshot.queue_group, "q");
        let body: serde_json::Value = serde_json::from_slice(&json(&snapshot)).unwrap();
        assert_eq!(body["num_requests"], 2);
        assert_eq!(body["last_error"], "404:no such member");
        assert_eq!(body["average_processing_time"], 3_000_000);
        let status = slot.endpoint_status().expect("an endpoint");
        assert_eq!(
            (status.requests, status.errors),
            (2, 1),
            "health reads the same tally"
        );
    }

    #[test]
    fn a_new_instance_counts_from_its_start() {
        let slot = slot();
        let mut metrics = EndpointMetrics::new("members", "get");
        slot.answered(&mut metrics, Duration::from_millis(5), Some(refused()));
        let stats = EndpointStats::new(slot.clone(), "get", "members.get", "q", &[]);
        let snapshot = stats.snapshot();
        assert_eq!((snapshot.requests, snapshot.errors), (0, 0));
        assert_eq!(snapshot.processing_time, Duration::ZERO);
        assert_eq!(
            snapshot.last_error, None,
            "the error was the previous instance's"
        );
        slot.answered(&mut metrics, Duration::from_millis(1), None);
        let snapshot = stats.snapshot();
        assert_eq!((snapshot.requests, snapshot.errors), (1, 0));
        assert_eq!(snapshot.average_processing_time, Duration::from_millis(1));
        assert_eq!(snapshot.last_error, None);
        let status = slot.endpoint_status().expect("an endpoint");
        assert_eq!(
            (status.requests, status.errors),
            (2, 1),
            "health counts both"
        );
    }

    #[test]
    fn each_verb_is_answered_bare_by_name_and_by_id() {
        assert_eq!(
            Verb::Stats.subjects("members", "abc"),
            ["$SRV.STATS", "$SRV.STATS.members", "$SRV.STATS.members.abc"]
        );
    }
}
