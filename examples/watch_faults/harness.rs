//! Key-value watches through node loss, staged on a real 3-node cluster: two watcher processes
//! (`A` connected first to node 0, `B` to node 1) each run a `#[kv_watch]` on an R3 bucket
//! (history 1) while a writer puts distinct keys, one every 10 ms; a third of the way in, one
//! fault:
//!
//! - `own5` / `own30`: node 0 (A's own, B's other node) is killed (SIGKILL) and restarted
//!   after 5 s / 30 s;
//! - `leader`: the node leading the bucket's stream is killed and restarted after 5 s;
//! - `partition` / `partition30`: node 0 is cut off from its peers for 10 s / 30 s (its
//!   clients still reach it);
//! - `sigkill`: watcher B is SIGKILLed and started again.
//!
//! Each watcher prints every change it hands to its handler and every state its health reports,
//! with the time; the writer records when each put was acknowledged. A repetition checks, per
//! watcher process: every key seen (by the last process of each watcher), no revision handled
//! twice, revisions strictly increasing, and reports the worst delay from a put to the handler
//! and how long health said `running` while the watch was silent with changes waiting.
//!
//! Shared by `examples/watch_faults` (the repeated loop) and `tests/kv_watch_faults.rs` (one
//! repetition of each fault).

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nats_topology::bucket::KvEntry;
use nats_topology::{ConsumerState, HandlerError, Runtime, kv_bucket, kv_watch};
use nats_topology_testkit::{NatsCluster, eventually};

/// The environment variable that makes a process a watcher: the cluster's URLs, the first
/// one its own node, comma-separated.
pub const CHILD_ENV: &str = "NATS_TOPOLOGY_WATCH_FAULTS_URLS";

/// How many keys a repetition puts.
pub const KEYS: usize = 600;

/// The put after which the fault is staged.
const FAULT_AT: usize = 200;

/// How long every key may take to reach every watcher once the writer is done.
const SEEN_WITHIN: Duration = Duration::from_secs(90);

/// Replicated on every node, one revision per key.
#[kv_bucket(name = "WATCH_FAULTS", value = u64, replicas = 3, history = 1)]
pub struct WatchFaults;

#[kv_watch(bucket = WatchFaults, keys = "k.>")]
async fn on_change(entry: KvEntry<u64>) -> Result<(), HandlerError> {
    println!("REV {} {} {}", entry.revision, entry.key, now_ms());
    Ok(())
}

