//! The README's set-up lines and headline code work as written: a crate of its own is made
//! from the README's `[dependencies]` block (with every optional feature it names) and its
//! first code block (with the payload types it leaves out, and a `main`), then built by cargo
//! against this repository, as a user's project would be.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The README's fenced blocks of `language`, in order.
fn blocks(readme: &str, language: &str) -> Vec<String> {
    let fence = format!("```{language}");
    let mut found = Vec::new();
    let mut lines = readme.lines();
    while let Some(line) = lines.next() {
        if line.trim() == fence {
            let block: Vec<&str> = lines.by_ref().take_while(|l| l.trim() != "```").collect();
            found.push(block.join("\n"));
        }
    }
    found
}

/// The `[dependencies]` block, with every optional feature it names on, and its paths pointing
/// at this repository (the README's are relative to a clone beside the user's project).
fn manifest(readme: &str, repository: &Path) -> String {
    let toml = blocks(readme, "toml")
        .into_iter()
        .find(|b| b.contains("[dependencies]"))
        .expect("the README has a [dependencies] block");
    let mut dependencies = Vec::new();
    for line in toml.lines() {
        let line = match line.strip_prefix("# nats-topology = ") {
            Some(with_features) => format!("nats-topology = {with_features}"),
            None if line.starts_with("nats-topology = ") => continue,
            None => line.to_owned(),
        };
        dependencies.push(line.replace("../nats-topology", &repository.display().to_string()));
    }
    format!(
        "[package]\nname = \"readme-app\"\nversion = \"0.0.0\"\nedition = \"2024\"\npublish = \
         false\n\n# A workspace of its own, not the repository's.\n[workspace]\n\n{}\n",
        dependencies.join("\n")
    )
}

/// The first code block: its items as they are, its statements in a `main`.
fn main_rs(readme: &str) -> String {
    let code = blocks(readme, "rust")
        .into_iter()
        .next()
        .expect("the README has a code block");
    let start = code
        .find("\n// Servers from NATS_URL")
        .expect("the block ends with the statements that run it");
    let (items, statements) = code.split_at(start);
    let statements = statements
        .lines()
        .map(|l| format!("    {l}"))
        .collect::<Vec<_>>()
        .join("\n");
    format!(
        "// The README's handlers are sketches: their arguments go unused.\n\
         #![allow(unused_variables, dead_code)]\n\n\
         #[derive(serde::Deserialize)]\nstruct SyncComplete {{}}\n\
         #[derive(serde::Deserialize, Debug)]\nstruct MemberId(u64);\n\
         #[derive(serde::Serialize)]\nstruct Member {{}}\n\n\
         {items}\n\n\
         #[tokio::main]\nasync fn main() -> Result<(), Box<dyn std::error::Error>> {{\n    \
         tracing_subscriber::fmt::init();\n{statements}\n    Ok(())\n}}\n"
    )
}

#[test]
fn the_readme_set_up_and_headline_code_build_as_a_project_of_their_own() {
    let repository = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(repository.join("README.md")).expect("README.md");
    let app = Path::new(env!("CARGO_TARGET_TMPDIR")).join("readme-app");
    std::fs::create_dir_all(app.join("src")).expect("the project's folder");
    std::fs::write(app.join("Cargo.toml"), manifest(&readme, &repository)).unwrap();
    std::fs::write(app.join("src/main.rs"), main_rs(&readme)).unwrap();
    // The repository's lock: the same versions as its own build, nothing resolved anew.
    std::fs::copy(repository.join("Cargo.lock"), app.join("Cargo.lock")).unwrap();
    // The test runs from target/PROFILE/deps: build into the same target directory, so that
    // what the repository's build compiled is reused.
    let exe = std::env::current_exe().expect("the test knows its executable");
    let target_dir = exe.ancestors().nth(3).expect("target");
    let output = Command::new(env!("CARGO"))
        .args(["check", "--quiet", "--manifest-path"])
        .arg(app.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(target_dir)
        .output()
        .expect("cargo runs");
    assert!(
        output.status.success(),
        "the README's project does not build:\n{}\n--- Cargo.toml\n{}\n--- src/main.rs\n{}",
        String::from_utf8_lossy(&output.stderr),
        manifest(&readme, &repository),
        main_rs(&readme)
    );
}
