//! What the children reported, per cell and repetition: the JSON line and the tables.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::leader_kill::LeaderKill;
use crate::{Args, MIN_ATTEMPTS, Mode, Variant};

/// What one child reported.
#[derive(Debug, Clone)]
pub(crate) struct Outcome {
    pub(crate) ok: bool,
    pub(crate) ms: f64,
    pub(crate) attempts: u32,
    /// Requests that went unanswered for the whole request timeout (`None`: not reported).
    pub(crate) timed_out: Option<u32>,
    pub(crate) error: Option<String>,
}

impl Outcome {
    pub(crate) fn failed(error: String) -> Outcome {
        Outcome {
            ok: false,
            ms: f64::NAN,
            attempts: 0,
            timed_out: None,
            error: Some(error),
        }
    }

    pub(crate) fn parse(line: &str) -> Outcome {
        match serde_json::from_str::<Value>(line) {
            Ok(v) => Outcome {
                ok: v["ok"].as_bool().unwrap_or(false),
                ms: v["ms"].as_f64().unwrap_or(f64::NAN),
                attempts: v["attempts"].as_u64().unwrap_or(0) as u32,
                timed_out: v["timed_out"].as_u64().map(|n| n as u32),
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
    /// Leader-kill: the node killed, the new meta leader's election, the API load.
    pub(crate) leader_kill: Option<LeaderKill>,
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
        match self.leader_kill.as_ref().and_then(|k| k.election) {
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

    /// Requests that went unanswered for the whole request timeout, over all processes, and
    /// whether every process reported its count (a runtime whose provisioning failed does
    /// not).
    pub(crate) fn timed_out(&self) -> (u32, bool) {
        let known = self.outcomes.iter().filter_map(|o| o.timed_out);
        let all = self.outcomes.iter().all(|o| o.timed_out.is_some());
        (known.sum(), all)
    }

    /// [`Run::timed_out`] for a table: `12`, or `12+` when some processes did not say.
    pub(crate) fn timed_out_text(&self) -> String {
        match self.timed_out() {
            (n, true) => n.to_string(),
            (n, false) => format!("{n}+"),
        }
    }

    pub(crate) fn errors(&self) -> BTreeMap<String, usize> {
        let mut errors = BTreeMap::new();
        for e in self.outcomes.iter().filter_map(|o| o.error.as_deref()) {
            *errors.entry(shorten(e)).or_default() += 1;
        }
        errors
    }

    pub(crate) fn json(&self) -> Value {
        let mut value = self.json_common();
        if let Some(kill) = &self.leader_kill {
            let election = kill.election;
            let mut after = self.after_leader();
            after.sort_by(f64::total_cmp);
            value["killed_node"] = json!(kill.killed);
            value["election_ms"] = json!(election.map(|e| round1(e.at)));
            value["named_ms"] = json!(election.map(|e| round1(e.named)));
            value["election_from"] = json!(election.map(|e| if e.since_leader_since {
                "leader_since"
            } else {
                "jsz"
            }));
            value["after_leader_ms"] = json!({
                "median": median(after.clone()).map(round1),
                "max": after.iter().copied().reduce(f64::max).map(round1),
                "each": after.iter().map(|v| round1(*v)).collect::<Vec<_>>(),
            });
            value["outage_requests"] = kill.outage.map_or(Value::Null, |l| l.json());
            value["after_leader_requests"] = kill.after_leader.map_or(Value::Null, |l| l.json());
            value["api_queue_dropped"] = json!(kill.dropped);
        }
        value
    }

    pub(crate) fn json_common(&self) -> Value {
        let (timed_out, all_said) = self.timed_out();
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
            "timed_out": timed_out,
            "timed_out_all_reported": all_said,
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
/// `timed out`: requests that went unanswered for the whole request timeout, over all
/// processes (an attempt the runtime gave up earlier, for an election, is not one).
pub(crate) fn print_table(n: usize, args: &Args, runs: &[Run]) {
    println!("\n### N = {n}\n");
    println!(
        "| mode | variant | retry | ok (per rep) | median ms | max ms | attempts (median) | timed out |"
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
                    join(&|r| r.timed_out_text()),
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

/// Leader-kill, one row per repetition: when the new leader took office, how long after it
/// the processes were ready, and the API requests the cluster received from clients during
/// the outage (from the kill until the new leader is seen) and after it (until the last
/// process is ready).
pub(crate) fn print_leader_kill(n: usize, runs: &[Run]) {
    let kills: Vec<(&Run, &LeaderKill)> = runs
        .iter()
        .filter_map(|r| Some((r, r.leader_kill.as_ref()?)))
        .collect();
    if kills.is_empty() {
        return;
    }
    println!("\nLeader-kill at N = {n}, per repetition:\n");
    println!(
        "| rep | variant | retry | killed | in office at ms | ready after it: median / max ms \
         | timed out | outage: API requests | after the leader: API requests | API queue drops |"
    );
    println!("|---|---|---|---|---:|---:|---:|---:|---:|---:|");
    for (run, kill) in kills {
        let after = run.after_leader();
        println!(
            "| {} | {} | {} | node{} | {} | {} / {} | {} | {} | {} | {} |",
            run.rep + 1,
            run.variant.name(),
            if run.retry { "on" } else { "off" },
            kill.killed,
            fmt_ms(kill.election.map(|e| e.at)),
            fmt_ms(median(after.clone())),
            fmt_ms(after.into_iter().reduce(f64::max)),
            run.timed_out_text(),
            kill.outage.map_or("-".to_owned(), |l| l.text()),
            kill.after_leader.map_or("-".to_owned(), |l| l.text()),
            kill.dropped,
        );
    }
}
