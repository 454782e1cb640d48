//! The `sync_status` example in a real browser: headless Chromium (Debian's `chromium`)
//! driven over the DevTools protocol (chromiumoxide), two replica processes, a 3-node cluster.
//!
//! The replicas are this test binary itself, re-invoked to run only this test with
//! `SYNC_STATUS_REPLICA` set: it then runs the example's replica code (the same modules as
//! `cargo run --example sync_status`, included below) until its stdin closes. So a plain
//! `cargo test` on a fresh clone needs nothing built beforehand.
//!
//! Why chromiumoxide (0.9, over the DevTools protocol) rather than WebDriver: it is tokio-native
//! and needs nothing beside the browser (no `chromium-driver` process to start, stop and keep
//! at the browser's version), and without its `fetcher` feature it downloads nothing.
//!
//! Every assertion is on what the pages show (DOM text) or what the server holds. Screenshots
//! of both pages are saved under `target/tmp/browser/`.

#[allow(dead_code)]
#[path = "../examples/sync_status/daemon.rs"]
mod daemon;
#[allow(dead_code)]
#[path = "../examples/sync_status/launch.rs"]
mod launch;
#[allow(dead_code)]
#[path = "../examples/sync_status/replica.rs"]
mod replica;
#[allow(dead_code)]
#[path = "../examples/sync_status/server.rs"]
mod server;
#[allow(dead_code)]
#[path = "../../examples/sync_status/topology.rs"]
mod topology;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use chromiumoxide::page::ScreenshotParams;
use chromiumoxide::{Browser, BrowserConfig, Page};
use daemon::Daemon;
use futures::StreamExt;
use launch::Process;
use nats_topology::async_nats::jetstream;
use nats_topology_testkit::{NatsCluster, eventually};
use serde::Deserialize;

/// This test's name: a replica process runs only it (`--exact`).
const TEST: &str = "browser_sync_status_reaches_every_page_and_survives_a_killed_worker";

/// Members watched on the page of replica `a` and of replica `b`, 20 in all.
fn members(page: usize) -> Vec<String> {
    (1..=10).map(|i| format!("m{:02}", page * 10 + i)).collect()
}

/// The replicas' names, in the order they are started (and their pages opened).
const NAMES: [&str; 2] = ["a", "b"];

/// The member both pages refresh through the service.
const REFRESHED: &str = "m01";

