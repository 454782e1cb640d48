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

/// A loopback port bound but never listened on: connections to it are refused for as long as
/// it is held, and no other socket can take it. A cluster behind links advertises such a port
/// as its route URL, so that a route gossiped between servers cannot bypass the links.
pub(crate) struct RefusingPort {
    _socket: std::os::fd::OwnedFd,
    pub(crate) port: u16,
}

impl RefusingPort {
    pub(crate) fn bind() -> Result<RefusingPort, TestkitError> {
        use std::os::fd::{FromRawFd, OwnedFd};
        let failed = |what: &str| TestkitError::io(what.to_owned(), io::Error::last_os_error());
        // SAFETY: socket(2) has no memory preconditions; a non-negative result is a new
        // descriptor that nothing else owns, so `OwnedFd` may take it.
        let socket = unsafe {
            let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
            if fd < 0 {
                return Err(failed("creating a socket to reserve a refusing port"));
            }
            OwnedFd::from_raw_fd(fd)
        };
        let fd = std::os::fd::AsRawFd::as_raw_fd(&socket);
        let mut addr = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: 0,
            sin_addr: libc::in_addr {
                s_addr: u32::from(std::net::Ipv4Addr::LOCALHOST).to_be(),
            },
            sin_zero: [0; 8],
        };
        let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        // SAFETY: `addr` is a valid `sockaddr_in` of the length passed, for both calls, and
        // `fd` is the open socket owned above.
        unsafe {
            let addr_ptr = (&mut addr as *mut libc::sockaddr_in).cast::<libc::sockaddr>();
            if libc::bind(fd, addr_ptr, len) != 0 {
                return Err(failed("binding 127.0.0.1:0 to reserve a refusing port"));
            }
            if libc::getsockname(fd, addr_ptr, &mut len) != 0 {
                return Err(failed("reading a reserved port"));
            }
        }
        Ok(RefusingPort {
            _socket: socket,
            port: u16::from_be(addr.sin_port),
        })
    }
}
