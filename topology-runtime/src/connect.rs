//! Connecting the way a supervised service needs: the broker may be down when the service
//! starts, and may go away at any time after.

use async_nats::{Client, ConnectError, ConnectErrorKind, ConnectOptions, ServerAddr};

/// The environment variable that lists the servers, comma-separated, as the `nats` CLI reads it.
pub const NATS_URL: &str = "NATS_URL";

/// The servers [`connect_from_env`] uses when `NATS_URL` is not set.
pub const DEFAULT_URL: &str = "nats://127.0.0.1:4222";

/// The options [`connect`] uses: retry the initial connection (a broker that is down at boot
/// is waited for, not a reason to exit), reconnect without limit, and name the connection
/// after the executable (it shows in the server's `connz` and logs).
///
/// Start from these to add credentials or TLS:
///
/// ```no_run
/// # async fn f() -> Result<(), nats_topology::async_nats::ConnectError> {
/// let client = nats_topology::connect_options()
///     .credentials_file("service.creds")
///     .await?
///     .connect("nats://nats.internal:4222")
///     .await?;
/// # drop(client);
/// # Ok(())
/// # }
/// ```
pub fn connect_options() -> ConnectOptions {
    let options = ConnectOptions::new()
        .retry_on_initial_connect()
        .max_reconnects(None);
    match connection_name() {
        Some(name) => options.name(name),
        None => options,
    }
}

/// Connects to `servers` (one URL, or several separated by commas, as in `NATS_URL`) with
/// [`connect_options`].
///
/// It returns at once, whether or not a server is reachable: the client connects in the
/// background and keeps trying, and so does the runtime's supervision (its [`Health`] is not
/// ready until the consumers run). Only a malformed server list is an error.
///
/// [`Health`]: crate::Health
pub async fn connect(servers: &str) -> Result<Client, ConnectError> {
    let servers = parse_servers(servers)?;
    connect_options().connect(servers).await
}

/// [`connect`] to the servers listed in `NATS_URL`, or to `nats://127.0.0.1:4222` when it is
/// not set.
pub async fn connect_from_env() -> Result<Client, ConnectError> {
    let servers = std::env::var(NATS_URL).unwrap_or_else(|_| DEFAULT_URL.to_owned());
    connect(&servers).await
}

/// `nats://a:4222, nats://b:4222` as addresses; an empty list or a malformed URL is an error.
fn parse_servers(servers: &str) -> Result<Vec<ServerAddr>, ConnectError> {
    let addrs = servers
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<ServerAddr>().map_err(|e| {
                ConnectError::with_source(
                    ConnectErrorKind::ServerParse,
                    format!("server {s:?}: {e}"),
                )
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    if addrs.is_empty() {
        return Err(ConnectError::with_source(
            ConnectErrorKind::ServerParse,
            format!("no server in {servers:?}"),
        ));
    }
    Ok(addrs)
}

/// The executable's file name, which names the service in the server's reports.
fn connection_name() -> Option<String> {
    let exe = std::env::current_exe().ok()?;
    Some(exe.file_stem()?.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_lists() {
        let addrs = parse_servers("nats://a:4222, nats://b:4223,").unwrap();
        assert_eq!(addrs.len(), 2);
        assert_eq!(addrs[1].port(), 4223);
        assert!(parse_servers(" , ").is_err());
        assert!(parse_servers("nats://a:notaport").is_err());
    }
}