/// Now, in milliseconds since the epoch (the processes share one clock).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// In a watcher process: runs the watch at the runtime's default settings until SIGTERM or
/// SIGKILL, printing `READY`, every change handled (`REV`), and every change of the watch's
/// health state (`STATE`).
pub async fn watcher(urls: &str) {
    if std::env::var_os("WATCH_FAULTS_STDERR").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .init();
    }
    let addrs: Vec<async_nats::ServerAddr> = urls
        .split(',')
        .map(|u| u.parse().expect("a server URL"))
        .collect();
    let client = nats_topology::connect_options()
        .retain_servers_order()
        .connect(addrs)
        .await
        .expect("connect");
    let runtime = Runtime::builder(client).build().expect("a valid topology");
    let health = runtime.health();
    // Observation, not synchronisation: the parent reads what health said, and when (ready:
    // the watch ran for the first time).
    tokio::spawn(async move {
        let mut said = String::new();
        let mut ready = false;
        loop {
            if let Some(watch) = health.consumers().into_iter().next() {
                let kind = state_kind(&watch.state);
                if kind != said {
                    println!("STATE {} {kind} {}", now_ms(), watch.state);
                    said = kind;
                }
                if !ready && said == "running" {
                    println!("READY {}", now_ms());
                    ready = true;
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    runtime.run_until_signal().await.expect("a clean drain");
}

fn state_kind(state: &ConsumerState) -> String {
    match state {
        ConsumerState::Running => "running",
        ConsumerState::Stalled { .. } => "stalled",
        ConsumerState::Retrying { .. } => "retrying",
        ConsumerState::Provisioning => "provisioning",
        _ => "other",
    }
    .to_owned()
}

/// One fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    Own5,
    Own30,
    Leader,
    Partition,
    Partition30,
    Sigkill,
}

impl Fault {
    /// What the repeated loop and the test stage; `partition30` only when named (`--faults`):
    /// see docs/FAULTS.md on a watch cut off from its stream for longer than `move_after`.
    pub const ALL: [Fault; 5] = [
        Fault::Own5,
        Fault::Own30,
        Fault::Leader,
        Fault::Partition,
        Fault::Sigkill,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Fault::Own5 => "own5",
            Fault::Own30 => "own30",
            Fault::Leader => "leader",
            Fault::Partition => "partition",
            Fault::Partition30 => "partition30",
            Fault::Sigkill => "sigkill",
        }
    }
}

/// What one watcher process printed.
#[derive(Default)]
struct Lines {
    /// (revision, key, ms)
    revisions: Vec<(u64, String, u64)>,
    /// (ms, state kind)
    states: Vec<(u64, String)>,
    ready: Option<u64>,
}

/// One watcher process and what it printed.
struct Watcher {
    child: Child,
    spawned: u64,
    lines: Arc<Mutex<Lines>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Watcher {
    fn spawn(mut command: Command, urls: &[String]) -> Watcher {
        let mut child = command
            .env(CHILD_ENV, urls.join(","))
            .stdout(Stdio::piped())
            .stderr(if std::env::var_os("WATCH_FAULTS_STDERR").is_some() {
                Stdio::inherit()
            } else {
                Stdio::null()
            })
            .spawn()
            .expect("spawn a watcher process");
        let stdout = child.stdout.take().expect("piped");
        let lines = Arc::new(Mutex::new(Lines::default()));
        let into = lines.clone();
        let verbose = std::env::var_os("WATCH_FAULTS_STDERR").is_some();
        let pid = child.id();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if verbose && !line.contains("REV ") {
                    eprintln!("[watcher {pid}] {line}");
                }
                // libtest may print its own words before the first line.
                let Some(at) = ["REV ", "STATE ", "READY "]
                    .iter()
                    .filter_map(|w| line.find(w))
                    .min()
                else {
                    continue;
                };
                let mut words = line[at..].split(' ');
                let mut lines = into.lock().unwrap();
                match words.next() {
                    Some("REV") => {
                        let revision = words.next().and_then(|w| w.parse().ok());
                        let key = words.next().map(str::to_owned);
                        let ms = words.next().and_then(|w| w.parse().ok());
                        if let (Some(r), Some(k), Some(ms)) = (revision, key, ms) {
                            lines.revisions.push((r, k, ms));
                        }
                    }
                    Some("STATE") => {
                        let ms = words.next().and_then(|w| w.parse().ok());
                        let kind = words.next().map(str::to_owned);
                        if let (Some(ms), Some(kind)) = (ms, kind) {
                            lines.states.push((ms, kind));
                        }
                    }
                    Some("READY") => lines.ready = words.next().and_then(|w| w.parse().ok()),
                    _ => {}
                }
            }
        });
        Watcher {
            child,
            spawned: now_ms(),
            lines,
            reader: Some(reader),
        }
    }

    fn ready(&self) -> bool {
        self.lines.lock().unwrap().ready.is_some()
    }

    fn keys_seen(&self) -> usize {
        let lines = self.lines.lock().unwrap();
        lines
            .revisions
            .iter()
            .map(|(_, k, _)| k.as_str())
            .collect::<std::collections::HashSet<_>>()
            .len()
    }

    /// SIGKILL by pid, and reap.
    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
    }

    /// SIGTERM by pid (a drain), and reap.
    fn stop(&mut self) {
        let pid = self.child.id().to_string();
        if let Ok(None) = self.child.try_wait() {
            let _ = Command::new("kill")
                .args(["-TERM", &pid])
                .stderr(Stdio::null())
                .status();
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while std::time::Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            // Polling a child's exit with a deadline.
            std::thread::sleep(Duration::from_millis(20));
        }
        self.kill();
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.kill();
    }
}

/// What one watcher process did, checked.
#[derive(Debug, Clone)]
pub struct Lifetime {
    /// `A`, `B`, or `B2` for B started again.
    pub name: String,
    pub handled: usize,
    pub keys_seen: usize,
    /// Revisions handled more than once.
    pub duplicates: usize,
    /// Revisions handled at or below one handled before.
    pub out_of_order: usize,
    /// Keys this process should have seen and did not (only for the last process of each
    /// watcher).
    pub missing: usize,
    /// The worst delay from a put (or from the process's start, for what was put before it)
    /// to its handler, in ms, and the key.
    pub worst_delay_ms: u64,
    pub worst_key: String,
    /// How long health said `running` while changes waited for this watcher and it had handled
    /// nothing for longer than the fault's [`Fault::silence_bound`].
    pub running_while_silent_ms: u64,
}

impl Fault {
    /// How long a watch may be silent with changes waiting and still say `running`. After a
    /// node loss: two heartbeats at the defaults (5 s each) and a second for the round trips.
    /// On the cut-off side of a partition the watch's own server still answers and sends its
    /// heartbeats; the runtime moves to another listed server after `move_after` (15 s) without
    /// an answer from JetStream (docs/FAULTS.md, "A partition"), and a second more.
    pub fn silence_bound(self) -> Duration {
        match self {
            Fault::Partition | Fault::Partition30 => Duration::from_secs(16),
            _ => Duration::from_secs(11),
        }
    }
}