/// The member both pages watch for the kill.
const KILLED_MID_SYNC: &str = "m21";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn browser_sync_status_reaches_every_page_and_survives_a_killed_worker() {
    if std::env::var_os(replica::REPLICA_ENV).is_some() {
        // A replica process of the test below.
        replica::run_from_env()
            .await
            .expect("the replica runs, then drains cleanly");
        return;
    }
    let chromium = chromium_binary();
    let started = std::time::Instant::now();
    let step = |what: &str| {
        println!(
            "browser: {:>5.1} s  {what}",
            started.elapsed().as_secs_f64()
        )
    };
    let cluster = NatsCluster::start().await.expect("a 3-node cluster starts");
    let servers = cluster.urls().join(",");
    let client = nats_topology::connect(&servers)
        .await
        .expect("connect to the cluster");
    let daemon = Daemon::start(client.clone(), Duration::from_millis(100))
        .await
        .expect("the daemon simulator subscribes");

    let replica = |name: &'static str| {
        let mut command =
            tokio::process::Command::new(std::env::current_exe().expect("the test binary's path"));
        command.args(["--exact", TEST, "--nocapture", "--test-threads=1"]);
        Process::replica(command, name, &servers)
    };
    let (a, b) = tokio::join!(replica(NAMES[0]), replica(NAMES[1]));
    let mut replicas = [a.expect("replica a starts"), b.expect("replica b starts")];
    let origins: Vec<String> = replicas.iter().map(|r| r.origin().to_owned()).collect();
    for replica in &mut replicas {
        replica.set_peers(&origins).await.expect("peers sent");
    }

    step("cluster, daemon and both replicas ready");
    let chrome = Chrome::launch(&chromium).await;
    step("chromium started");
    let pages = [
        chrome.open(replicas[0].url()).await,
        chrome.open(replicas[1].url()).await,
    ];
    for (i, page) in pages.iter().enumerate() {
        let name = NAMES[i];
        wait_page(
            page,
            &format!("page {i} connected to replica {name}"),
            |v| {
                v.connection
                    .starts_with(&format!("connected to replica {name} "))
            },
        )
        .await;
    }

    step("both pages connected");
    // Two pages, 20 members between them; a sync asked for each, from its page.
    for (i, page) in pages.iter().enumerate() {
        for member in members(i) {
            watch(page, &member).await;
        }
    }
    for (i, page) in pages.iter().enumerate() {
        for member in members(i) {
            click(page, &format!("#row-{member} .sync")).await;
        }
    }
    step("20 members watched, 20 syncs asked for");
    let mut shown = Vec::new();
    for (i, page) in pages.iter().enumerate() {
        let view = wait_page(page, &format!("every member done on page {i}"), |v| {
            v.rows.len() == 10 && v.rows.iter().all(|r| r.state == "done")
        })
        .await;
        assert_eq!(
            view.rows
                .iter()
                .map(|r| r.member.clone())
                .collect::<Vec<_>>(),
            members(i),
            "page {i} shows the members it watches, in order"
        );
        for row in &view.rows {
            assert!(
                row.worker().is_some() && !row.at.is_empty(),
                "page {i}: {row:?} shows which replica did the work, and when"
            );
        }
        shown.push(view);
    }
    let workers: BTreeSet<&str> = shown
        .iter()
        .flat_map(|v| v.rows.iter().filter_map(Row::worker))
        .collect();
    assert_eq!(
        workers,
        BTreeSet::from(["a", "b"]),
        "both replicas did some of the work"
    );
    let crossed: Vec<&Row> = shown
        .iter()
        .zip(NAMES)
        .flat_map(|(v, here)| v.rows.iter().filter(move |r| r.worker() != Some(here)))
        .collect();
    assert!(
        !crossed.is_empty(),
        "at least one status computed on one replica is shown by a page of the other"
    );
    println!(
        "browser: 20 members done; {} statuses crossed replicas",
        crossed.len()
    );
    // Refresh asks the service (`members.status.get`): whichever replica the queue group picks
    // reads the member's last status from the stream. Both pages get the same status, the one
    // the relay showed them.
    watch(&pages[1], REFRESHED).await;
    wait_page(&pages[1], "page 1 to show m01 done", |v| {
        v.row(REFRESHED).is_some_and(|r| r.state == "done")
    })
    .await;
    let mut answers = Vec::new();
    for (i, page) in pages.iter().enumerate() {
        click(page, &format!("#row-{REFRESHED} .refresh")).await;
        let view = wait_page(page, &format!("page {i} to show m01 refreshed"), |v| {
            v.row(REFRESHED).is_some_and(|r| r.refreshed.is_some())
        })
        .await;
        let row = view.row(REFRESHED).expect("m01 is shown");
        let answer = row.refreshed.clone().expect("refreshed");
        assert_eq!(answer.state, "done", "page {i}: {answer:?}");
        assert!(
            NAMES.contains(&answer.by.as_str()),
            "page {i}: a replica answered: {answer:?}"
        );
        assert!(
            row.by.ends_with(&answer.computed_by()),
            "page {i}: the refreshed status names the replica the relayed one does: {row:?}"
        );
        answers.push(answer);
    }
    assert_eq!(
        (answers[0].rows, answers[0].at, answers[0].computed_by()),
        (answers[1].rows, answers[1].at, answers[1].computed_by()),
        "both pages got the same status from the service: {answers:?}"
    );
    println!(
        "browser: m01 refreshed on both pages, answered by replicas {} and {}",
        answers[0].by, answers[1].by
    );
    for (i, page) in pages.iter().enumerate() {
        screenshot(page, &format!("sync-status-{}-all-done.png", NAMES[i])).await;
    }

    // Kill the replica doing a sync (SIGKILL, mid-work): the survivor finishes it and both
    // pages (the dead replica's one reconnects to the survivor) show "done".
    for page in &pages {
        watch(page, KILLED_MID_SYNC).await;
    }
    click(&pages[0], &format!("#row-{KILLED_MID_SYNC} .sync")).await;
    let worker = eventually(
        Duration::from_secs(20),
        "a page to show which replica is syncing m21",
        || async {
            for page in &pages {
                let view = read_page(page).await;
                if let Some(row) = view.row(KILLED_MID_SYNC)
                    && row.state == "syncing"
                    && let Some(worker) = row.worker()
                {
                    return Some(worker.to_owned());
                }
            }
            None
        },
    )
    .await;
    step(&format!("replica {worker} is syncing m21: SIGKILL"));
    let killed = usize::from(worker == NAMES[1]);
    let survivor = 1 - killed;
    let survivor_name = NAMES[survivor].to_owned();
    replicas[killed]
        .kill()
        .await
        .expect("SIGKILL the replica doing the work");
    for (i, page) in pages.iter().enumerate() {
        let view = wait_page(
            page,
            &format!("page {i} to show m21 done by the survivor, replica {survivor_name}"),
            |v| {
                v.row(KILLED_MID_SYNC)
                    .is_some_and(|r| r.state == "done" && r.worker() == Some(&survivor_name))
                    && v.connection
                        .starts_with(&format!("connected to replica {survivor_name} "))
            },
        )
        .await;
        assert!(
            view.rows.iter().all(|r| r.state == "done"),
            "page {i} still shows every member done: {:?}",
            view.rows
        );
        screenshot(page, &format!("sync-status-{}-after-kill.png", NAMES[i])).await;
    }

    step("both pages show m21 done by the survivor");

    // The page that moved to the survivor works as before: a sync it asks for is done there.
    let moved = &pages[killed];
    let member = members(killed)[0].clone();
    let before = read_page(moved).await;
    let before = before.row(&member).expect("the member is still shown");
    click(moved, &format!("#row-{member} .sync")).await;
    wait_page(
        moved,
        &format!("{member} synced again, by replica {survivor_name}"),
        |v| {
            v.row(&member).is_some_and(|r| {
                r.state == "done" && r.worker() == Some(&survivor_name) && r.at != before.at
            })
        },
    )
    .await;
    step("the moved page synced a member again");
    // What the server holds: the last status of m21 is the survivor's "done", and the work
    // consumer has nothing pending or unacknowledged.
    let js = jetstream::new(client);
    let last = js
        .get_stream("MEMBER_STATUS")
        .await
        .expect("the status stream exists")
        .get_last_raw_message_by_subject(&topology::status_subject(KILLED_MID_SYNC))
        .await
        .expect("m21 has a status");
    let last: topology::Status = serde_json::from_slice(&last.payload).expect("a status");
    assert_eq!(last.state, topology::Phase::Done);
    assert_eq!(last.replica.as_deref(), Some(survivor_name.as_str()));
    eventually(Duration::from_secs(10), "the sync work settled", || async {
        let mut consumer = js
            .get_consumer_from_stream::<jetstream::consumer::pull::Config, _, _>(
                "sync",
                "DAEMON_SYNC",
            )
            .await
            .ok()?;
        let info = consumer.info().await.ok()?;
        (info.num_pending == 0 && info.num_ack_pending == 0).then_some(())
    })
    .await;

    chrome.close().await;
    let [a, b] = replicas;
    let (survivor, killed) = if survivor == 0 { (a, b) } else { (b, a) };
    drop(killed);
    let status = survivor
        .stop(Duration::from_secs(20))
        .await
        .expect("the survivor drains within 20 s");
    assert!(status.success(), "the survivor exits cleanly: {status}");
    daemon.stop().await;
}

