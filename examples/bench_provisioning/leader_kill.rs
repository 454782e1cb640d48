//! Leader-kill: the parent kills the meta leader at the start instant, restarts it later,
//! and watches the monitoring endpoints for the new leader's election.

use std::time::Duration;

use nats_topology_testkit::{ClusterMonitor, NatsCluster};
use serde_json::Value;
use tokio::time::Instant;

use crate::cell::Cell;
use crate::load::{ApiLoad, ProbeCounter, Requests, queue_drops};
use crate::report::Outcome;
use crate::trace::{watch_views, write_timeline};
use crate::{Args, BoxError, epoch_ms};

/// What a leader-kill cell saw besides the processes' outcomes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LeaderKill {
    /// The node killed (the meta leader at the start instant).
    pub(crate) killed: usize,
    /// The new meta leader's election, if one was seen.
    pub(crate) election: Option<Election>,
    /// API requests the cluster received from clients from the kill until the new leader was
    /// seen, and from then until the last process was ready.
    pub(crate) outage: Option<ApiLoad>,
    pub(crate) after_leader: Option<ApiLoad>,
    /// Requests the nodes dropped because a JetStream API queue was full (their log's
    /// "limit reached, dropping N requests"), during the cell.
    pub(crate) dropped: u64,
}

/// One leader-kill cell: runs `cell` while killing the meta leader at its start instant;
/// returns the outcomes and what else happened. With `trace`, writes the cell's timeline and
/// copies the nodes' logs next to it.
pub(crate) async fn run_cell(
    cluster: &mut NatsCluster,
    cell: &Cell<'_>,
    args: &Args,
    trace: Option<&std::path::Path>,
    reports_leader_since: bool,
) -> Result<(Vec<Outcome>, LeaderKill), BoxError> {
    let leader = wait_for_leader(cluster).await?;
    let logs: Vec<std::path::PathBuf> = (0..cluster.len())
        .map(|node| cluster.store_dir(node).join("server.log"))
        .collect();
    let log_sizes: Vec<u64> = logs
        .iter()
        .map(|log| std::fs::metadata(log).map_or(0, |m| m.len()))
        .collect();
    let (start_tx, start_rx) = tokio::sync::watch::channel(None);
    let (done_tx, done_rx) = tokio::sync::watch::channel(false);
    let monitor = cluster.monitor();
    let survivors: Vec<usize> = (0..cluster.len()).filter(|&i| i != leader).collect();
    let probes = ProbeCounter::start(&cluster.url(survivors[0])).await?;
    let restart = match args.restart_after_election {
        Some(after) => Restart::AfterElection(after),
        None => Restart::AfterStart(args.restart_after),
    };
    let (outcomes, killed, views) = tokio::join!(
        async {
            let outcomes = cell.run(Some(start_tx)).await;
            let _ = done_tx.send(true);
            // Every process has reported (and exited): the end of the second window.
            (
                outcomes,
                Requests::sample(&monitor, &survivors, true, &probes).await,
            )
        },
        kill_leader(
            cluster,
            leader,
            start_rx.clone(),
            restart,
            reports_leader_since,
            &probes,
        ),
        async {
            match trace {
                Some(_) => {
                    watch_views(&monitor, cell.shape.stream.name, start_rx.clone(), done_rx).await
                }
                None => Vec::new(),
            }
        },
    );
    let ((outcomes, at_end), (election, events, samples)) = (outcomes, killed?);
    let (outage, after_leader) = match samples {
        Some((at_kill, at_election)) => (
            Some(at_election.since(&at_kill)),
            Some(at_end.since(&at_election)),
        ),
        None => (None, None),
    };
    let dropped = logs
        .iter()
        .zip(&log_sizes)
        .map(|(log, &from)| queue_drops(log, from))
        .sum();
    if let Some(base) = trace {
        let start = *start_rx.borrow();
        if let Some(start) = start {
            write_timeline(base, start, &events, &views, cell.n)?;
        }
        // The nodes' own logs (all cells so far), for what /jsz does not show.
        for node in 0..cluster.len() {
            let log = cluster.store_dir(node).join("server.log");
            let _ = std::fs::copy(log, base.with_extension(format!("node{node}.log")));
        }
    }
    let kill = LeaderKill {
        killed: leader,
        election,
        outage,
        after_leader,
        dropped,
    };
    Ok((outcomes?, kill))
}

