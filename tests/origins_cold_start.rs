//! Eight replicas provisioning placed, mirrored and sourced streams on a fresh supercluster at
//! the same instant (issue 26): every one is ready, none retries past a first timeout, the
//! mirror and the aggregate then follow their origins, and a relay on the aggregate run by a
//! runtime in each cluster receives every message once.
//!
//! The test starts clusters A (three nodes) and B (one), joined by gateways, and re-runs itself
//! as separate processes (in child mode, told by an environment variable) connected to A, all
//! released at one instant.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_nats::jetstream;
use nats_topology::model::{
    BroadcastDecl, ConsumerDecl, DeliverPolicy, Origin, Placement, StreamDecl, StreamRef,
};
use nats_topology::{HandlerError, Runtime, Topology};
use nats_topology_testkit::{NatsSupercluster, eventually};

/// Set in child processes: `<url>,<url>,...|<start at, ms since the epoch>`.
const CHILD_ENV: &str = "NATS_TOPOLOGY_ORIGINS_COLD_START_CHILD";
const RESULT: &str = "ORIGINS_COLD_START_RESULT";
const PROCESSES: usize = 8;

/// In cluster B, by its servers' tag.
static ORIGIN: StreamDecl =
    StreamDecl::new("CS_ORIGIN", &["cs.origin.>"]).placement(Placement::tagged(&["cluster:b"]));
/// In cluster A, three replicas.
static LOCAL: StreamDecl = StreamDecl::new("CS_LOCAL", &["cs.local.>"])
    .replicas(3)
    .placement(Placement::cluster("A"));
/// A copy of B's stream in A.
static MIRROR: StreamDecl = StreamDecl::mirror_of("CS_MIRROR", Origin::of(&ORIGIN))
    .replicas(3)
    .placement(Placement::cluster("A"));
/// Both together, in A.
static SOURCED: StreamDecl = StreamDecl::new("CS_SOURCED", &[])
    .sources(&[Origin::of(&ORIGIN), Origin::of(&LOCAL)])
    .replicas(3)
    .placement(Placement::cluster("A"));

fn topology() -> Topology {
    Topology::new()
        .stream(ORIGIN)
        .stream(LOCAL)
        .stream(MIRROR)
        .stream(SOURCED)
}

/// The subjects each relay received, every copy.
type Received = Arc<Mutex<Vec<String>>>;

/// [`topology`] with a relay on the aggregate (both of its origins' subjects, from the start)
/// recording what it receives.
fn relaying(received: Received) -> Topology {
    static SUBJECTS: [&str; 2] = ["cs.origin.>", "cs.local.>"];
    let relay = ConsumerDecl::broadcast(
        "tests::on_aggregate",
        StreamRef::Declared(&SOURCED),
        BroadcastDecl::new().deliver(DeliverPolicy::All),
    )
    .subjects(&SUBJECTS);
    topology().consumer(relay, move |incoming| {
        received
            .lock()
            .unwrap()
            .push(incoming.context().subject().to_string());
        Box::pin(async { Ok::<(), HandlerError>(()) })
    })
}

fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis()
}