/// The Chromium binary: `CHROMIUM_BIN`, else `chromium` or `chromium-browser` on `PATH`.
/// Missing, the test fails (it is never skipped).
fn chromium_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("CHROMIUM_BIN") {
        return PathBuf::from(path);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        for name in ["chromium", "chromium-browser"] {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return candidate;
            }
        }
    }
    panic!(
        "the browser tests need headless Chromium and found none on PATH: install it \
         (`apt-get install chromium`, as .ci/run does) or set CHROMIUM_BIN to its path"
    );
}

/// A headless Chromium of this test's own, killed when dropped.
struct Chrome {
    browser: Browser,
    events: tokio::task::JoinHandle<()>,
    profile: PathBuf,
}

impl Chrome {
    async fn launch(binary: &Path) -> Chrome {
        let profile = output_dir().join(format!("profile-{}", std::process::id()));
        let config = BrowserConfig::builder()
            .chrome_executable(binary)
            // As root (CI), Chromium refuses to start with its sandbox.
            .no_sandbox()
            .new_headless_mode()
            .user_data_dir(&profile)
            .window_size(900, 1000)
            .viewport(None)
            .launch_timeout(Duration::from_secs(60))
            .build()
            .expect("a browser configuration");
        let (browser, mut handler) = Browser::launch(config)
            .await
            .unwrap_or_else(|e| panic!("Chromium ({}) starts: {e}", binary.display()));
        // The DevTools connection makes progress only while its handler is polled.
        let events = tokio::spawn(async move { while handler.next().await.is_some() {} });
        Chrome {
            browser,
            events,
            profile,
        }
    }

    async fn open(&self, url: &str) -> Page {
        let page = self
            .browser
            .new_page(url)
            .await
            .unwrap_or_else(|e| panic!("open {url}: {e}"));
        page.wait_for_navigation()
            .await
            .unwrap_or_else(|e| panic!("load {url}: {e}"));
        page
    }

