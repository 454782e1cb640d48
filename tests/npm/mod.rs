//! Node and the pinned npm packages (`tests/js/package.json` and its lock file) for the tests
//! that check what we export or serve with official JavaScript clients we did not write:
//! installed into `target/npm` with `npm ci` on first use, as the test kit installs
//! nats-server. Missing node or npm fails the test with what to install (never a skip).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// The folder the npm packages are installed in: `NT_NPM_DIR`, else `target/npm` of the
/// target directory this test was built in.
pub fn npm_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("NT_NPM_DIR") {
        return dir.into();
    }
    // target/debug/deps/TEST-HASH -> target
    let exe = std::env::current_exe().expect("the test knows its executable");
    exe.ancestors()
        .nth(3)
        .expect("the test runs from target/PROFILE/deps")
        .join("npm")
}

/// The pinned npm packages (`tests/js/package.json` and its lock file), installed into
/// [`npm_dir`] with `npm ci` when that folder does not hold exactly them, once per test run
/// (as the test kit installs nats-server). Panics with what to do when npm fails.
pub fn npm_packages() -> PathBuf {
    static INSTALLED: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    INSTALLED
        .get_or_init(|| {
            let dir = npm_dir();
            let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/js");
            let same = |file: &str| {
                std::fs::read(source.join(file)).ok() == std::fs::read(dir.join(file)).ok()
            };
            let packages = [
                "@msgpack/msgpack",
                "cbor2",
                "protobufjs",
                "@asyncapi/parser",
                "@nats-io/jetstream",
                "@nats-io/kv",
                "@nats-io/obj",
                "@nats-io/services",
                "@nats-io/transport-node",
            ];
            let installed = packages
                .iter()
                .all(|p| dir.join("node_modules").join(p).is_dir());
            if installed && same("package.json") && same("package-lock.json") {
                return Ok(dir);
            }
            std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            for file in ["package.json", "package-lock.json"] {
                std::fs::copy(source.join(file), dir.join(file))
                    .map_err(|e| format!("copying {file} to {}: {e}", dir.display()))?;
            }
            let status = Command::new("npm")
                .args(["ci", "--no-audit", "--no-fund", "--prefix"])
                .arg(&dir)
                .status()
                .map_err(|e| {
                    format!("cannot run `npm` ({e}): install Node.js 20 or later with npm (.ci/run does)")
                })?;
            if !status.success() {
                return Err(format!(
                    "`npm ci --prefix {}` failed ({status}): the tests that run node need the npm registry once, \
                     or the pinned packages installed there (or in NT_NPM_DIR)",
                    dir.display()
                ));
            }
            Ok(dir)
        })
        .clone()
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Runs `node tests/js/SCRIPT args`: its status and standard output. Installs the pinned npm
/// packages first if needed; panics with what to install when node or npm is missing.
pub fn node(script: &str, args: &[&str]) -> (bool, String) {
    let dir = npm_packages();
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/js")
        .join(script);
    let output = Command::new("node")
        .arg(&script)
        .args(args)
        .env("NT_NPM_DIR", &dir)
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run `node` ({e}): install Node.js 20 or later (.ci/run does)")
        });
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !stderr.trim().is_empty() {
        eprintln!("node {}: {stderr}", script.display());
    }
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
    )
}
