//! [`Link`]: a loopback TCP proxy whose traffic a test can stall (both ways or one way), delay
//! or cut, to stage network faults between a client and a server, or between two servers,
//! without touching the machine's network settings.

use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::{AbortHandle, JoinSet};
use tokio::time::Instant;

use crate::error::TestkitError;

/// One way through a [`Link`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// From whoever dials the link to its target: a client's publishes, pull requests and
    /// acks; for a route link, what the dialing server sends.
    Forward,
    /// From the target back to the dialer: a server's deliveries, replies and heartbeats.
    Back,
}

/// How [`Link::cut`] ends the connections through a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// An abrupt reset (RST) on both sides, as a crashed middlebox or a killed peer gives.
    Reset,
    /// An orderly close (FIN) on both sides, as a proxy that shuts down gives.
    Fin,
}

/// The faults a link applies now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Faults {
    forward_stalled: bool,
    back_stalled: bool,
    /// Added to every chunk's trip, in each direction.
    latency: Duration,
}

impl Faults {
    fn stalled(&self, direction: Direction) -> bool {
        match direction {
            Direction::Forward => self.forward_stalled,
            Direction::Back => self.back_stalled,
        }
    }
}

/// A loopback TCP proxy from its own port to a target port on `127.0.0.1`, with faults a test
/// switches on and off while connections are open:
///
/// - [`stall`](Link::stall) / [`stall_one_way`](Link::stall_one_way): no byte gets through
///   (in that direction), while every connection stays open. The proxy stops reading, so the
///   bytes wait in TCP's buffers (and the proxy's) and arrive in order at [`heal`](Link::heal),
///   as across a paused VM, a dead NAT entry or a cable cut behind a switch;
/// - [`latency`](Link::latency): each chunk is delayed by that much in each direction (the
///   round trip grows by twice as much);
/// - [`cut`](Link::cut): the open connections are reset or closed (new ones are accepted);
/// - [`heal`](Link::heal): no fault.
///
/// Cloning gives another handle on the same link; the proxy stops, closing its connections,
/// when the last handle is dropped. It runs on the Tokio runtime it was started on.
///
/// ```no_run
/// use nats_topology_testkit::{Direction, Link, NatsServer};
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let server = NatsServer::start().await?;
/// let link = Link::start(server.port()).await?;
/// let client = async_nats::connect(link.url()).await?;
/// link.stall_one_way(Direction::Forward); // what the client sends waits; deliveries flow
/// link.heal();
/// # drop(client);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Link {
    inner: Arc<Inner>,
}

struct Inner {
    port: u16,
    target: u16,
    faults: watch::Sender<Faults>,
    /// Bumped by every cut; each connection ends when it changes.
    cuts: watch::Sender<(u64, Cut)>,
    open: Arc<AtomicUsize>,
    accepted: Arc<AtomicU64>,
    accept: AbortHandle,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The accept task owns the connections' tasks: aborting it drops (closes) them all.
        self.accept.abort();
    }
}

impl Link {
    /// Starts a link on a free loopback port to `127.0.0.1:target`. Each connection accepted
    /// is forwarded over a connection of its own to the target; one the target refuses is
    /// closed at once.
    pub async fn start(target: u16) -> Result<Link, TestkitError> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| TestkitError::io("binding a link's port on 127.0.0.1", e))?;
        let port = listener
            .local_addr()
            .map_err(|e| TestkitError::io("reading a link's port", e))?
            .port();
        let (faults, _) = watch::channel(Faults::default());
        let (cuts, _) = watch::channel((0, Cut::Reset));
        let open = Arc::new(AtomicUsize::new(0));
        let accepted = Arc::new(AtomicU64::new(0));
        let accept = tokio::spawn(accept_loop(
            listener,
            target,
            (faults.clone(), cuts.clone()),
            (open.clone(), accepted.clone()),
        ))
        .abort_handle();
        Ok(Link {
            inner: Arc::new(Inner {
                port,
                target,
                faults,
                cuts,
                open,
                accepted,
                accept,
            }),
        })
    }

    /// The port the link listens on.
    pub fn port(&self) -> u16 {
        self.inner.port
    }

    /// The port it forwards to.
    pub fn target(&self) -> u16 {
        self.inner.target
    }

    /// `nats://127.0.0.1:<port>`: the link as a NATS server URL.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.inner.port)
    }

    /// Stalls both directions: connections stay open, nothing gets through until
    /// [`heal`](Link::heal).
    pub fn stall(&self) {
        self.inner.faults.send_modify(|f| {
            f.forward_stalled = true;
            f.back_stalled = true;
        });
    }

    /// Stalls one direction only (for example [`Direction::Forward`]: a client's acks and pull
    /// requests wait while deliveries reach it).
    pub fn stall_one_way(&self, direction: Direction) {
        self.inner.faults.send_modify(|f| match direction {
            Direction::Forward => f.forward_stalled = true,
            Direction::Back => f.back_stalled = true,
        });
    }

    /// Delays every chunk by `latency` in each direction (zero: none).
    pub fn latency(&self, latency: Duration) {
        self.inner.faults.send_modify(|f| f.latency = latency);
    }

    /// Ends every connection open now, with a reset or an orderly close on both sides; the
    /// link keeps accepting new ones.
    pub fn cut(&self, how: Cut) {
        self.inner.cuts.send_modify(|(generation, cut)| {
            *generation += 1;
            *cut = how;
        });
    }

    /// Removes every fault: stalled bytes flow again, in order, and latency is gone.
    pub fn heal(&self) {
        self.inner.faults.send_replace(Faults::default());
    }

    /// Whether a direction is stalled now.
    pub fn is_stalled(&self, direction: Direction) -> bool {
        self.inner.faults.borrow().stalled(direction)
    }

    /// The connections open through the link now.
    pub fn connections(&self) -> usize {
        self.inner.open.load(Ordering::Relaxed)
    }

    /// The connections it has accepted since it started.
    pub fn accepted(&self) -> u64 {
        self.inner.accepted.load(Ordering::Relaxed)
    }
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link")
            .field("port", &self.inner.port)
            .field("target", &self.inner.target)
            .field("faults", &*self.inner.faults.borrow())
            .field("connections", &self.connections())
            .finish()
    }
}

