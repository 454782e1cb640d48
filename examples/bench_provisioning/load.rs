//! Leader-kill: the load the cluster receives (client requests per window, from the nodes'
//! `/connz`) and what it drops (from the nodes' logs).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures::StreamExt;
use nats_topology_testkit::ClusterMonitor;
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::BoxError;

/// The leader watch's probes the cluster receives: a subscriber of `$JS.API.INFO` (which the
/// processes send nothing else to) on a node that stays up counts them.
pub(crate) struct ProbeCounter {
    count: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl ProbeCounter {
    /// Subscribes through the node at `url`.
    pub(crate) async fn start(url: &str) -> Result<ProbeCounter, BoxError> {
        let client = async_nats::connect(url).await?;
        let mut probes = client.subscribe("$JS.API.INFO").await?;
        client.flush().await?;
        let count = Arc::new(AtomicU64::new(0));
        let counted = count.clone();
        let task = tokio::spawn(async move {
            let _client = client;
            while probes.next().await.is_some() {
                counted.fetch_add(1, Ordering::Relaxed);
            }
        });
        Ok(ProbeCounter { count, task })
    }

    fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }
}

impl Drop for ProbeCounter {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// API requests received from clients over a window (of which `INFO` probes), and its
/// length.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ApiLoad {
    pub(crate) requests: u64,
    pub(crate) probes: u64,
    pub(crate) seconds: f64,
}

impl ApiLoad {
    fn rate(&self, n: u64) -> f64 {
        if self.seconds > 0.0 {
            n as f64 / self.seconds
        } else {
            0.0
        }
    }

    /// `12345 in 4.21 s (2932/s; probes 2800/s)`.
    pub(crate) fn text(&self) -> String {
        format!(
            "{} in {:.2} s ({:.0}/s; probes {:.0}/s)",
            self.requests,
            self.seconds,
            self.rate(self.requests),
            self.rate(self.probes)
        )
    }

    pub(crate) fn json(&self) -> Value {
        json!({
            "requests": self.requests,
            "probes": self.probes,
            "seconds": (self.seconds * 1000.0).round() / 1000.0,
            "per_s": self.rate(self.requests).round(),
            "probes_per_s": self.rate(self.probes).round(),
        })
    }
}

/// The messages each client connection of some nodes had sent (`/connz` `in_msgs`, by
/// connection id), and when they were read. During a leader-kill cell the children publish
/// nothing but JetStream API requests (the provisioning requests and the leader watch's
/// probes), so the difference of two samples is the API requests the cluster received.
/// Only the nodes that stay up are sampled: a killed node forgets its counts, and clients
/// of the killed node reconnect to them (their new connections count from zero, within the
/// window).
pub(crate) struct Requests {
    at: Instant,
    /// The probes counted by then.
    probes: u64,
    /// Per node sampled: connection id -> messages received from it.
    nodes: Vec<HashMap<u64, u64>>,
}

impl Requests {
    /// Reads `/connz` of `nodes`; `closed` also lists connections closed since (a process
    /// that finished), as the end of a window must.
    pub(crate) async fn sample(
        monitor: &ClusterMonitor,
        nodes: &[usize],
        closed: bool,
        probes: &ProbeCounter,
    ) -> Requests {
        let state = if closed { "&state=all" } else { "" };
        let path = format!("/connz?limit=100000{state}");
        let views = futures::future::join_all(nodes.iter().map(|&i| monitor.node_json(i, &path)));
        let at = Instant::now();
        let probes = probes.count();
        let nodes = views
            .await
            .into_iter()
            .map(|connz| {
                let connz = connz.unwrap_or(Value::Null);
                connz["connections"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|c| Some((c["cid"].as_u64()?, c["in_msgs"].as_u64()?)))
                    .collect()
            })
            .collect();
        Requests { at, probes, nodes }
    }

    /// What clients sent between `earlier` and this sample. A connection opened in between
    /// (a higher id than any `earlier` saw) counts in full; one that closed before `earlier`
    /// (an older cell's) not at all.
    pub(crate) fn since(&self, earlier: &Requests) -> ApiLoad {
        let mut requests = 0;
        for (now, before) in self.nodes.iter().zip(&earlier.nodes) {
            let newest = before.keys().copied().max().unwrap_or(0);
            for (cid, &sent) in now {
                match before.get(cid) {
                    Some(&was) => requests += sent.saturating_sub(was),
                    None if *cid > newest => requests += sent,
                    None => {}
                }
            }
        }
        ApiLoad {
            requests,
            probes: self.probes - earlier.probes,
            seconds: self.at.duration_since(earlier.at).as_secs_f64(),
        }
    }
}

/// The requests a node's log says it dropped from a full JetStream API queue ("JetStream API
/// queue limit reached, dropping 10000 requests"), in what was written after byte `from`
/// (from the start when the log is shorter: the node restarted with a new one).
pub(crate) fn queue_drops(log: &std::path::Path, from: u64) -> u64 {
    let Ok(text) = std::fs::read(log) else {
        return 0;
    };
    let from = usize::try_from(from).unwrap_or(0);
    let from = if from <= text.len() { from } else { 0 };
    String::from_utf8_lossy(&text[from..])
        .lines()
        .filter_map(|line| {
            let rest = line.split_once("limit reached, dropping ")?.1;
            rest.split_whitespace().next()?.parse::<u64>().ok()
        })
        .sum()
}