    /// Closes the browser and waits for its process; kills it if it does not exit.
    async fn close(mut self) {
        let closed = tokio::time::timeout(Duration::from_secs(10), async {
            self.browser.close().await.ok()?;
            self.browser.wait().await.ok()
        })
        .await;
        if !matches!(closed, Ok(Some(_))) {
            let _ = self.browser.kill().await;
        }
        self.events.abort();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

/// Where screenshots (and the browser's profile) go: under `target/`.
fn output_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("browser");
    std::fs::create_dir_all(&dir).expect("create target/tmp/browser");
    dir
}

async fn screenshot(page: &Page, name: &str) {
    let path = output_dir().join(name);
    page.save_screenshot(ScreenshotParams::builder().full_page(true).build(), &path)
        .await
        .unwrap_or_else(|e| panic!("screenshot {}: {e}", path.display()));
    println!("browser: screenshot {}", path.display());
}

/// Types `member` into the page's member field and presses Watch, as a person would.
async fn watch(page: &Page, member: &str) {
    front(page).await;
    let input = page.find_element("#member").await.expect("a member field");
    input.click().await.expect("focus the member field");
    input.type_str(member).await.expect("type a member");
    click(page, "#watch").await;
}

async fn click(page: &Page, selector: &str) {
    front(page).await;
    page.find_element(selector)
        .await
        .unwrap_or_else(|e| panic!("{selector} on the page: {e}"))
        .click()
        .await
        .unwrap_or_else(|e| panic!("click {selector}: {e}"));
}

/// Makes `page` the active tab: the browser handles input events in the active tab only.
async fn front(page: &Page) {
    page.bring_to_front()
        .await
        .expect("bring the page to front");
}

/// What a page shows.
#[derive(Debug, Deserialize)]
struct View {
    connection: String,
    rows: Vec<Row>,
}

/// One member's line on a page.
#[derive(Debug, Deserialize)]
struct Row {
    member: String,
    state: String,
    /// "replica a", a note, or nothing.
    by: String,
    at: String,
    /// What the last Refresh answered, if any.
    refreshed: Option<Refreshed>,
}

/// A Refresh's answer as the page shows it.
#[derive(Debug, Clone, Deserialize)]
struct Refreshed {
    state: String,
    rows: u64,
    at: u64,
    /// The replica that answered the request.
    by: String,
    text: String,
}

impl Refreshed {
    /// The replica the answered status says computed it (from the text the page shows).
    fn computed_by(&self) -> String {
        self.text
            .split("computed by replica ")
            .nth(1)
            .and_then(|rest| rest.split(',').next())
            .unwrap_or_default()
            .to_owned()
    }
}

impl Row {
    /// The replica the page says did the work.
    fn worker(&self) -> Option<&str> {
        self.by.strip_prefix("replica ")
    }
}

impl View {
    fn row(&self, member: &str) -> Option<&Row> {
        self.rows.iter().find(|r| r.member == member)
    }
}

const READ_PAGE: &str = r##"JSON.stringify({
    connection: document.getElementById("connection").textContent,
    rows: Array.from(document.querySelectorAll("#members li")).map((li) => ({
        member: li.querySelector(".name").textContent,
        state: li.querySelector(".state").textContent,
        by: li.querySelector(".by").textContent,
        at: li.querySelector(".at").textContent,
        refreshed: (() => {
            const el = li.querySelector(".refreshed");
            if (!el || !el.dataset.state) return null;
            return {
                state: el.dataset.state,
                rows: Number(el.dataset.rows),
                at: Number(el.dataset.at),
                by: el.dataset.by,
                text: el.textContent,
            };
        })(),
    })),
})"##;

async fn read_page(page: &Page) -> View {
    let json: String = page
        .evaluate(READ_PAGE)
        .await
        .expect("read the page")
        .into_value()
        .expect("the page's text as JSON");
    serde_json::from_str(&json).expect("the page's text")
}

/// Reads the page until `done` holds (for at most 45 s, through the kit's `eventually`);
/// panics with what it showed last.
async fn wait_page(page: &Page, what: &str, done: impl Fn(&View) -> bool) -> View {
    const WAIT: Duration = Duration::from_secs(45);
    let last = std::sync::Mutex::new(None);
    let read = eventually(WAIT * 2, what, || async {
        let view = read_page(page).await;
        if done(&view) {
            return Some(view);
        }
        *last.lock().unwrap() = Some(view);
        None
    });
    match tokio::time::timeout(WAIT, read).await {
        Ok(view) => view,
        Err(_) => panic!(
            "timed out after {WAIT:?} waiting for {what}; the page shows {:#?}",
            last.lock().unwrap()
        ),
    }
}