/// The meta leader once every node runs and they agree on one (after a restart, a node
/// may take a moment to rejoin).
pub(crate) async fn wait_for_leader(cluster: &NatsCluster) -> Result<usize, BoxError> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if (0..cluster.len()).all(|i| cluster.pid(i).is_some())
            && let Some(leader) = cluster.meta_leader().await
        {
            return Ok(leader);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err("no agreed meta leader within 60 s".into())
}

/// When leader-kill restarts the node it killed.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Restart {
    /// This long after the start instant.
    AfterStart(Duration),
    /// This long after the new leader is seen.
    AfterElection(Duration),
}

/// The start instant once the cell sends it (ms since the epoch), `None` if it never does.
pub(crate) async fn start_instant(
    mut start: tokio::sync::watch::Receiver<Option<f64>>,
) -> Option<f64> {
    start.wait_for(Option::is_some).await.ok().and_then(|s| *s)
}

/// The survivors' client requests sampled just after the kill and when the new leader is
/// seen (see [`Requests`]).
type OutageSamples = Option<(Requests, Requests)>;

/// Leader-kill: at the start instant, kills `leader`; watches the monitoring endpoints for
/// the new meta leader (every 10 ms) and restarts the killed node as `restart` says. Returns
/// when the new leader was seen (ms after the start instant), the kill and restart as
/// timeline events, and the client requests sampled at the kill and at the election.
pub(crate) async fn kill_leader(
    cluster: &mut NatsCluster,
    leader: usize,
    start: tokio::sync::watch::Receiver<Option<f64>>,
    restart: Restart,
    with_leader_since: bool,
    probes: &ProbeCounter,
) -> Result<(Option<Election>, Vec<(f64, String)>, OutageSamples), BoxError> {
    let Some(start) = start_instant(start).await else {
        return Ok((None, Vec::new(), None));
    };
    let wait = start - epoch_ms();
    if wait > 0.0 {
        tokio::time::sleep(Duration::from_secs_f64(wait / 1000.0)).await;
    }
    cluster.kill(leader);
    let mut events = vec![(epoch_ms() - start, format!("parent: killed node{leader}"))];
    let monitor = cluster.monitor();
    let survivors: Vec<usize> = (0..cluster.len()).filter(|&i| i != leader).collect();
    let at_kill = Requests::sample(&monitor, &survivors, false, probes).await;
    let (elected_tx, elected_rx) = tokio::sync::oneshot::channel::<f64>();
    let watch = async {
        let election = watch_election(&monitor, leader, start, with_leader_since).await;
        let at_election = Requests::sample(&monitor, &survivors, false, probes).await;
        if let Some(election) = &election {
            let _ = elected_tx.send(election.at);
        }
        (election, at_election)
    };
    let restart = async {
        let at = match restart {
            Restart::AfterStart(after) => start + after.as_secs_f64() * 1000.0,
            Restart::AfterElection(after) => match elected_rx.await {
                Ok(elected) => start + elected + after.as_secs_f64() * 1000.0,
                // No election within the watch's deadline: restart now.
                Err(_) => epoch_ms(),
            },
        };
        let wait = at - epoch_ms();
        if wait > 0.0 {
            tokio::time::sleep(Duration::from_secs_f64(wait / 1000.0)).await;
        }
        let began = epoch_ms() - start;
        let result = cluster.restart(leader).await;
        (began, epoch_ms() - start, result)
    };
    let ((election, at_election), (began, answered, restarted)) = tokio::join!(watch, restart);
    restarted?;
    if let Some(election) = &election {
        events.push((
            election.named,
            format!(
                "parent: node{} leads the meta group, in a term after the kill",
                election.leader
            ),
        ));
        if election.since_leader_since {
            events.push((
                election.at,
                format!(
                    "parent: node{} takes office (its leader_since)",
                    election.leader
                ),
            ));
        }
    }
    events.push((began, format!("parent: restarting node{leader}")));
    events.push((
        answered,
        format!("parent: node{leader} restarted, answers the JetStream API"),
    ));
    let samples = election.is_some().then_some((at_kill, at_election));
    Ok((election, events, samples))
}

