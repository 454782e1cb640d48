//! Failover benchmark: for each fault, how long until consumption resumes, ours beside a raw
//! async-nats `messages()` loop, side by side in one run, on a 3-node cluster whose every
//! route and client connection goes through the test kit's links.
//!
//! ```text
//! cargo run --release --example bench_failover -- [--faults node-kill,partition,stall]
//!     [--reps 5] [--stall-secs 15]
//! ```
//!
//! Faults, each hitting the node that leads every variant's consumer (its stream is led from
//! the majority side: the consumer's recovery is measured, not the stream's), or, `stall`,
//! every variant's client link, at one instant:
//!
//! - **node-kill**: that node is killed with SIGKILL (restarted after the repetition). One
//!   replica per variant, on a surviving node.
//! - **partition**: that node is cut off from the two others (`NatsCluster::isolate`). Two
//!   replicas per variant: one on the majority side, one on the cut-off node (given every
//!   server's URL, the cut-off node first).
//! - **stall**: each variant's only replica has its client link stalled (both ways,
//!   connections open) for `--stall-secs`, then healed.
//!
//! Variants: **ours** is `Runtime` with the defaults a user gets (heartbeat 5 s); **ours hb 1s**
//! the same with `heartbeat(1 s)`; **raw** is `consumer.messages()` (async-nats's defaults:
//! batch 200, expires 30 s, heartbeat 15 s), acking each message, going on past its errors.
//! Every consumer is an R3 durable pull consumer on an R3 file stream of its own, `ack_wait`
//! 5 s; a publisher per variant sends a job every 10 ms (through a majority-side node, each
//! sent again until acknowledged).
//!
//! Measured, per variant and repetition (ms):
//!
//! - node-kill, partition: `leader`, from the fault to the consumer's new leader (its
//!   `LEADER_ELECTED` advisory, seen on the majority side); `resume`, from that leader to the
//!   majority replica handling a message again; partition also `moved`, from the fault to the
//!   cut-off replica moving to another server (ours: `Health::jetstream().moves`), and
//!   `cut-off resumes`, from the fault to it handling a message after that;
//! - stall: `noticed`, from the stall to the replica saying so (ours: its consumer `stalled`;
//!   raw: its stream's first error item, a missed heartbeat); `back`, from the heal to the
//!   replica handling a message again.
//!
//! A value not reached within the repetition's bound is shown as `-`. The tables show every
//! repetition and the median; the last line is one JSON object.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::{self, consumer, stream};
use futures::StreamExt;
use nats_topology::model::{ConsumerDecl, QueueDecl, Storage, StreamDecl, StreamRef};
use nats_topology::{ConsumerState, HandlerError, Health, Runtime, Topology};
use nats_topology_testkit::{Link, NatsCluster};
use tokio::time::Instant;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The node every fault hits.
const HIT: usize = 0;
/// The majority-side node the publishers and the single replicas use.
const SAFE: usize = 1;
const ACK_WAIT: Duration = Duration::from_secs(5);
/// How long a repetition waits for anything it measures.
const BOUND: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    NodeKill,
    Partition,
    Stall,
}

impl Fault {
    fn parse(s: &str) -> Fault {
        match s {
            "node-kill" => Fault::NodeKill,
            "partition" => Fault::Partition,
            "stall" => Fault::Stall,
            other => panic!("unknown fault {other:?}; expected node-kill, partition or stall"),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Fault::NodeKill => "node-kill",
            Fault::Partition => "partition",
            Fault::Stall => "stall",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Variant {
    Ours,
    OursTuned,
    Raw,
}

const VARIANTS: [Variant; 3] = [Variant::Ours, Variant::OursTuned, Variant::Raw];

impl Variant {
    fn name(self) -> &'static str {
        match self {
            Variant::Ours => "ours",
            Variant::OursTuned => "ours hb 1s",
            Variant::Raw => "raw messages()",
        }
    }

    fn tag(self) -> &'static str {
        match self {
            Variant::Ours => "OURS",
            Variant::OursTuned => "TUNED",
            Variant::Raw => "RAW",
        }
    }
}

struct Args {
    faults: Vec<Fault>,
    reps: usize,
    stall: Duration,
}

fn args() -> Args {
    let mut args = Args {
        faults: vec![Fault::NodeKill, Fault::Partition, Fault::Stall],
        reps: 5,
        stall: Duration::from_secs(15),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().unwrap_or_default();
        match flag.as_str() {
            "--faults" => args.faults = value.split(',').map(Fault::parse).collect(),
            "--reps" => args.reps = value.parse().expect("--reps N"),
            "--stall-secs" => {
                args.stall = Duration::from_secs(value.parse().expect("--stall-secs N"))
            }
            other => panic!("unknown flag {other}; expected --faults, --reps, --stall-secs"),
        }
    }
    args
}

/// When each message was handled, by one replica.
#[derive(Clone, Default)]
struct Handled(Arc<Mutex<Vec<Instant>>>);

impl Handled {
    fn record(&self) {
        self.0.lock().unwrap().push(Instant::now());
    }

    fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }

    fn first_after(&self, from: Instant) -> Option<Instant> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .copied()
            .find(|at| *at >= from)
    }
}

/// What tells that a replica noticed a fault: ours, its health; raw, its stream's errors.
#[derive(Clone)]
enum Notice {
    Health(Health),
    Errors(Arc<Mutex<Vec<Instant>>>),
}

impl Notice {
    fn noticed_after(&self, from: Instant) -> bool {
        match self {
            Notice::Health(health) => matches!(
                health.consumers()[0].state,
                ConsumerState::Stalled { .. } | ConsumerState::Retrying { .. }
            ),
            Notice::Errors(errors) => errors.lock().unwrap().iter().any(|at| *at >= from),
        }
    }

    fn moved(&self) -> bool {
        match self {
            Notice::Health(health) => health.jetstream().moves > 0,
            Notice::Errors(_) => false,
        }
    }
}

/// One replica of a variant: what it handled, how it says it noticed, how it stops.
struct Replica {
    handled: Handled,
    notice: Notice,
    stop: Box<dyn FnOnce() -> tokio::task::JoinHandle<()> + Send>,
}

/// A variant's stream (and consumer `workers`), per repetition.
fn names(variant: Variant, fault: Fault, rep: usize) -> (String, String) {
    let stream = format!(
        "FAILOVER_{}_{}_{rep}",
        variant.tag(),
        fault.name().replace('-', "_").to_uppercase()
    );
    let subject = format!(
        "failover.{}.{}.{rep}",
        variant.tag().to_lowercase(),
        fault.name()
    );
    (stream, subject)
}

fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

/// Our replica on `urls` (tried in order).
async fn ours(
    variant: Variant,
    (stream, subject): (&str, &str),
    urls: &[String],
) -> Result<Replica, BoxError> {
    let addrs: Vec<async_nats::ServerAddr> =
        urls.iter().map(|u| u.parse()).collect::<Result<_, _>>()?;
    let client = nats_topology::connect_options()
        .retain_servers_order()
        .connect(addrs)
        .await?;
    let decl = StreamDecl::new(
        leak(stream.to_owned()),
        Box::leak(vec![leak(format!("{subject}.>"))].into_boxed_slice()),
    )
    .replicas(3)
    .storage(Storage::File);
    let consumer = ConsumerDecl::queue(
        leak(format!("bench::{stream}")),
        StreamRef::Named(decl.name),
        QueueDecl::new("workers").ack_wait(ACK_WAIT),
    )
    .subjects(Box::leak(
        vec![leak(format!("{subject}.jobs"))].into_boxed_slice(),
    ))
    .concurrency(4);
    let handled = Handled::default();
    let recorder = handled.clone();
    let topology = Topology::new().stream(decl).consumer(consumer, move |_| {
        recorder.record();
        Box::pin(async { Ok::<(), HandlerError>(()) })
    });
    let mut builder = Runtime::builder(client).topology(topology);
    if variant == Variant::OursTuned {
        builder = builder.heartbeat(Duration::from_secs(1));
    }
    let runtime = builder.build()?;
    let health = runtime.health();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let _ = runtime
            .run_until(async move {
                let _ = stop_rx.await;
            })
            .await;
    });
    health.wait_ready(BOUND).await?;
    Ok(Replica {
        handled,
        notice: Notice::Health(health),
        stop: Box::new(move || {
            let _ = stop_tx.send(());
            task
        }),
    })
}

/// The stream and consumer the raw loops read, created as a user of async-nats would.
async fn raw_topology(
    js: &jetstream::Context,
    stream: &str,
    subject: &str,
) -> Result<(), BoxError> {
    let created = tokio::time::timeout(BOUND, async {
        loop {
            let made = js
                .create_stream(stream::Config {
                    name: stream.to_owned(),
                    subjects: vec![format!("{subject}.>")],
                    num_replicas: 3,
                    storage: stream::StorageType::File,
                    ..Default::default()
                })
                .await;
            let Ok(made) = made else { continue };
            let consumer = made
                .create_consumer(consumer::pull::Config {
                    durable_name: Some("workers".to_owned()),
                    filter_subject: format!("{subject}.jobs"),
                    ack_wait: ACK_WAIT,
                    ..Default::default()
                })
                .await;
            if consumer.is_ok() {
                return;
            }
        }
    })
    .await;
    created.map_err(|_| format!("could not create the raw stream {stream}").into())
}

