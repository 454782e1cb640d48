//! What the children reported, per cell and repetition: the JSON line and the tables.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};

use crate::leader_kill::Election;
use crate::{Args, MIN_ATTEMPTS, Mode, Variant};

/// What one child reported.
#[derive(Debug, Clone)]
pub(crate) struct Outcome {
    pub(crate) ok: bool,
    pub(crate) ms: f64,
    pub(crate) attempts: u32,
    pub(crate) error: Option<String>,
}

impl Outcome {
    pub(crate) fn failed(error: String) -> Outcome {
        Outcome {
            ok: false,
            ms: f64::NAN,
            attempts: 0,
            error: Some(error),
        }
    }

    pub(crate) fn parse(line: &str) -> Outcome {
        match serde_json::from_str::<Value>(line) {
            Ok(v) => Outcome {
                ok: v["ok"].as_bool().unwrap_or(false),
                ms: v["ms"].as_f64().unwrap_or(f64::NAN),
                attempts: v["attempts"].as_u64().unwrap_or(0) as u32,
                error: v["error"].as_str().map(str::to_owned),
            },
            Err(_) => Outcome::failed(format!("unexpected output: {line}")),
        }
    }
}

/// One repetition of one cell.
pub(crate) struct Run {
    pub(crate) mode: Mode,
    pub(crate) variant: Variant,
    pub(crate) retry: bool,
    pub(crate) n: usize,
    pub(crate) rep: usize,
    pub(crate) outcomes: Vec<Outcome>,
    /// Leader-kill: the node killed and the new meta leader's election.
    pub(crate) killed: Option<usize>,
    pub(crate) election: Option<Election>,
}

impl Run {
    pub(crate) fn ok(&self) -> usize {
        self.outcomes.iter().filter(|o| o.ok).count()
    }

    pub(crate) fn ok_times(&self) -> Vec<f64> {
        self.outcomes
            .iter()
            .filter(|o| o.ok)
            .map(|o| o.ms)
            .collect()
    }

    pub(crate) fn median_ms(&self) -> Option<f64> {
        median(self.ok_times())
    }

    pub(crate) fn max_ms(&self) -> Option<f64> {
        self.ok_times().into_iter().reduce(f64::max)
    }

    pub(crate) fn attempts_median(&self) -> Option<f64> {
        median(
            self.outcomes
                .iter()
                .map(|o| f64::from(o.attempts))
                .collect(),
        )
    }

    /// Leader-kill: each successful process's time to ready after the new leader's election.
    pub(crate) fn after_leader(&self) -> Vec<f64> {
        match self.election {
            Some(election) => self.ok_times().iter().map(|ms| ms - election.at).collect(),
            None => Vec::new(),
        }
    }

    pub(crate) fn attempts_total(&self) -> u32 {
        self.outcomes.iter().map(|o| o.attempts).sum()
    }

    /// Processes that retried something (more than one attempt per stream and consumer).
    pub(crate) fn retried(&self) -> usize {
        self.outcomes
            .iter()
            .filter(|o| o.attempts > MIN_ATTEMPTS)
            .count()
    }

    /// Processes that took at least one request timeout to finish (or fail).
    pub(crate) fn slow(&self, timeout: Duration) -> usize {
        let limit = timeout.as_secs_f64() * 1000.0;
        self.outcomes.iter().filter(|o| o.ms >= limit).count()
    }

    pub(crate) fn errors(&self) -> BTreeMap<String, usize> {
        let mut errors = BTreeMap::new();
        for e in self.outcomes.iter().filter_map(|o| o.error.as_deref()) {
            *errors.entry(shorten(e)).or_default() += 1;
        }
        errors
    }

