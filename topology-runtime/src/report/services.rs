//! The live instances of each declared service, as the NATS micro protocol shows them: every
//! instance answers `$SRV.PING.<name>` (gathered within a short window, since nobody knows
//! how many there are), then each one's `$SRV.STATS.<name>.<id>`.

use std::fmt;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use serde::Deserialize;

use crate::registry::Topology;

/// How long [`inspect`](fn@super::inspect) gathers the answers to `$SRV.PING.<name>` (and waits
/// for each instance's stats).
pub const SERVICE_PING_WINDOW: Duration = Duration::from_millis(500);

/// One declared service and the instances that answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceReport {
    /// The service's name.
    pub name: String,
    /// Its declared version.
    pub version: String,
    /// Its declared endpoints' names, sorted.
    pub endpoints: Vec<String>,
    /// The instances that answered `$SRV.PING.<name>` within the window, sorted by id; none
    /// when no instance runs (or none is reachable).
    pub instances: Vec<ServiceInstance>,
    /// Why the instances could not be asked at all (the connection is closed), if so.
    pub unreachable: Option<String>,
    /// The window the answers were gathered in.
    pub window: Duration,
}

/// One instance of a service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceInstance {
    /// Its id (random, per instance).
    pub id: String,
    /// The version it runs (during a rolling deploy, not necessarily the declared one).
    pub version: String,
    /// Its `$SRV.STATS` answer, or why there was none.
    pub stats: Result<InstanceStats, String>,
}

/// What an instance's `$SRV.STATS` says, summed over its endpoints and per endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceStats {
    /// Requests handled since it started.
    pub requests: u64,
    /// Requests answered with an error.
    pub errors: u64,
    /// Average time a request took to handle.
    pub average_processing_time: Duration,
    /// Per endpoint, as the instance lists them.
    pub endpoints: Vec<EndpointStats>,
}

/// One endpoint's statistics in one instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointStats {
    /// The endpoint's name.
    pub name: String,
    /// Its subject.
    pub subject: String,
    /// Its queue group.
    pub queue_group: String,
    /// Requests handled.
    pub requests: u64,
    /// Requests answered with an error.
    pub errors: u64,
    /// Average time a request took to handle.
    pub average_processing_time: Duration,
    /// The last error, if any.
    pub last_error: Option<String>,
}