/// A raw replica: `consumer.messages()`, acking each message, going on past its errors.
async fn raw(stream: &str, urls: &[String]) -> Result<Replica, BoxError> {
    let addrs: Vec<async_nats::ServerAddr> =
        urls.iter().map(|u| u.parse()).collect::<Result<_, _>>()?;
    let client = async_nats::ConnectOptions::new()
        .retain_servers_order()
        .connect(addrs)
        .await?;
    let js = jetstream::new(client);
    let consumer: consumer::PullConsumer =
        js.get_stream(stream).await?.get_consumer("workers").await?;
    let handled = Handled::default();
    let errors: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let (recorder, failures) = (handled.clone(), errors.clone());
    let mut messages = consumer.messages().await?;
    let task = tokio::spawn(async move {
        while let Some(item) = messages.next().await {
            match item {
                Ok(message) => {
                    recorder.record();
                    let _ = message.ack().await;
                }
                Err(_) => failures.lock().unwrap().push(Instant::now()),
            }
        }
    });
    let abort = task.abort_handle();
    Ok(Replica {
        handled,
        notice: Notice::Errors(errors),
        stop: Box::new(move || {
            abort.abort();
            tokio::spawn(async {})
        }),
    })
}

/// Publishes a job every 10 ms to `subject.jobs`, each until acknowledged, until stopped.
fn publisher(js: jetstream::Context, subject: String) -> tokio::task::AbortHandle {
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(Duration::from_millis(10));
        for id in 0u64.. {
            ticker.tick().await;
            let mut headers = async_nats::HeaderMap::new();
            headers.insert("Nats-Msg-Id", format!("job-{id}").as_str());
            loop {
                let sent = js
                    .publish_with_headers(
                        format!("{subject}.jobs"),
                        headers.clone(),
                        format!("{{\"id\":{id}}}").into(),
                    )
                    .await;
                if let Ok(ack) = sent
                    && ack.await.is_ok()
                {
                    break;
                }
            }
        }
    })
    .abort_handle()
}