    pub(crate) fn json(&self, timeout: Duration) -> Value {
        let mut value = self.json_common(timeout);
        if self.mode == Mode::LeaderKill {
            let mut after = self.after_leader();
            after.sort_by(f64::total_cmp);
            value["killed_node"] = json!(self.killed);
            value["election_ms"] = json!(self.election.map(|e| round1(e.at)));
            value["named_ms"] = json!(self.election.map(|e| round1(e.named)));
            value["election_from"] = json!(self.election.map(|e| if e.since_leader_since {
                "leader_since"
            } else {
                "jsz"
            }));
            value["after_leader_ms"] = json!({
                "median": median(after.clone()).map(round1),
                "max": after.iter().copied().reduce(f64::max).map(round1),
                "each": after.iter().map(|v| round1(*v)).collect::<Vec<_>>(),
            });
        }
        value
    }

    pub(crate) fn json_common(&self, timeout: Duration) -> Value {
        json!({
            "mode": self.mode.name(),
            "variant": self.variant.name(),
            "retry": self.retry,
            "n": self.n,
            "ok": self.ok(),
            "median_ms": self.median_ms().map(round1),
            "max_ms": self.max_ms().map(round1),
            "attempts_median": self.attempts_median(),
            "attempts_total": self.attempts_total(),
            "retried": self.retried(),
            "over_timeout": self.slow(timeout),
            "rep": self.rep + 1,
            "errors": self.errors(),
        })
    }
}

/// Errors name the stream of the cell; group them across cells by removing it.
pub(crate) fn shorten(error: &str) -> String {
    let mut out = String::with_capacity(error.len());
    for (i, word) in error.split(' ').enumerate() {
        if i > 0 {
            out.push(' ');
        }
        if word.contains("BENCH_PROV_") {
            out.push_str("<stream>");
        } else {
            out.push_str(word);
        }
    }
    out
}

pub(crate) fn round1(v: f64) -> f64 {
    (v * 10.0).round() / 10.0
}

pub(crate) fn median(mut values: Vec<f64>) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    Some(if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    })
}

pub(crate) fn fmt_ms(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| format!("{v:.0}"))
}

pub(crate) fn fmt_num(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| format!("{v}"))
}

/// One Markdown table per N: a row per mode, variant and retry; per repetition, `a, b, c`.
pub(crate) fn print_table(n: usize, args: &Args, runs: &[Run], timeout: Duration) {
    println!("\n### N = {n}\n");
    println!(
        "| mode | variant | retry | ok (per rep) | median ms | max ms | attempts (median) | ≥ {}s |",
        timeout.as_secs()
    );
    println!("|---|---|---|---|---:|---:|---:|---:|");
    for &mode in &args.modes {
        for &variant in &args.variants {
            for &retry in &args.retry {
                let cell: Vec<&Run> = runs
                    .iter()
                    .filter(|r| r.mode == mode && r.variant == variant && r.retry == retry)
                    .collect();
                let join = |f: &dyn Fn(&Run) -> String| {
                    cell.iter().map(|r| f(r)).collect::<Vec<_>>().join(", ")
                };
                println!(
                    "| {} | {} | {} | {} | {} | {} | {} | {} |",
                    mode.name(),
                    variant.name(),
                    if retry { "on" } else { "off" },
                    join(&|r| format!("{}/{n}", r.ok())),
                    join(&|r| fmt_ms(r.median_ms())),
                    join(&|r| fmt_ms(r.max_ms())),
                    join(&|r| fmt_num(r.attempts_median())),
                    join(&|r| r.slow(timeout).to_string()),
                );
            }
        }
    }
    let mut errors: BTreeMap<String, usize> = BTreeMap::new();
    for run in runs {
        for (error, count) in run.errors() {
            *errors
                .entry(format!(
                    "{} {} retry {}: {error}",
                    run.mode.name(),
                    run.variant.name(),
                    if run.retry { "on" } else { "off" }
                ))
                .or_default() += count;
        }
    }
    if !errors.is_empty() {
        println!("\nErrors at N = {n} (count over all repetitions):\n");
        for (error, count) in errors {
            println!("- {count} × {error}");
        }
    }
}
