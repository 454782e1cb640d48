//! Why a connection is not up, in words: each server the connection lists is tried as the
//! client reaches it (its host resolved, a TCP connection opened, the server's `INFO` read),
//! beside the last failure the client reported, so that a wrong address, a server that is
//! down, one that wants TLS or other credentials, and one without JetStream are named with
//! what to do within seconds, instead of a client that keeps retrying in silence.

use std::fmt;
use std::time::Duration;

use async_nats::connection::State;
use async_nats::{Client, ServerAddr};
use tokio::io::AsyncBufReadExt;

/// How long one step of trying a server may take (resolving, connecting, reading `INFO`).
const STEP: Duration = Duration::from_secs(1);

/// What is wrong with a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ProblemKind {
    /// The host name does not resolve.
    Dns,
    /// Nothing listens at the address: the server is down, or the port is wrong.
    Refused,
    /// No answer to the TCP connection: the host is down, or a firewall drops it.
    NoAnswer,
    /// Something listens there, but it is no NATS server's client port.
    NotNats,
    /// TLS: the server wants it and the client does not use it, or the handshake failed.
    Tls,
    /// The server refused the client's credentials.
    Auth,
    /// The connection is up, but JetStream is not enabled on the server.
    NoJetStream,
    /// Anything else the client reported.
    Other,
}

/// Why a connection is not up, or cannot reach JetStream: the server (its URL without
/// credentials) and the cause, with what to do.
///
/// ```no_run
/// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
/// let client = nats_topology::connect("nats://127.0.0.1:4333").await?;
/// if let Some(problem) = nats_topology::diagnose(&client).await {
///     // "cannot connect to nats://127.0.0.1:4333: connection refused: nothing listens there…"
///     eprintln!("{problem}");
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionProblem {
    /// The server's URL, without credentials.
    pub server: String,
    /// What is wrong.
    pub kind: ProblemKind,
    /// The cause and what to do, in words.
    pub cause: String,
}

impl fmt::Display for ConnectionProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            ProblemKind::NoJetStream => {
                write!(f, "no JetStream at {}: {}", self.server, self.cause)
            }
            _ => write!(f, "cannot connect to {}: {}", self.server, self.cause),
        }
    }
}

/// Why `client` is not connected, found by trying each server it lists; `None` while it is
/// connected, or when every server answers as a NATS server should and the client reported
/// nothing (a connection under way). Takes about a second at most (each server is tried at
/// once).
pub async fn diagnose(client: &Client) -> Option<ConnectionProblem> {
    if client.connection_state() == State::Connected {
        return None;
    }
    let (servers, failure) = known(client).await;
    let tried = futures::future::join_all(
        servers
            .iter()
            .map(|server| try_server(server, failure.as_deref())),
    )
    .await;
    // The first server whose problem is named; the others are alike more often than not.
    tried.into_iter().flatten().next()
}

/// Whether `client`'s connected server runs without JetStream (its `INFO` says so), for a
/// client that uses that server's own JetStream (`local_api`: no domain or API prefix; a leaf
/// node may reach a hub's JetStream without one of its own).
pub fn no_jetstream(client: &Client, local_api: bool) -> Option<ConnectionProblem> {
    let info = client.server_info();
    if !local_api || info.jetstream || client.connection_state() != State::Connected {
        return None;
    }
    Some(ConnectionProblem {
        server: format!(
            "{}:{} (server `{}`)",
            info.host, info.port, info.server_name
        ),
        kind: ProblemKind::NoJetStream,
        cause: "JetStream is not enabled on this server: start nats-server with `-js`, or give \
                its configuration a `jetstream {}` block (and the account `jetstream: enabled`)"
            .to_owned(),
    })
}

/// The servers `client` lists and the last connection failure it reported: kept by
/// [`connect`](crate::connect()) and its siblings; for another client, its server pool.
async fn known(client: &Client) -> (Vec<ServerAddr>, Option<String>) {
    if let Some(errors) = crate::server_errors::of(client) {
        let (servers, failure) = errors.connection();
        if !servers.is_empty() {
            return (servers, failure);
        }
    }
    // The pool is read by the connection's task, which may be busy connecting.
    let pool = tokio::time::timeout(STEP, client.server_pool()).await;
    let servers = match pool {
        Ok(Ok(pool)) => pool.into_iter().map(|s| s.addr).collect(),
        _ => Vec::new(),
    };
    (servers, None)
}