/// One repetition's outcome.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub fault: Fault,
    pub lifetimes: Vec<Lifetime>,
    /// Which node the fault hit.
    pub node: Option<usize>,
}

impl Outcome {
    /// What went wrong, if anything: a key missing, a revision twice or out of order.
    pub fn failures(&self) -> Vec<String> {
        let mut failures = Vec::new();
        for l in &self.lifetimes {
            if l.missing > 0 {
                failures.push(format!("{}: {} keys never seen", l.name, l.missing));
            }
            if l.duplicates > 0 {
                failures.push(format!(
                    "{}: {} revisions handled twice",
                    l.name, l.duplicates
                ));
            }
            if l.out_of_order > 0 {
                failures.push(format!(
                    "{}: {} revisions at or below one handled before",
                    l.name, l.out_of_order
                ));
            }
        }
        failures
    }

    pub fn summary(&self) -> String {
        let mut line = format!("{:<9}", self.fault.name());
        if let Some(node) = self.node {
            line.push_str(&format!(" node{node}"));
        }
        for l in &self.lifetimes {
            line.push_str(&format!(
                " | {} handled {} seen {}/{} dup {} ooo {} worst {} ms ({}) running-silent {} ms",
                l.name,
                l.handled,
                l.keys_seen,
                if l.missing > 0 {
                    l.keys_seen + l.missing
                } else {
                    l.keys_seen
                },
                l.duplicates,
                l.out_of_order,
                l.worst_delay_ms,
                l.worst_key,
                l.running_while_silent_ms
            ));
        }
        line
    }
}