/// In a child process: provision at the instant given in `spec` and print the outcome.
async fn provision_origins(spec: &str) {
    let mut parts = spec.split('|');
    let urls: Vec<async_nats::ServerAddr> = parts
        .next()
        .unwrap()
        .split(',')
        .map(|u| u.parse().unwrap())
        .collect();
    let start_at: u128 = parts.next().unwrap().parse().unwrap();
    let client = async_nats::connect(urls).await.expect("connect");
    let runtime = Runtime::builder(client)
        .topology(topology())
        .build()
        .unwrap();
    let wait = start_at.saturating_sub(now_ms());
    tokio::time::sleep(Duration::from_millis(wait as u64)).await; // the common start instant
    let started = std::time::Instant::now();
    let outcome = runtime.provision().await;
    let ms = started.elapsed().as_millis();
    match &outcome {
        Ok(report) => println!(
            "{RESULT} ok {ms} attempts={} timed_out={}",
            report.attempts, report.timed_out
        ),
        Err(e) => println!("{RESULT} err {ms} {} {e}", e.attempts()),
    }
    outcome.expect("provisioning succeeds");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_processes_cold_start_placed_mirrored_and_sourced_streams() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        provision_origins(&spec).await;
        return;
    }
    let sc = NatsSupercluster::start(&[3, 1])
        .await
        .expect("supercluster");
    let urls: Vec<String> = sc.nodes_of(0).into_iter().map(|i| sc.url(i)).collect();
    let urls = urls.join(",");
    let exe = std::env::current_exe().unwrap();
    let start_at = now_ms() + 1_500;
    let children: Vec<_> = (0..PROCESSES)
        .map(|_| {
            Command::new(&exe)
                .args([
                    "--exact",
                    "eight_processes_cold_start_placed_mirrored_and_sourced_streams",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CHILD_ENV, format!("{urls}|{start_at}"))
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawn a child process")
        })
        .collect();
    let results: Vec<String> = tokio::task::spawn_blocking(move || {
        children
            .into_iter()
            .map(|mut child| {
                let stdout = child.stdout.take().unwrap();
                // Read to the end, so the child never writes into a closed pipe.
                let lines: Vec<String> = BufReader::new(stdout)
                    .lines()
                    .map_while(Result::ok)
                    .collect();
                let status = child.wait().expect("wait for a child");
                // libtest prints "test <name> ... " before the test's own output.
                let line = lines
                    .iter()
                    .find_map(|l| l.find(RESULT).map(|at| l[at..].to_owned()))
                    .unwrap_or_else(|| format!("{RESULT} no result"));
                format!("{line} ({status})")
            })
            .collect()
    })
    .await
    .unwrap();
    eprintln!("{results:?}");
    let ok = results
        .iter()
        .filter(|l| l.contains(" ok ") && l.ends_with("(exit status: 0)"))
        .count();
    assert_eq!(ok, PROCESSES, "every process provisions: {results:#?}");
    // No process waited out more than one request timeout.
    let retried: Vec<&String> = results
        .iter()
        .filter(|l| !l.contains("timed_out=0") && !l.contains("timed_out=1 "))
        .collect();
    assert!(
        retried.is_empty(),
        "no retry past a first timeout: {retried:#?}"
    );

    // Where each lives, and the mirror and the aggregate follow their origins.
    let client = async_nats::connect(sc.server_addrs(0))
        .await
        .expect("connect to A");
    let js = jetstream::new(client);
    for (name, cluster) in [
        ("CS_ORIGIN", "B"),
        ("CS_LOCAL", "A"),
        ("CS_MIRROR", "A"),
        ("CS_SOURCED", "A"),
    ] {
        let mut stream = js.get_stream(name).await.expect("the stream exists");
        let info = stream.info().await.expect("its info");
        let lives = info.cluster.as_ref().and_then(|c| c.name.clone());
        assert_eq!(lives.as_deref(), Some(cluster), "stream {name}");
    }
    for i in 0..10 {
        js.publish(format!("cs.origin.{i}"), "o".into())
            .await
            .unwrap()
            .await
            .expect("stored in B");
    }
    for i in 0..5 {
        js.publish(format!("cs.local.{i}"), "l".into())
            .await
            .unwrap()
            .await
            .expect("stored in A");
    }
    // A relay on the aggregate in each cluster: a runtime connected to A, another to B.
    let mut relays = Vec::new();
    for cluster in [0, 1] {
        let received = Received::default();
        let client = async_nats::connect(sc.server_addrs(cluster))
            .await
            .expect("connect");
        let runtime = Runtime::builder(client)
            .topology(relaying(received.clone()))
            .build()
            .expect("a valid topology");
        let health = runtime.health();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let running = tokio::spawn(runtime.run_until(async move {
            let _ = stopped.await;
        }));
        relays.push((received, health, stop, running));
    }
    for (name, expected) in [("CS_MIRROR", 10), ("CS_SOURCED", 15)] {
        eventually(Duration::from_secs(30), name, || {
            let js = js.clone();
            async move {
                let mut stream = js.get_stream(name).await.ok()?;
                let held = stream.info().await.ok()?.state.messages;
                (held == expected).then_some(())
            }
        })
        .await;
    }
    let every: BTreeSet<String> = (0..10)
        .map(|i| format!("cs.origin.{i}"))
        .chain((0..5).map(|i| format!("cs.local.{i}")))
        .collect();
    for (cluster, (received, health, stop, running)) in relays.into_iter().enumerate() {
        eventually(
            Duration::from_secs(30),
            "the relay to receive all 15",
            || {
                let n = received.lock().unwrap().len();
                async move { (n >= 15).then_some(()) }
            },
        )
        .await;
        let _ = stop.send(());
        running
            .await
            .expect("the runtime task")
            .expect("a clean drain");
        let received = received.lock().unwrap().clone();
        let distinct: BTreeSet<String> = received.iter().cloned().collect();
        assert_eq!(distinct, every, "cluster {cluster}'s relay");
        assert_eq!(
            received.len(),
            15,
            "each once in cluster {cluster}: {received:?}"
        );
        assert_eq!(health.consumers()[0].handled, 15, "cluster {cluster}");
    }
}