/// The new meta leader, as leader-kill sees it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Election {
    /// The new leader.
    pub(crate) leader: usize,
    /// When every running node first named it in `/jsz` (ms after the start instant).
    pub(crate) named: f64,
    /// When it became leader in full (ms after the start instant): its `leader_since`, or
    /// `named` where the server does not report it.
    pub(crate) at: f64,
    /// Whether `at` is the leader's `leader_since`.
    pub(crate) since_leader_since: bool,
}

/// Watches (every 10 ms, up to 120 s) for the meta leader elected after `killed` was
/// killed.
///
/// A node names itself leader (`/jsz` `meta_cluster.leader`) as soon as it has the votes,
/// but takes office only once the first entry of its term (its peer state, the Raft no-op)
/// is committed and applied, which needs a quorum of followers to store it: until then it
/// answers no JetStream API request, and the server announces the election (logs "Self is
/// new JetStream cluster metadata leader", publishes
/// `$JS.EVENT.ADVISORY.DOMAIN.LEADER_ELECTED`) only then. That moment is the meta group's
/// `leader_since` in `/raftz` (nats-server 2.12 and later, `with_leader_since`; set on the
/// leader only, absent until then): the instant of the election. `named` is when a node
/// first reported itself leader in a term after the kill (the killed node too, restarted:
/// it may win again). Before 2.12 both are when every running node's `/jsz` names a leader
/// other than the killed node.
pub(crate) async fn watch_election(
    monitor: &ClusterMonitor,
    killed: usize,
    start: f64,
    with_leader_since: bool,
) -> Option<Election> {
    let deadline = Instant::now() + Duration::from_secs(120);
    if !with_leader_since {
        while Instant::now() < deadline {
            if let Some(new) = monitor.meta_leader().await
                && new != killed
            {
                let at = epoch_ms() - start;
                return Some(Election {
                    leader: new,
                    named: at,
                    at,
                    since_leader_since: false,
                });
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        return None;
    }
    // The term the killed leader led: the survivors still have it right after the kill.
    let mut old_term: Option<u64> = None;
    let mut named: Option<(usize, f64)> = None;
    while Instant::now() < deadline {
        let groups =
            futures::future::join_all((0..monitor.nodes()).map(|i| meta_raft(monitor, i))).await;
        let at = epoch_ms() - start;
        let term = |g: &Value| g["term"].as_u64().unwrap_or(0);
        let Some(old) = old_term else {
            old_term = groups.iter().flatten().map(term).max();
            continue;
        };
        for (i, group) in groups.iter().enumerate() {
            let Some(group) = group else { continue };
            if group["state"] != "LEADER" || term(group) <= old {
                continue;
            }
            let named_at = match named {
                Some((leader, named_at)) if leader == i => named_at,
                _ => {
                    named = Some((i, at));
                    at
                }
            };
            if let Some(since) = group["leader_since"].as_str().and_then(parse_rfc3339_ms) {
                return Some(Election {
                    leader: i,
                    named: named_at,
                    at: since - start,
                    since_leader_since: true,
                });
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    None
}

/// An RFC 3339 time (as the server writes `leader_since`) in ms since the epoch.
pub(crate) fn parse_rfc3339_ms(text: &str) -> Option<f64> {
    let time =
        time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339).ok()?;
    Some(time.unix_timestamp_nanos() as f64 / 1e6)
}

/// Node `node`'s view of the meta group's Raft state (`/raftz`, under the system account),
/// `None` when it does not answer.
pub(crate) async fn meta_raft(monitor: &ClusterMonitor, node: usize) -> Option<Value> {
    let raft = monitor.node_json(node, "/raftz?group=_meta_").await?;
    raft.as_object()?
        .values()
        .find_map(|groups| groups.get("_meta_"))
        .cloned()
}