/// One repetition of `fault`; `command` makes the command that runs a watcher process (this
/// program in watcher mode).
pub async fn repetition(fault: Fault, command: &dyn Fn() -> Command) -> Outcome {
    let mut cluster = NatsCluster::start_linked().await.expect("a 3-node cluster");
    let urls = cluster.urls();
    let order = |first: usize| -> Vec<String> {
        (0..urls.len())
            .map(|i| urls[(first + i) % urls.len()].clone())
            .collect()
    };
    let mut a = Watcher::spawn(command(), &order(0));
    let mut b = Watcher::spawn(command(), &order(1));
    for (w, who) in [(&a, "watcher A"), (&b, "watcher B")] {
        eventually(SEEN_WITHIN, &format!("{who} ready"), || {
            let ready = w.ready();
            async move { ready.then_some(()) }
        })
        .await;
    }

    let writer = nats_topology::connect_options()
        .retain_servers_order()
        .connect(
            order(2)
                .iter()
                .map(|u| u.parse::<async_nats::ServerAddr>().unwrap())
                .collect::<Vec<_>>(),
        )
        .await
        .expect("the writer connects");
    let js = async_nats::jetstream::new(writer);
    let kv = eventually(SEEN_WITHIN, "the bucket", || {
        let js = js.clone();
        async move { js.get_key_value("WATCH_FAULTS").await.ok() }
    })
    .await;
    let puts: Arc<Mutex<HashMap<String, u64>>> = Arc::default();
    let (at_fault, fault_now) = tokio::sync::oneshot::channel::<()>();
    let writing = {
        let puts = puts.clone();
        tokio::spawn(async move {
            let mut at_fault = Some(at_fault);
            for i in 0..KEYS {
                let key = format!("k.{i}");
                let value = bytes::Bytes::from(serde_json::to_vec(&(i as u64)).unwrap());
                // A put that fails (no leader while a node is down) is tried again.
                eventually(SEEN_WITHIN, "a put to be stored", || {
                    let (kv, key, value) = (kv.clone(), key.clone(), value.clone());
                    async move { kv.put(key, value).await.ok() }
                })
                .await;
                puts.lock().unwrap().insert(key, now_ms());
                if i + 1 == FAULT_AT
                    && let Some(tx) = at_fault.take()
                {
                    let _ = tx.send(());
                }
                // The pace of the writes is the scenario, not synchronisation.
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    };
    let _ = fault_now.await;
    let mut node = None;
    let mut b2: Option<Watcher> = None;
    match fault {
        Fault::Own5 | Fault::Own30 | Fault::Leader => {
            let victim = if fault == Fault::Leader {
                stream_leader(&cluster).await.unwrap_or(2)
            } else {
                0
            };
            node = Some(victim);
            cluster.kill(victim);
            let down = if fault == Fault::Own30 { 30 } else { 5 };
            // How long the node stays down is the fault, not synchronisation.
            tokio::time::sleep(Duration::from_secs(down)).await;
            cluster.restart(victim).await.expect("the node restarts");
        }
        Fault::Partition | Fault::Partition30 => {
            node = Some(0);
            cluster.isolate(0);
            let cut = if fault == Fault::Partition30 { 30 } else { 10 };
            // How long the partition lasts is the fault, not synchronisation.
            tokio::time::sleep(Duration::from_secs(cut)).await;
            cluster.heal();
        }
        Fault::Sigkill => {
            b.kill();
            b2 = Some(Watcher::spawn(command(), &order(1)));
        }
    }
    writing.await.expect("the writer finishes");
    let puts = puts.lock().unwrap().clone();
    let last = match &b2 {
        Some(b2) => vec![&a, b2],
        None => vec![&a, &b],
    };
    for w in &last {
        let _ = tokio::time::timeout(SEEN_WITHIN, async {
            while w.keys_seen() < KEYS {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await;
    }
    let mut lifetimes = Vec::new();
    let b_done_at = b2.as_ref().map(|b2| b2.spawned);
    let bound = fault.silence_bound();
    lifetimes.push(check("A", &a, &puts, (true, None), bound));
    lifetimes.push(check("B", &b, &puts, (b2.is_none(), b_done_at), bound));
    if let Some(b2) = &b2 {
        lifetimes.push(check("B2", b2, &puts, (true, None), bound));
    }
    a.stop();
    b.stop();
    if let Some(mut b2) = b2 {
        b2.stop();
    }
    drop(cluster);
    Outcome {
        fault,
        lifetimes,
        node,
    }
}

async fn stream_leader(cluster: &NatsCluster) -> Option<usize> {
    let client = async_nats::connect(cluster.server_addrs()).await.ok()?;
    let js = async_nats::jetstream::new(client);
    let mut stream = js.get_stream("KV_WATCH_FAULTS").await.ok()?;
    let info = stream.info().await.ok()?;
    let leader = info.cluster.as_ref()?.leader.clone()?;
    NatsCluster::node_index(&leader)
}

/// Checks one watcher process against the puts: `whole` when it should have seen every key;
/// `ended` when it was killed then (its silence after that is not a stall).
fn check(
    name: &str,
    w: &Watcher,
    puts: &HashMap<String, u64>,
    (whole, ended): (bool, Option<u64>),
    bound: Duration,
) -> Lifetime {
    let lines = w.lines.lock().unwrap();
    let mut seen: BTreeMap<u64, usize> = BTreeMap::new();
    let mut first_at: HashMap<&str, u64> = HashMap::new();
    let mut out_of_order = 0;
    let mut highest = 0;
    for (revision, key, ms) in &lines.revisions {
        *seen.entry(*revision).or_default() += 1;
        if *revision <= highest {
            out_of_order += 1;
        }
        highest = highest.max(*revision);
        first_at.entry(key.as_str()).or_insert(*ms);
    }
    let duplicates = seen.values().filter(|n| **n > 1).count();
    let missing = if whole {
        puts.keys()
            .filter(|k| !first_at.contains_key(k.as_str()))
            .count()
    } else {
        0
    };
    let mut worst = (0, String::new());
    for (key, handled) in &first_at {
        if let Some(put) = puts.get(*key) {
            let delay = handled.saturating_sub((*put).max(w.spawned));
            if delay > worst.0 {
                worst = (delay, (*key).to_owned());
            }
        }
    }
    // Silence with changes waiting: each stretch between two handled changes (or from the
    // process's start, or to the end) while some acknowledged put waited for this watcher.
    let mut handled_times: Vec<u64> = first_at.values().copied().collect();
    handled_times.sort_unstable();
    let end = ended.unwrap_or_else(now_ms);
    let mut running_while_silent = 0;
    let mut previous = w.spawned;
    for until in handled_times.into_iter().chain(std::iter::once(end)) {
        let waiting = puts
            .iter()
            .filter(|(key, put)| {
                **put < until && first_at.get(key.as_str()).is_none_or(|h| *h >= until)
            })
            .map(|(_, put)| *put)
            .min();
        if let Some(since) = waiting {
            let silent_from = since.max(previous) + bound.as_millis() as u64;
            if until > silent_from {
                running_while_silent += running_between(&lines.states, silent_from, until);
            }
        }
        previous = until;
    }
    Lifetime {
        name: name.to_owned(),
        handled: lines.revisions.len(),
        keys_seen: first_at.len(),
        duplicates,
        out_of_order,
        missing,
        worst_delay_ms: worst.0,
        worst_key: worst.1,
        running_while_silent_ms: running_while_silent,
    }
}

/// How long, between `from` and `until`, the last state said was `running`.
fn running_between(states: &[(u64, String)], from: u64, until: u64) -> u64 {
    let mut total = 0;
    for (i, (at, kind)) in states.iter().enumerate() {
        let ends = states.get(i + 1).map_or(u64::MAX, |(next, _)| *next);
        if kind != "running" {
            continue;
        }
        let (start, stop) = ((*at).max(from), ends.min(until));
        if stop > start {
            total += stop - start;
        }
    }
    total
}