/// Steps the leader of `stream`'s consumer `workers` (`consumer`) or of `stream` itself down
/// until node `to` leads it.
async fn lead_from(
    js: &jetstream::Context,
    stream: &str,
    consumer: bool,
    to: usize,
) -> Result<(), BoxError> {
    let until = Instant::now() + BOUND;
    while Instant::now() < until {
        let leader = if consumer {
            match js.get_stream_no_info(stream).await {
                Ok(s) => s
                    .consumer_info("workers")
                    .await
                    .ok()
                    .and_then(|i| i.cluster)
                    .and_then(|c| c.leader),
                Err(_) => None,
            }
        } else {
            match js.get_stream(stream).await {
                Ok(mut s) => s
                    .info()
                    .await
                    .ok()
                    .and_then(|i| i.cluster.clone())
                    .and_then(|c| c.leader),
                Err(_) => None,
            }
        };
        if let Some(leader) = leader {
            if NatsCluster::node_index(&leader) == Some(to) {
                return Ok(());
            }
            let body = serde_json::json!({ "placement": { "preferred": format!("node{to}") } });
            let subject = if consumer {
                format!("$JS.API.CONSUMER.LEADER.STEPDOWN.{stream}.workers")
            } else {
                format!("$JS.API.STREAM.LEADER.STEPDOWN.{stream}")
            };
            let _ = js.client().request(subject, body.to_string().into()).await;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Err(format!("node{to} never led {stream} (consumer: {consumer})").into())
}

/// Per stream, each leader its consumer's advisories announced, and when.
type Announced = BTreeMap<String, Vec<(String, Instant)>>;

/// When each consumer's new leader was announced (its `LEADER_ELECTED` advisories).
#[derive(Clone, Default)]
struct Elections(Arc<Mutex<Announced>>);

impl Elections {
    async fn watch(client: &async_nats::Client) -> Result<Elections, BoxError> {
        let mut advisories = client
            .subscribe("$JS.EVENT.ADVISORY.CONSUMER.LEADER_ELECTED.>")
            .await?;
        // A round trip: the server has registered the subscription (a flush only writes).
        let _ = client.request("_BENCH.ROUND_TRIP", "".into()).await;
        let elections = Elections::default();
        let recorded = elections.clone();
        tokio::spawn(async move {
            while let Some(message) = advisories.next().await {
                let advisory: serde_json::Value =
                    serde_json::from_slice(&message.payload).unwrap_or_default();
                let stream = advisory["stream"].as_str().unwrap_or_default().to_owned();
                let leader = advisory["leader"].as_str().unwrap_or_default().to_owned();
                recorded
                    .0
                    .lock()
                    .unwrap()
                    .entry(stream)
                    .or_default()
                    .push((leader, Instant::now()));
            }
        });
        Ok(elections)
    }

    fn new_leader(&self, stream: &str, after: Instant) -> Option<Instant> {
        self.0
            .lock()
            .unwrap()
            .get(stream)?
            .iter()
            .find(|(leader, at)| *at >= after && NatsCluster::node_index(leader) != Some(HIT))
            .map(|(_, at)| *at)
    }
}

/// One repetition's figures: measure name → variant → ms (`None`: not reached).
type Figures = BTreeMap<&'static str, BTreeMap<Variant, Option<f64>>>;

fn ms(from: Instant, to: Option<Instant>) -> Option<f64> {
    to.map(|to| (to.saturating_duration_since(from)).as_secs_f64() * 1000.0)
}

/// Waits (at most [`BOUND`]) until `f` gives a value.
async fn within<T>(mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let until = Instant::now() + BOUND;
    loop {
        if let Some(value) = f() {
            return Some(value);
        }
        if Instant::now() >= until {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn repetition(
    cluster: &mut NatsCluster,
    fault: Fault,
    rep: usize,
    stall: Duration,
) -> Result<Figures, BoxError> {
    let majority = async_nats::connect(cluster.url(SAFE)).await?;
    let js = jetstream::ContextBuilder::new()
        .timeout(Duration::from_secs(2))
        .build(majority.clone());
    let elections = Elections::watch(&majority).await?;
    // Per variant: its replicas (the first on the majority side), its stream, its links.
    let mut replicas: BTreeMap<Variant, Vec<Replica>> = BTreeMap::new();
    let mut links: BTreeMap<Variant, Link> = BTreeMap::new();
    let mut publishers = Vec::new();
    for variant in VARIANTS {
        let (stream, subject) = names(variant, fault, rep);
        // Who connects where: a URL list per replica.
        let mut lists: Vec<Vec<String>> = Vec::new();
        match fault {
            Fault::NodeKill => {
                lists.push(vec![cluster.client_link(SAFE).await?.url()]);
            }
            Fault::Partition => {
                let mut majority_side = Vec::new();
                let mut cut_side = Vec::new();
                for node in [SAFE, 2, HIT] {
                    majority_side.push(cluster.client_link(node).await?.url());
                }
                for node in [HIT, SAFE, 2] {
                    cut_side.push(cluster.client_link(node).await?.url());
                }
                lists.push(majority_side);
                lists.push(cut_side);
            }
            Fault::Stall => {
                let link = cluster.client_link(SAFE).await?;
                lists.push(vec![link.url()]);
                links.insert(variant, link);
            }
        }
        if variant == Variant::Raw {
            raw_topology(&js, &stream, &subject).await?;
        }
        let mut started = Vec::new();
        for urls in &lists {
            started.push(match variant {
                Variant::Raw => raw(&stream, urls).await?,
                _ => ours(variant, (&stream, &subject), urls).await?,
            });
        }
        if fault != Fault::Stall {
            // Only the consumer's leader is hit: its stream is led from the majority side,
            // so that what is measured is the consumer's recovery, not the stream's.
            lead_from(&js, &stream, false, SAFE).await?;
            lead_from(&js, &stream, true, HIT).await?;
        }
        publishers.push(publisher(js.clone(), subject));
        replicas.insert(variant, started);
    }
    // Every replica busy before the fault.
    within(|| {
        replicas
            .values()
            .flatten()
            .all(|r| r.handled.len() >= 10)
            .then_some(())
    })
    .await
    .ok_or("not every replica consumed before the fault")?;

    let at = Instant::now();
    match fault {
        Fault::NodeKill => cluster.kill(HIT),
        Fault::Partition => cluster.isolate(HIT),
        Fault::Stall => {
            for link in links.values() {
                link.stall();
            }
        }
    }
    let mut figures = Figures::new();
    let mut put = |measure: &'static str, variant: Variant, value: Option<f64>| {
        figures.entry(measure).or_default().insert(variant, value);
    };
    match fault {
        Fault::NodeKill | Fault::Partition => {
            for variant in VARIANTS {
                let (stream, _) = names(variant, fault, rep);
                let leader = within(|| elections.new_leader(&stream, at)).await;
                let majority_side = &replicas[&variant][0];
                let resumed = match leader {
                    Some(leader) => within(|| majority_side.handled.first_after(leader)).await,
                    None => None,
                };
                put("leader", variant, ms(at, leader));
                put("resume", variant, leader.and_then(|l| ms(l, resumed)));
            }
            if fault == Fault::Partition {
                // Every variant watched at once: each move is timed when it is first seen.
                let mut moved = BTreeMap::new();
                let until = Instant::now() + BOUND;
                while Instant::now() < until && moved.len() < VARIANTS.len() - 1 {
                    for variant in VARIANTS {
                        if !moved.contains_key(&variant) && replicas[&variant][1].notice.moved() {
                            moved.insert(variant, Instant::now());
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                for variant in VARIANTS {
                    let cut_off = &replicas[&variant][1];
                    let moved = moved.get(&variant).copied();
                    let consumes = match moved {
                        Some(moved) => within(|| cut_off.handled.first_after(moved)).await,
                        None => None,
                    };
                    put("moved", variant, ms(at, moved));
                    put("cut-off resumes", variant, ms(at, consumes));
                }
            }
        }
        Fault::Stall => {
            let mut noticed = BTreeMap::new();
            let until = at + stall;
            while Instant::now() < until {
                for variant in VARIANTS {
                    let replica = &replicas[&variant][0];
                    if !noticed.contains_key(&variant) && replica.notice.noticed_after(at) {
                        noticed.insert(variant, Instant::now());
                    }
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            for link in links.values() {
                link.heal();
            }
            let healed = Instant::now();
            for variant in VARIANTS {
                let replica = &replicas[&variant][0];
                let back = within(|| replica.handled.first_after(healed)).await;
                put("noticed", variant, ms(at, noticed.get(&variant).copied()));
                put("back", variant, ms(healed, back));
            }
        }
    }
    match fault {
        Fault::NodeKill => cluster.restart(HIT).await?,
        Fault::Partition => cluster.heal(),
        Fault::Stall => {}
    }
    for publisher in publishers {
        publisher.abort();
    }
    for replica in replicas.into_values().flatten() {
        let _ = tokio::time::timeout(Duration::from_secs(30), (replica.stop)()).await;
    }
    Ok(figures)
}

fn median(values: &[f64]) -> Option<f64> {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(sorted[n / 2]),
        _ => Some((sorted[n / 2 - 1] + sorted[n / 2]) / 2.0),
    }
}

fn show(value: Option<f64>) -> String {
    value.map_or("-".to_owned(), |v| format!("{v:.0}"))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), BoxError> {
    let args = args();
    let mut report = serde_json::Map::new();
    for &fault in &args.faults {
        let mut cluster = NatsCluster::start_linked().await?;
        if !report.contains_key("server") {
            let client = async_nats::connect(cluster.url(SAFE)).await?;
            report.insert("server".to_owned(), client.server_info().version.into());
        }
        let mut reps: Vec<Figures> = Vec::new();
        for rep in 1..=args.reps {
            let figures = repetition(&mut cluster, fault, rep, args.stall).await?;
            eprintln!("{} rep {rep}: {figures:?}", fault.name());
            reps.push(figures);
        }
        println!("\n## {} ({} repetitions; ms)\n", fault.name(), args.reps);
        let measures: Vec<&'static str> = reps[0].keys().copied().collect();
        println!("| measure | variant | each | median |");
        println!("|---|---|---|---|");
        let mut fault_json = serde_json::Map::new();
        for measure in measures {
            let mut measure_json = serde_json::Map::new();
            for variant in VARIANTS {
                let each: Vec<Option<f64>> = reps
                    .iter()
                    .map(|f| {
                        f.get(measure)
                            .and_then(|m| m.get(&variant))
                            .copied()
                            .flatten()
                    })
                    .collect();
                let reached: Vec<f64> = each.iter().flatten().copied().collect();
                let med = (reached.len() == each.len())
                    .then(|| median(&reached))
                    .flatten();
                println!(
                    "| {measure} | {} | {} | {} |",
                    variant.name(),
                    each.iter().map(|v| show(*v)).collect::<Vec<_>>().join(", "),
                    show(med)
                );
                measure_json.insert(
                    variant.name().to_owned(),
                    serde_json::json!({ "each": each, "median": med }),
                );
            }
            fault_json.insert(measure.to_owned(), measure_json.into());
        }
        report.insert(fault.name().to_owned(), fault_json.into());
    }
    report.insert("stall_s".to_owned(), args.stall.as_secs().into());
    println!("\n{}", serde_json::Value::Object(report));
    Ok(())
}
