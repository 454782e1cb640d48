//! `--trace`: each node's view every 10 ms and the processes' logs, in one timeline per cell.

use std::time::Duration;

use nats_topology_testkit::ClusterMonitor;
use serde_json::Value;

use crate::cell::Cell;
use crate::leader_kill::{meta_raft, start_instant};
use crate::report::Outcome;
use crate::{BoxError, epoch_ms};

/// A cell of a mode other than leader-kill; with `trace`, writes its processes' logs in one
/// timeline.
pub(crate) async fn run_cell(
    cell: &Cell<'_>,
    trace: Option<&std::path::Path>,
) -> Result<Vec<Outcome>, BoxError> {
    let Some(base) = trace else {
        return cell.run(None).await;
    };
    let (start_tx, start_rx) = tokio::sync::watch::channel(None);
    let outcomes = cell.run(Some(start_tx)).await?;
    if let Some(start) = *start_rx.borrow() {
        write_timeline(base, start, &[], &[], cell.n)?;
    }
    Ok(outcomes)
}

/// One node's view, as its `/jsz` reports it: the meta leader, and the leaders of the
/// stream and of its consumers (`-` where it names none; `down` when it does not answer).
pub(crate) async fn node_view(monitor: &ClusterMonitor, node: usize, stream: &str) -> String {
    let Some(jsz) = monitor
        .node_json(node, "/jsz?accounts=true&streams=true&consumers=true")
        .await
    else {
        return "down".to_owned();
    };
    let name = |v: &Value| {
        v.as_str()
            .filter(|s| !s.is_empty())
            .unwrap_or("-")
            .to_owned()
    };
    let meta = name(&jsz["meta_cluster"]["leader"]);
    let mut view = format!("meta {meta}");
    // The meta group's raft state (nats-server 2.12 and later): `leader_since` is set on the
    // leader once its first entry of the term is applied, when it starts answering.
    if let Some(group) = meta_raft(monitor, node).await {
        view.push_str(&format!(
            " [{} term {} pindex {} commit {} applied {}{}]",
            group["state"].as_str().unwrap_or("?"),
            group["term"],
            group["pindex"],
            group["committed"],
            group["applied"],
            if group["leader_since"].is_string() {
                ", leader since set"
            } else {
                ""
            },
        ));
    }
    let streams = jsz["account_details"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|a| a["stream_detail"].as_array().into_iter().flatten());
    for detail in streams.filter(|d| d["name"] == stream) {
        view.push_str(&format!(", stream {}", name(&detail["cluster"]["leader"])));
        for consumer in detail["consumer_detail"].as_array().into_iter().flatten() {
            view.push_str(&format!(
                ", {} {}",
                consumer["name"].as_str().unwrap_or("?"),
                name(&consumer["cluster"]["leader"])
            ));
        }
    }
    view
}

/// Leader-kill with `--trace`: every change of each node's view (see [`node_view`]), every
/// 10 ms from the start instant until `done`, in ms after the start.
pub(crate) async fn watch_views(
    monitor: &ClusterMonitor,
    stream: &str,
    start: tokio::sync::watch::Receiver<Option<f64>>,
    mut done: tokio::sync::watch::Receiver<bool>,
) -> Vec<(f64, String)> {
    let Some(start) = start_instant(start).await else {
        return Vec::new();
    };
    let nodes = monitor.nodes();
    let mut last: Vec<Option<String>> = vec![None; nodes];
    let mut events = Vec::new();
    while !*done.borrow() {
        let views =
            futures::future::join_all((0..nodes).map(|i| node_view(monitor, i, stream))).await;
        let at = epoch_ms() - start;
        for (i, view) in views.into_iter().enumerate() {
            if last[i].as_ref() != Some(&view) {
                events.push((at, format!("node{i}: {view}")));
                last[i] = Some(view);
            }
        }
        tokio::select! {
            _ = done.changed() => {}
            () = tokio::time::sleep(Duration::from_millis(10)) => {}
        }
    }
    events
}

/// Where process `i` of the cell traced at `base` writes its log.
pub(crate) fn child_log(base: &std::path::Path, i: usize) -> std::path::PathBuf {
    base.with_extension(format!("child{i}.log"))
}

/// Writes `<base>.timeline`: the parent's events and the nodes' views, and every line of the
/// `n` processes' logs (their epoch timestamps made relative to `start`), in time order.
pub(crate) fn write_timeline(
    base: &std::path::Path,
    start: f64,
    events: &[(f64, String)],
    views: &[(f64, String)],
    n: usize,
) -> Result<(), BoxError> {
    let mut lines: Vec<(f64, String)> = events.iter().chain(views).cloned().collect();
    for i in 0..n {
        let Ok(log) = std::fs::read_to_string(child_log(base, i)) else {
            continue;
        };
        for line in log.lines() {
            let (time, rest) = line.split_once(' ').unwrap_or((line, ""));
            if let Ok(epoch) = time.parse::<f64>() {
                lines.push((epoch - start, format!("p{i}: {}", rest.trim())));
            }
        }
    }
    lines.sort_by(|a, b| a.0.total_cmp(&b.0));
    let text: String = lines
        .iter()
        .map(|(at, line)| format!("{at:>9.1} {line}\n"))
        .collect();
    std::fs::write(base.with_extension("timeline"), text)?;
    Ok(())
}
