//! Python and the pinned packages of `tests/py/requirements.txt`, for the tests that check what
//! we read against Python's own libraries: installed into `target/py` with `pip install
//! --target` on first use, as the test kit installs nats-server from PyPI. Missing python3 or
//! pip fails the test with what to install (never a skip).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// The folder the packages are installed in: `target/py` of the target directory this test was
/// built in.
fn py_dir() -> PathBuf {
    // target/debug/deps/TEST-HASH -> target
    let exe = std::env::current_exe().expect("the test knows its executable");
    exe.ancestors()
        .nth(3)
        .expect("the test runs from target/PROFILE/deps")
        .join("py")
}

/// The pinned packages, installed into [`py_dir`] when that folder does not hold exactly them
/// (its copy of the requirements differs), into a fresh folder renamed into place, so that a
/// half-done install is never used. Panics with what to do when pip fails.
fn packages() -> PathBuf {
    static INSTALLED: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    INSTALLED
        .get_or_init(|| {
            let dir = py_dir();
            let requirements = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/requirements.txt");
            let wanted = std::fs::read(&requirements)
                .map_err(|e| format!("{}: {e}", requirements.display()))?;
            if std::fs::read(dir.join("requirements.txt")).ok().as_ref() == Some(&wanted) {
                return Ok(dir);
            }
            let fresh = dir.with_file_name(format!("py-installing-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&fresh);
            let status = Command::new("python3")
                .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--target"])
                .arg(&fresh)
                .arg("-r")
                .arg(&requirements)
                .status()
                .map_err(|e| format!("cannot run `python3 -m pip` ({e}): install python3 with pip (.ci/run does)"))?;
            if !status.success() {
                return Err(format!(
                    "`python3 -m pip install --target {} -r {}` failed ({status}): the tests need PyPI once, or the pinned packages installed there",
                    fresh.display(),
                    requirements.display()
                ));
            }
            std::fs::copy(&requirements, fresh.join("requirements.txt"))
                .map_err(|e| format!("{}: {e}", fresh.display()))?;
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::rename(&fresh, &dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            Ok(dir)
        })
        .clone()
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Runs `python3 tests/py/SCRIPT args` with the pinned packages on its path: its standard
/// output. Panics with the script's standard error when it fails.
pub fn python(script: &str, args: &[&str]) -> String {
    let packages = packages();
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/py")
        .join(script);
    let output = Command::new("python3")
        .arg(&path)
        .args(args)
        .env("PYTHONPATH", &packages)
        .output()
        .unwrap_or_else(|e| panic!("cannot run `python3` ({e}): install python3 (.ci/run does)"));
    assert!(
        output.status.success(),
        "python3 {} failed ({}): {}",
        path.display(),
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("the script writes text")
}
