//! Key-value watches through node loss, one repetition of each fault on a real 3-node cluster
//! (the repeated loop is `examples/watch_faults`, which shares this harness): two watcher
//! processes at the runtime's default settings, a writer putting 600 distinct keys, and one of
//! node 0 killed for 5 s and for 30 s (watcher A's own node, watcher B's other one), the bucket
//! stream's leader killed, node 0 cut off from its peers for 10 s, watcher B SIGKILLed and
//! started again. For every watcher process: every key seen, no revision handled twice,
//! revisions strictly increasing, every key handled within [`HANDLED_WITHIN`] of its put (or of
//! the process's start), and health never `running` while the watch was silent for longer than
//! its liveness bound with changes waiting (`Fault::silence_bound`: two heartbeats and a second
//! after a node loss; on the cut-off side of a partition, `move_after` and a second).
//!
//! The parent re-runs this test binary as the watcher processes (`watcher_process` in child
//! mode) and kills them by pid.

#[path = "../examples/watch_faults/harness.rs"]
mod harness;

use std::time::Duration;

use harness::{CHILD_ENV, Fault};

/// The worst delay from a put to a watcher's handler this test accepts: a lost delivery or a
/// lost consumer is noticed within two heartbeats (5 s each at the defaults) and the watch's
/// consumer is created again from its resume point; the rest is the cluster electing leaders
/// and the machine being shared.
const HANDLED_WITHIN: Duration = Duration::from_secs(20);

/// In the child process: a watcher until it is stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watcher_process() {
    let Ok(urls) = std::env::var(CHILD_ENV) else {
        return; // Run as a test on its own, it is only the child of the test below.
    };
    harness::watcher(&urls).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_watcher_sees_every_key_once_in_order_and_soon_through_each_fault() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let exe = std::env::current_exe().expect("this test binary");
    let command = move || {
        let mut command = std::process::Command::new(&exe);
        command.args([
            "--exact",
            "watcher_process",
            "--nocapture",
            "--test-threads=1",
        ]);
        command
    };
    let mut problems = Vec::new();
    for fault in Fault::ALL {
        let outcome = harness::repetition(fault, &command).await;
        eprintln!("{}", outcome.summary());
        for failure in outcome.failures() {
            problems.push(format!("{}: {failure}", fault.name()));
        }
        for lifetime in &outcome.lifetimes {
            if lifetime.worst_delay_ms > HANDLED_WITHIN.as_millis() as u64 {
                problems.push(format!(
                    "{}: {} handled {} {} ms after its put (at most {HANDLED_WITHIN:?})",
                    fault.name(),
                    lifetime.name,
                    lifetime.worst_key,
                    lifetime.worst_delay_ms
                ));
            }
            if lifetime.running_while_silent_ms > 0 {
                problems.push(format!(
                    "{}: {} said `running` for {} ms while silent for over {:?} with changes \
                     waiting",
                    fault.name(),
                    lifetime.name,
                    lifetime.running_while_silent_ms,
                    fault.silence_bound()
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}