impl fmt::Display for ServiceReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "  `{}` {}", self.name, self.version)?;
        if !self.endpoints.is_empty() {
            write!(f, " (endpoints {})", self.endpoints.join(", "))?;
        }
        if let Some(why) = &self.unreachable {
            return writeln!(f, ": NOT ASKED: {why}");
        }
        if self.instances.is_empty() {
            return writeln!(
                f,
                ": no instance answers `$SRV.PING.{}` (within {:?})",
                self.name, self.window
            );
        }
        writeln!(f, ": {} instance(s)", self.instances.len())?;
        for instance in &self.instances {
            write!(f, "    instance `{}` {}", instance.id, instance.version)?;
            if instance.version != self.version {
                write!(f, " (declared {})", self.version)?;
            }
            match &instance.stats {
                Err(why) => writeln!(f, ": no stats ({why})")?,
                Ok(stats) => {
                    writeln!(
                        f,
                        ": requests {}, errors {}, average {:?}",
                        stats.requests, stats.errors, stats.average_processing_time
                    )?;
                    for e in &stats.endpoints {
                        write!(
                            f,
                            "      endpoint `{}` on `{}` (queue group `{}`): requests {}, errors {}, average {:?}",
                            e.name,
                            e.subject,
                            e.queue_group,
                            e.requests,
                            e.errors,
                            e.average_processing_time
                        )?;
                        match &e.last_error {
                            Some(error) => writeln!(f, ", last error: {error}")?,
                            None => writeln!(f)?,
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

#[derive(Deserialize)]
struct Ping {
    name: String,
    id: String,
    version: String,
}

#[derive(Deserialize)]
struct Stats {
    #[serde(default)]
    endpoints: Vec<StatsEndpoint>,
}

#[derive(Deserialize)]
struct StatsEndpoint {
    name: String,
    subject: String,
    #[serde(default)]
    queue_group: String,
    #[serde(default)]
    num_requests: u64,
    #[serde(default)]
    num_errors: u64,
    /// Nanoseconds.
    #[serde(default)]
    processing_time: u64,
    /// Nanoseconds.
    #[serde(default)]
    average_processing_time: u64,
    /// `"400:no such member"`; empty or null when none.
    #[serde(default)]
    last_error: Option<String>,
}

/// Asks every service declared in `topology` for its instances (`$SRV.PING.<name>`, answers
/// gathered for `window`), then each instance for its stats (each answer awaited for
/// `window`). Never fails: what could not be read is said in the report.
///
/// ```no_run
/// # async fn example(client: async_nats::Client) {
/// use std::time::Duration;
/// use nats_topology::Topology;
/// use nats_topology::report::inspect_services;
///
/// for service in inspect_services(&client, &Topology::from_registry(), Duration::from_secs(1)).await {
///     print!("{service}"); // "  `members` 1.2.0 (endpoints get): 2 instance(s)", then each
///     if service.instances.is_empty() {
///         eprintln!("no instance of `{}` answers", service.name);
///     }
/// }
/// # }
/// ```
pub async fn inspect_services(
    client: &async_nats::Client,
    topology: &Topology,
    window: Duration,
) -> Vec<ServiceReport> {
    let mut reports: Vec<ServiceReport> = topology
        .services()
        .chunk_by(|a, b| a.name == b.name)
        .map(|decls| {
            let decl = decls[0];
            let mut endpoints: Vec<String> = topology
                .endpoints()
                .iter()
                .filter(|e| e.decl.service.name == decl.name)
                .map(|e| e.decl.name.to_owned())
                .collect();
            endpoints.sort();
            endpoints.dedup();
            ServiceReport {
                name: decl.name.to_owned(),
                version: decl.version.to_owned(),
                endpoints,
                instances: Vec::new(),
                unreachable: None,
                window,
            }
        })
        .collect();
    if reports.is_empty() {
        return reports;
    }
    if let Err(why) = ping(client, &mut reports, window).await {
        for report in &mut reports {
            report.unreachable = Some(why.clone());
        }
        return reports;
    }
    for report in &mut reports {
        let name = report.name.clone();
        let asked = report
            .instances
            .iter()
            .map(|i| stats(client, &name, &i.id, window));
        let answers = futures::future::join_all(asked).await;
        for (instance, answer) in report.instances.iter_mut().zip(answers) {
            instance.stats = answer;
        }
    }
    reports
}

/// Pings every service at once, through one inbox, and gathers the answers for `window`.
async fn ping(
    client: &async_nats::Client,
    reports: &mut [ServiceReport],
    window: Duration,
) -> Result<(), String> {
    let inbox = client.new_inbox();
    let mut answers = client
        .subscribe(format!("{inbox}.*"))
        .await
        .map_err(|e| e.to_string())?;
    for (i, report) in reports.iter().enumerate() {
        client
            .publish_with_reply(
                format!("$SRV.PING.{}", report.name),
                format!("{inbox}.{i}"),
                Bytes::new(),
            )
            .await
            .map_err(|e| e.to_string())?;
    }
    client.flush().await.map_err(|e| e.to_string())?;
    let deadline = tokio::time::Instant::now() + window;
    while let Ok(Some(message)) = tokio::time::timeout_at(deadline, answers.next()).await {
        let Some(report) = message
            .subject
            .rsplit('.')
            .next()
            .and_then(|i| i.parse::<usize>().ok())
            .and_then(|i| reports.get_mut(i))
        else {
            continue;
        };
        let Ok(ping) = serde_json::from_slice::<Ping>(&message.payload) else {
            continue; // not a micro protocol answer
        };
        if ping.name != report.name || report.instances.iter().any(|i| i.id == ping.id) {
            continue;
        }
        report.instances.push(ServiceInstance {
            id: ping.id,
            version: ping.version,
            stats: Err("not asked yet".to_owned()),
        });
    }
    let _ = answers.unsubscribe().await;
    for report in reports {
        report.instances.sort_by(|a, b| a.id.cmp(&b.id));
    }
    Ok(())
}

/// One instance's `$SRV.STATS.<name>.<id>`.
async fn stats(
    client: &async_nats::Client,
    name: &str,
    id: &str,
    window: Duration,
) -> Result<InstanceStats, String> {
    let subject = format!("$SRV.STATS.{name}.{id}");
    let message = tokio::time::timeout(window, client.request(subject, Bytes::new()))
        .await
        .map_err(|_| format!("no answer within {window:?}"))?
        .map_err(|e| e.to_string())?;
    let stats: Stats = serde_json::from_slice(&message.payload)
        .map_err(|e| format!("not a micro protocol stats answer: {e}"))?;
    let requests = stats.endpoints.iter().map(|e| e.num_requests).sum();
    let processing: u64 = stats.endpoints.iter().map(|e| e.processing_time).sum();
    Ok(InstanceStats {
        requests,
        errors: stats.endpoints.iter().map(|e| e.num_errors).sum(),
        average_processing_time: Duration::from_nanos(
            processing.checked_div(requests).unwrap_or(0),
        ),
        endpoints: stats
            .endpoints
            .into_iter()
            .map(|e| EndpointStats {
                name: e.name,
                subject: e.subject,
                queue_group: e.queue_group,
                requests: e.num_requests,
                errors: e.num_errors,
                average_processing_time: Duration::from_nanos(e.average_processing_time),
                last_error: e.last_error.filter(|e| !e.is_empty()),
            })
            .collect(),
    })
}