/// What the server at `addr` says when tried as the client would: `None` if it answers as a
/// NATS server and `failure` (what the client last reported) names nothing.
async fn try_server(addr: &ServerAddr, failure: Option<&str>) -> Option<ConnectionProblem> {
    let problem = |kind, cause: String| {
        Some(ConnectionProblem {
            server: super::without_userinfo(addr.clone().into_inner().as_str()),
            kind,
            cause,
        })
    };
    let (host, port) = (addr.host(), addr.port());
    let resolved = tokio::time::timeout(STEP, tokio::net::lookup_host((host, port))).await;
    let address = match resolved {
        Ok(Ok(mut found)) => match found.next() {
            Some(address) => address,
            None => return problem(ProblemKind::Dns, format!("`{host}` resolves to no address")),
        },
        Ok(Err(e)) => {
            return problem(
                ProblemKind::Dns,
                format!("cannot resolve `{host}` ({e}): check the host name in NATS_URL"),
            );
        }
        Err(_) => {
            return problem(
                ProblemKind::Dns,
                format!("resolving `{host}` took over {STEP:?}: check the host name and DNS"),
            );
        }
    };
    let stream = match tokio::time::timeout(STEP, tokio::net::TcpStream::connect(address)).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            return problem(
                ProblemKind::Refused,
                format!(
                    "connection refused: nothing listens on {address}; is nats-server running \
                     there, and is the port in NATS_URL right?"
                ),
            );
        }
        Ok(Err(e)) => return problem(ProblemKind::NoAnswer, format!("{address}: {e}")),
        Err(_) => {
            return problem(
                ProblemKind::NoAnswer,
                format!(
                    "no answer from {address} within {STEP:?}: the host is down, or a firewall \
                     drops the connection"
                ),
            );
        }
    };
    let mut first = String::new();
    let mut reader = tokio::io::BufReader::new(stream);
    let read = tokio::time::timeout(STEP, reader.read_line(&mut first)).await;
    let Some(info) = first
        .strip_prefix("INFO ")
        .filter(|_| matches!(read, Ok(Ok(_))))
    else {
        return problem(
            ProblemKind::NotNats,
            format!(
                "{address} accepts connections but sends no NATS `INFO`: is this a nats-server's \
                 client port (4222 by default), not its cluster, monitoring or websocket port?"
            ),
        );
    };
    let info: serde_json::Value = serde_json::from_str(info.trim()).unwrap_or_default();
    let wants = |key: &str| info.get(key).and_then(|v| v.as_bool()) == Some(true);
    match failure {
        Some("TLS error") => problem(
            ProblemKind::Tls,
            "the TLS handshake failed: check NATS_CA (the CA that signed the server's \
             certificate) and, for mutual TLS, NATS_CERT and NATS_KEY"
                .to_owned(),
        ),
        Some(_) if wants("tls_required") && !addr.tls_required() => problem(
            ProblemKind::Tls,
            "the server requires TLS: use a `tls://` URL and set NATS_CA to the CA that signed \
             its certificate"
                .to_owned(),
        ),
        Some("authorization violation" | "failed signing nonce") => problem(
            ProblemKind::Auth,
            format!(
                "the server refused the credentials{}: check NATS_CREDS, NATS_NKEY, NATS_USER and \
                 NATS_PASSWORD, or NATS_TOKEN",
                if wants("auth_required") {
                    ""
                } else {
                    " (it requires none: remove them?)"
                }
            ),
        ),
        Some(other) => problem(ProblemKind::Other, other.to_owned()),
        None => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_closed_port_is_named_as_refused() {
        let port = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            listener.local_addr().unwrap().port()
        };
        let addr: ServerAddr = format!("nats://u:secret@127.0.0.1:{port}").parse().unwrap();
        let problem = try_server(&addr, None).await.expect("named");
        assert_eq!(problem.kind, ProblemKind::Refused);
        assert!(
            problem.server.contains(&format!("127.0.0.1:{port}")),
            "{problem}"
        );
        assert!(!problem.to_string().contains("secret"), "{problem}");
    }

    #[tokio::test]
    async fn a_port_that_is_not_nats_is_named() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepting = tokio::spawn(async move {
            let (socket, _) = listener.accept().await.unwrap();
            // Holds the connection open, saying nothing, until the test ends.
            std::future::pending::<()>().await;
            drop(socket);
        });
        let addr: ServerAddr = format!("nats://127.0.0.1:{port}").parse().unwrap();
        let problem = try_server(&addr, None).await.expect("named");
        assert_eq!(problem.kind, ProblemKind::NotNats, "{problem}");
        accepting.abort();
    }

    #[tokio::test]
    async fn an_unknown_host_is_named() {
        let addr: ServerAddr = "nats://no-such-host.invalid:4222".parse().unwrap();
        let problem = try_server(&addr, None).await.expect("named");
        assert_eq!(problem.kind, ProblemKind::Dns, "{problem}");
        assert!(problem.cause.contains("no-such-host.invalid"), "{problem}");
    }
}