async fn accept_loop(
    listener: TcpListener,
    target: u16,
    (faults, cuts): (watch::Sender<Faults>, watch::Sender<(u64, Cut)>),
    (open, accepted): (Arc<AtomicUsize>, Arc<AtomicU64>),
) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            incoming = listener.accept() => {
                let Ok((inbound, _)) = incoming else { continue };
                accepted.fetch_add(1, Ordering::Relaxed);
                let watching = (faults.subscribe(), cuts.subscribe());
                let open = open.clone();
                connections.spawn(async move {
                    open.fetch_add(1, Ordering::Relaxed);
                    connection(inbound, target, watching).await;
                    open.fetch_sub(1, Ordering::Relaxed);
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// Forwards one accepted connection until either side closes it or a cut ends it.
async fn connection(
    inbound: TcpStream,
    target: u16,
    (faults, mut cuts): (watch::Receiver<Faults>, watch::Receiver<(u64, Cut)>),
) {
    cuts.borrow_and_update();
    let Ok(outbound) = TcpStream::connect(("127.0.0.1", target)).await else {
        // The target refuses: so does the link (dropping the accepted stream closes it).
        return;
    };
    let _ = inbound.set_nodelay(true);
    let _ = outbound.set_nodelay(true);
    let fds = [inbound.as_raw_fd(), outbound.as_raw_fd()];
    let (from_dialer, to_dialer) = inbound.into_split();
    let (from_target, to_target) = outbound.into_split();
    let (forward_tx, forward_rx) = mpsc::unbounded_channel();
    let (back_tx, back_rx) = mpsc::unbounded_channel();
    let pumps = async {
        tokio::join!(
            read(from_dialer, forward_tx, Direction::Forward, faults.clone()),
            write(to_target, forward_rx, Direction::Forward, faults.clone()),
            read(from_target, back_tx, Direction::Back, faults.clone()),
            write(to_dialer, back_rx, Direction::Back, faults.clone()),
        )
    };
    tokio::select! {
        _ = pumps => {}
        changed = cuts.changed() => {
            if changed.is_ok() {
                let how = cuts.borrow().1;
                // The halves (inside `pumps`, still alive here) own the descriptors.
                for fd in fds {
                    end(fd, how);
                }
            }
        }
    }
}

/// Prepares `fd` to end as `how` when it is closed: a reset (SO_LINGER of zero) or a FIN.
fn end(fd: RawFd, how: Cut) {
    match how {
        Cut::Reset => {
            let linger = libc::linger {
                l_onoff: 1,
                l_linger: 0,
            };
            // SAFETY: `fd` is an open socket owned by a stream half that outlives this call;
            // the option value is a valid `linger` of the size passed.
            unsafe {
                libc::setsockopt(
                    fd,
                    libc::SOL_SOCKET,
                    libc::SO_LINGER,
                    (&linger as *const libc::linger).cast(),
                    std::mem::size_of::<libc::linger>() as libc::socklen_t,
                );
            }
        }
        Cut::Fin => {
            // SAFETY: as above; shutdown(2) only changes the state of the open socket.
            unsafe {
                libc::shutdown(fd, libc::SHUT_RDWR);
            }
        }
    }
}

/// A chunk read, and when.
type Chunk = (Instant, Vec<u8>);

/// Reads from one side while its direction flows; a stalled direction reads nothing, so the
/// sender's bytes wait in TCP's buffers.
async fn read(
    mut from: OwnedReadHalf,
    to: mpsc::UnboundedSender<Chunk>,
    direction: Direction,
    mut faults: watch::Receiver<Faults>,
) {
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        if faults.wait_for(|f| !f.stalled(direction)).await.is_err() {
            return;
        }
        match from.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if to.send((Instant::now(), buffer[..n].to_vec())).is_err() {
                    return;
                }
            }
        }
    }
}

/// Writes what was read to the other side, each chunk once its latency has passed and only
/// while its direction flows; closes the write side once the reader ended and all is written.
async fn write(
    mut to: OwnedWriteHalf,
    mut from: mpsc::UnboundedReceiver<Chunk>,
    direction: Direction,
    mut faults: watch::Receiver<Faults>,
) {
    while let Some((read_at, chunk)) = from.recv().await {
        loop {
            let now = *faults.borrow_and_update();
            let due = read_at + now.latency;
            if !now.stalled(direction) && Instant::now() >= due {
                break;
            }
            let wait = async {
                if now.stalled(direction) {
                    std::future::pending::<()>().await;
                }
                tokio::time::sleep_until(due).await;
            };
            tokio::select! {
                () = wait => {}
                changed = faults.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
            }
        }
        if to.write_all(&chunk).await.is_err() {
            return;
        }
    }
    let _ = to.shutdown().await;
}
