//! Key-value watches through node loss, repeated: `cargo run --release --example watch_faults
//! -- --reps 20 [--faults own5,own30,leader,partition,partition30,sigkill]`. Each repetition starts a fresh
//! 3-node cluster, two watcher processes (this program, re-run in watcher mode) and a writer,
//! and stages one fault (see `harness.rs`). Prints one line per repetition, then per fault the
//! worst delay from a put to a watcher's handler, and the failures; exits 1 on any failure (a
//! key never seen, a revision handled twice or out of order).

mod harness;

use harness::{CHILD_ENV, Fault, Outcome};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if let Ok(urls) = std::env::var(CHILD_ENV) {
        harness::watcher(&urls).await;
        return;
    }
    let mut reps = 1usize;
    let mut faults: Vec<Fault> = Fault::ALL.to_vec();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--reps" => {
                reps = args
                    .next()
                    .and_then(|n| n.parse().ok())
                    .expect("--reps takes a number");
            }
            "--faults" => {
                let list = args.next().expect("--faults takes a comma-separated list");
                faults = list
                    .split(',')
                    .map(|name| {
                        Fault::ALL
                            .into_iter()
                            .chain([Fault::Partition30])
                            .find(|f| f.name() == name).unwrap_or_else(|| {
                            panic!("unknown fault `{name}`: own5, own30, leader, partition, partition30 or sigkill")
                        })
                    })
                    .collect();
            }
            "--help" | "-h" => {
                println!(
                    "watch_faults [--reps N] [--faults own5,own30,leader,partition,partition30,sigkill]"
                );
                return;
            }
            other => panic!("unknown argument `{other}` (see --help)"),
        }
    }
    let exe = std::env::current_exe().expect("this program's path");
    let command = move || std::process::Command::new(&exe);
    let mut outcomes: Vec<Outcome> = Vec::new();
    for rep in 1..=reps {
        for &fault in &faults {
            let outcome = harness::repetition(fault, &command).await;
            println!("rep {rep:>2} {}", outcome.summary());
            for failure in outcome.failures() {
                println!("  FAILED: {failure}");
            }
            outcomes.push(outcome);
        }
    }
    println!();
    println!(
        "fault      reps  worst put->handler (ms) per watcher, over all repetitions    failures"
    );
    let mut failed = false;
    for &fault in &faults {
        let of: Vec<&Outcome> = outcomes.iter().filter(|o| o.fault == fault).collect();
        let mut worst: std::collections::BTreeMap<String, u64> = Default::default();
        let mut running_silent: u64 = 0;
        let mut failures = 0;
        for outcome in &of {
            for l in &outcome.lifetimes {
                let w = worst.entry(l.name.clone()).or_default();
                *w = (*w).max(l.worst_delay_ms);
                running_silent = running_silent.max(l.running_while_silent_ms);
            }
            failures += outcome.failures().len();
        }
        failed |= failures > 0;
        let worst: Vec<String> = worst.iter().map(|(n, ms)| format!("{n} {ms}")).collect();
        println!(
            "{:<10} {:>4}  {:<58} {failures} (longest running while silent: {running_silent} ms)",
            fault.name(),
            of.len(),
            worst.join(", ")
        );
    }
    if failed {
        std::process::exit(1);
    }
}
