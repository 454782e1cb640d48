//! The runtime's modules stand on layers (docs/ARCHITECTURE.md, "Layers"): a module imports
//! only modules of a lower layer, so the crate has no import running back up and no circle
//! between modules. This test reads every `crate::` path in the crate's sources (the `use`
//! lines and paths written inline) and fails on one that names a module of its own layer or
//! one above, or that goes through a re-export of the crate root (`crate::Runtime`), which
//! hides which module it needs. Inside `run/`, the same for its parts.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

/// The crate's top-level modules, bottom layer first. A module may import modules of lower
/// layers only.
const LAYERS: &[(&str, &[&str])] = &[
    (
        "ground: ids, time, retry, outages, the JetStream request, the permission vocabulary, state, payload codecs, the tower stack",
        &[
            "hash",
            "retry",
            "outage",
            "jsapi",
            "grant",
            "state",
            "telemetry",
            "codec",
            "stack",
        ],
    ),
    (
        "what the runtime records and what handlers see",
        &["health", "server_errors", "handler"],
    ),
    (
        "talking to the server: connecting, provisioning, request/reply",
        &["connect", "provision", "service"],
    ),
    ("the declarations", &["registry"]),
    (
        "what is read from the declarations: validation, export, reports, bucket handles",
        &["validate", "export", "report", "bucket"],
    ),
    ("running", &["run"]),
];

/// Inside `run/`, bottom first: `mod.rs` (the runtime's handle and shared state) is read by
/// all and is not listed.
const RUN_LAYERS: &[(&str, &[&str])] = &[
    (
        "the pieces every task uses",
        &["ensure", "relay", "shares", "signals"],
    ),
    ("the builder", &["builder"]),
    ("watchers", &["watchers"]),
    ("consumers and services", &["consume", "serve"]),
    ("the supervised tasks", &["tasks"]),
];

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("read the source folder") {
        let path = entry.expect("a folder entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The text of a source without its comments (line comments and doc comments), so that a
/// doc link is not taken for an import.
fn code(text: &str) -> String {
    text.lines()
        .map(|line| match line.find("//") {
            // A `//` inside a string literal ("nats://...") is not a comment.
            Some(at) if line[..at].matches('"').count() % 2 == 0 => &line[..at],
            _ => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The first segment of every path after `prefix`: `crate::a::b` gives `a`, and
/// `crate::{a::b, c}` gives `a` and `c`.
fn first_segments(code: &str, prefix: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find(prefix) {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + prefix.len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || matches!(c, '_' | ':' | '$')) {
            continue; // `$crate::` or `foo_crate::`
        }
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 1;
            let mut item = String::new();
            let mut items = Vec::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 1 => items.push(std::mem::take(&mut item)),
                    _ => {}
                }
                if depth == 0 {
                    break;
                }
                if depth == 1 && c != ',' {
                    item.push(c);
                }
            }
            items.push(item);
            found.extend(
                items
                    .iter()
                    .map(|i| i.trim().split("::").next().unwrap_or("").trim().to_owned())
                    .filter(|i| !i.is_empty()),
            );
        } else {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                found.push(name);
            }
        }
    }
    found
}

fn layer_of(layers: &[(&str, &[&str])], module: &str) -> Option<usize> {
    layers.iter().position(|(_, ms)| ms.contains(&module))
}

/// The module a source file belongs to, relative to `root`: `run/consume/ack.rs` is `run`
/// at the top and `consume` inside `run`.
fn module_path(root: &Path, file: &Path) -> Vec<String> {
    let relative = file.strip_prefix(root).expect("under the source root");
    let mut parts: Vec<String> = relative
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().expect("a file name");
    let stem = last.trim_end_matches(".rs");
    if stem != "mod" && stem != "lib" {
        parts.push(stem.to_owned());
    }
    parts
}

#[test]
fn no_module_imports_its_own_layer_or_one_above() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&root, &mut files);
    files.sort();
    assert!(files.len() > 50, "found only {} sources", files.len());
    let mut problems = Vec::new();
    let mut edges: BTreeMap<(String, String), usize> = BTreeMap::new();
    for file in &files {
        let module = module_path(&root, file);
        let Some(top) = module.first() else {
            continue; // lib.rs: the table of contents, above every layer
        };
        let shown = file.strip_prefix(&root).unwrap().display().to_string();
        let Some(own) = layer_of(LAYERS, top) else {
            problems.push(format!(
                "{shown}: module `{top}` is on no layer: add it to LAYERS here and to docs/ARCHITECTURE.md"
            ));
            continue;
        };
        let text = code(&fs::read_to_string(file).expect("read a source"));
        for name in first_segments(&text, "crate::") {
            if name == *top {
                continue;
            }
            if name.starts_with(char::is_uppercase) {
                problems.push(format!(
                    "{shown}: `crate::{name}` goes through the crate root's re-export; name the module that defines it"
                ));
                continue;
            }
            match layer_of(LAYERS, &name) {
                Some(theirs) if theirs < own => {
                    *edges.entry((top.clone(), name)).or_default() += 1;
                }
                Some(theirs) => problems.push(format!(
                    "{shown}: `{top}` ({}) imports `{name}` ({}), a layer {}: move what both need into a lower layer",
                    LAYERS[own].0,
                    LAYERS[theirs].0,
                    if theirs == own { "of its own" } else { "above" }
                )),
                None => problems.push(format!("{shown}: `crate::{name}` names no layered module")),
            }
        }
        if top == "run" && module.len() > 1 {
            let part = &module[1];
            let Some(own) = layer_of(RUN_LAYERS, part) else {
                problems.push(format!(
                    "{shown}: `run::{part}` is on no layer of run/: add it to RUN_LAYERS"
                ));
                continue;
            };
            let mut names = first_segments(&text, "crate::run::");
            if module.len() == 2 {
                // A file directly in run/: `super::` is run itself.
                names.extend(first_segments(&text, "super::"));
            }
            for name in names {
                if name == *part || name.starts_with(char::is_uppercase) || name == "super" {
                    continue; // its own part, or run's shared handle and settings
                }
                if let Some(theirs) = layer_of(RUN_LAYERS, &name)
                    && theirs >= own
                {
                    problems.push(format!(
                        "{shown}: `run::{part}` imports `run::{name}`, a part of run/ on its own layer or above"
                    ));
                }
            }
        }
    }
    assert!(
        problems.is_empty(),
        "imports that break the layers:\n{}",
        problems.join("\n")
    );
    // The layers are not empty words: the crate does stand on them.
    assert!(edges.contains_key(&("run".into(), "provision".into())));
    assert!(edges.contains_key(&("provision".into(), "retry".into())));
}

#[test]
fn the_reader_finds_grouped_and_inline_paths() {
    let text = code(
        "use crate::{health::Health, provision::{A, B}};\n\
         let x = crate::retry::f(); // crate::run::X\n\
         let url = \"nats://host\"; crate::state::get();\n\
         use $crate::ignored;",
    );
    assert_eq!(
        first_segments(&text, "crate::"),
        ["health", "provision", "retry", "state"]
    );
}
