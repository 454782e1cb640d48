//! Where a server lives: free loopback ports and fresh store directories, with unique names.

use std::fs;
use std::io;
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::TestkitError;

pub(crate) fn unique_suffix() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{}-{n}-{nanos:09}", std::process::id())
}

/// Creates a fresh, empty, uniquely named directory under the system temporary directory.
pub(crate) fn make_store_dir(label: &str) -> Result<PathBuf, TestkitError> {
    loop {
        let dir =
            std::env::temp_dir().join(format!("nats-topology-testkit-{label}-{}", unique_suffix()));
        match fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => {
                return Err(TestkitError::io(
                    format!("creating store directory {}", dir.display()),
                    e,
                ));
            }
        }
    }
}

/// Returns `n` distinct free loopback ports (all bound at once, then released).
pub(crate) fn free_ports(n: usize) -> Result<Vec<u16>, TestkitError> {
    let listeners = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<io::Result<Vec<_>>>()
        .map_err(|e| TestkitError::io("binding 127.0.0.1:0 to find a free port", e))?;
    listeners
        .iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect::<io::Result<Vec<_>>>()
        .map_err(|e| TestkitError::io("reading a free port", e))
}
