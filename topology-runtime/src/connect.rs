//! Connecting the way a supervised service needs: the broker may be down when the service
//! starts, and may go away at any time after.
//!
//! [`connect_from_env`] reads the variables the `nats` CLI reads, so that one environment
//! serves the service and an operator's `nats` commands, and this library's inbox prefix:
//!
//! | variable | what it gives |
//! | --- | --- |
//! | `NATS_URL` | the servers, comma-separated (default `nats://127.0.0.1:4222`) |
//! | `NATS_CREDS` | the path of a credentials file (a user JWT and its nkey seed) |
//! | `NATS_NKEY` | the path of a file holding a user nkey seed (`SU...`) |
//! | `NATS_USER`, `NATS_PASSWORD` | a user and its password (both or neither) |
//! | `NATS_TOKEN` | a token |
//! | `NATS_CA` | the path of the PEM file of the CA to trust; TLS is then required |
//! | `NATS_CERT`, `NATS_KEY` | the paths of a client certificate and its key (PEM), for mutual TLS (both or neither); TLS is then required |
//! | `NATS_INBOX_PREFIX` | the prefix of the connection's reply subjects (default `_INBOX`), for permissions that allow replies only under it |
//!
//! At most one of `NATS_CREDS`, `NATS_NKEY`, `NATS_USER` with `NATS_PASSWORD` and `NATS_TOKEN`
//! may be set, and an empty variable counts as unset. (The `nats` CLI also takes a token in
//! `NATS_USER` alone; here that is an error that points to `NATS_TOKEN`.) The files are read
//! and checked before connecting. An error names the variable and what to do, and neither an
//! error nor `Debug` output ever shows a password, a token, a seed or a file's content.
//! [`options_from`] builds the same options from any lookup (a test's map, a configuration
//! file) for a connection of your own.

use async_nats::{Client, ConnectError, ConnectErrorKind, ConnectOptions, ServerAddr};

mod diagnose;
mod env;

pub use diagnose::{ConnectionProblem, ProblemKind, diagnose, no_jetstream};

pub use env::{
    EnvError, EnvErrorKind, EnvOptions, NATS_CA, NATS_CERT, NATS_CREDS, NATS_INBOX_PREFIX,
    NATS_KEY, NATS_NKEY, NATS_PASSWORD, NATS_TOKEN, NATS_USER, options_from,
};

/// The environment variable that lists the servers, comma-separated, as the `nats` CLI reads it.
pub const NATS_URL: &str = "NATS_URL";

/// The servers [`connect_from_env`] uses when `NATS_URL` is not set.
pub const DEFAULT_URL: &str = "nats://127.0.0.1:4222";

/// The options [`connect`] uses: retry the initial connection (a broker that is down at boot
/// is waited for, not a reason to exit), reconnect without limit, and name the connection
/// after the executable (it shows in the server's `connz` and logs). [`options_from`] (and so
/// [`connect_from_env`]) builds on them.
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
    connect_with(connect_options(), servers).await
}

/// [`connect`] with options of your own (start from [`connect_options`] to keep its retry
/// and reconnect behaviour). Use it rather than `options.connect(..)`: it also keeps the
/// server's permission violations, which reach only the connection's event callback (this
/// sets it; one set afterwards replaces it), so that a runtime on the client names the
/// missing permission in its [`Health`](crate::Health).
///
/// ```no_run
/// # async fn f() -> Result<(), nats_topology::async_nats::ConnectError> {
/// let options = nats_topology::connect_options()
///     .user_and_password("billing".into(), std::env::var("BILLING_PASSWORD").unwrap_or_default())
///     .custom_inbox_prefix("_INBOX_billing");
/// let client = nats_topology::connect_with(options, "nats://nats.internal:4222").await?;
/// # drop(client);
/// # Ok(())
/// # }
/// ```
pub async fn connect_with(options: ConnectOptions, servers: &str) -> Result<Client, ConnectError> {
    open(options, parse_servers(servers)?).await
}

/// Connects as [`connect`] does to the servers listed in `NATS_URL` (or
/// `nats://127.0.0.1:4222`), with the credentials, TLS files and inbox prefix of the other
/// variables the [module documentation](self) lists: [`options_from`] the process
/// environment, then [`EnvOptions::connect`].
///
/// A variable that names an unreadable file, or one of a pair without the other, is an error
/// at once, naming the variable and what to do.
pub async fn connect_from_env() -> Result<Client, EnvError> {
    options_from(process_env).await?.connect().await
}

/// A variable of the process environment; one that is not Unicode is read lossily (a path
/// that then names no file is an error naming the variable).
fn process_env(name: &str) -> Option<String> {
    std::env::var_os(name).map(|value| value.to_string_lossy().into_owned())
}

/// Connects with `options` to `servers`: the one place where the connections of this module
/// (and of [`EnvOptions::connect`]) are made.
async fn open(options: ConnectOptions, servers: Vec<ServerAddr>) -> Result<Client, ConnectError> {
    let (options, errors) = crate::server_errors::keep_server_errors(options);
    let client = options.connect(servers.clone()).await?;
    crate::server_errors::register(&client, servers, errors);
    Ok(client)
}

/// What the server denied `client`'s user since it last connected (up to the last 64), as
/// "publish to `SUBJECT`" or "subscribe to `SUBJECT`": the server says a permission violation
/// only on the connection (a request it denies just goes unanswered). Empty for a client not
/// made by [`connect`] or its siblings, whose events this crate does not read.
pub fn denied(client: &Client) -> Vec<String> {
    let Some(errors) = crate::server_errors::of(client) else {
        return Vec::new();
    };
    let mut seen: Vec<String> = Vec::new();
    for violation in errors.subscribe().0 {
        let said = format!("{} to `{}`", violation.action.as_str(), violation.subject);
        if !seen.contains(&said) {
            seen.push(said);
        }
    }
    seen
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
                    format!("server {:?}: {e}", without_userinfo(s)),
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

/// A server URL with its `user:password@` (or `token@`) replaced by `***@`, for messages.
fn without_userinfo(server: &str) -> String {
    let rest_at = server.find("://").map_or(0, |i| i + 3);
    let (scheme, rest) = server.split_at(rest_at);
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{scheme}***{}", &rest[at..]),
        None => server.to_owned(),
    }
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

    #[test]
    fn a_malformed_url_is_shown_without_its_credentials() {
        let error = parse_servers("nats://admin:hunter2@a:notaport").unwrap_err();
        assert!(error.to_string().contains("***@a:notaport"), "{error}");
        assert!(!format!("{error} {error:?}").contains("hunter2"));
        assert_eq!(
            without_userinfo("tls://t0ken@host:4222/x@y"),
            "tls://***@host:4222/x@y"
        );
        assert_eq!(without_userinfo("host:4222"), "host:4222");
    }
}
