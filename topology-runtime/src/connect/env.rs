//! The environment layer of [`connect_from_env`](super::connect_from_env): the variables the
//! `nats` CLI reads (servers, credentials, TLS files) and the inbox prefix, read through a
//! lookup so that tests pass a map instead of changing the process environment.
//!
//! Files are read and checked before connecting: with `retry_on_initial_connect`, a bad file
//! found at connect time would be a client retrying forever in the background. No secret (a
//! password, a token, a seed, a file's content) is ever put into an error or `Debug` output.

use std::fmt;
use std::path::PathBuf;

use async_nats::rustls::pki_types::PrivateKeyDer;
use async_nats::rustls::pki_types::pem::PemObject;
use async_nats::{Client, ConnectError, ConnectOptions, ServerAddr};

mod checks;
mod error;

use checks::*;
pub use error::{EnvError, EnvErrorKind};

use super::{DEFAULT_URL, NATS_URL, connect_options, parse_servers};

/// A credentials file (a user JWT and its nkey seed, as `nsc generate creds` writes it).
pub const NATS_CREDS: &str = "NATS_CREDS";
/// A file holding a user nkey seed (`SU...`); as the `nats` CLI's `--nkey`, a path.
pub const NATS_NKEY: &str = "NATS_NKEY";
/// A user name, with [`NATS_PASSWORD`].
pub const NATS_USER: &str = "NATS_USER";
/// The password of [`NATS_USER`].
pub const NATS_PASSWORD: &str = "NATS_PASSWORD";
/// A token.
pub const NATS_TOKEN: &str = "NATS_TOKEN";
/// A PEM file of the CA certificates to trust; TLS is then required.
pub const NATS_CA: &str = "NATS_CA";
/// A PEM file of the client certificate (mutual TLS), with [`NATS_KEY`]; TLS is then required.
pub const NATS_CERT: &str = "NATS_CERT";
/// A PEM file of the client certificate's private key, with [`NATS_CERT`].
pub const NATS_KEY: &str = "NATS_KEY";
/// The prefix of the connection's reply subjects (`_INBOX` by default); a service whose
/// permissions allow replies only under its own prefix connects with it.
pub const NATS_INBOX_PREFIX: &str = "NATS_INBOX_PREFIX";

/// The ways of authenticating, of which at most one may be set.
const AUTH_CHOICES: &str = "NATS_CREDS, NATS_NKEY, NATS_USER with NATS_PASSWORD, or NATS_TOKEN";

/// The servers and the options the environment describes, built by [`options_from`] on
/// [`connect_options`]; [`connect`](Self::connect) them, or change the options first.
///
/// Its `Debug` says what was applied (the servers, the user's name, the files) and never a
/// secret.
///
/// ```no_run
/// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
/// use topology_runtime::connect::options_from;
///
/// let mut env = options_from(|name| std::env::var(name).ok()).await?;
/// println!("connecting with {env:?}");
/// env.options = env.options.ping_interval(std::time::Duration::from_secs(10));
/// let client = env.connect().await?;
/// # drop(client);
/// # Ok(())
/// # }
/// ```
pub struct EnvOptions {
    /// The servers (`NATS_URL`, else `nats://127.0.0.1:4222`).
    pub servers: Vec<ServerAddr>,
    /// [`connect_options`] with the credentials, TLS files and inbox prefix of the
    /// environment.
    pub options: ConnectOptions,
    applied: Applied,
}

impl EnvOptions {
    /// Connects with the options to the servers. As [`connect`](super::connect), it returns at
    /// once: the client connects in the background and keeps trying.
    pub async fn connect(self) -> Result<Client, EnvError> {
        super::open(self.options, self.servers)
            .await
            .map_err(|e: ConnectError| EnvError {
                kind: EnvErrorKind::Connect,
                variable: None,
                message: "connecting to the servers of NATS_URL".to_owned(),
                source: Some(Box::new(e)),
            })
    }
}

impl fmt::Debug for EnvOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let servers: Vec<String> = self.servers.iter().map(redacted).collect();
        let applied = &self.applied;
        f.debug_struct("EnvOptions")
            .field("servers", &servers)
            .field("auth", &applied.auth)
            .field("ca", &applied.ca)
            .field("client_certificate", &applied.client_certificate)
            .field("inbox_prefix", &applied.inbox_prefix)
            .finish()
    }
}

/// `scheme://host:port`, without the user and password a URL may carry.
fn redacted(server: &ServerAddr) -> String {
    let credentials = if server.has_user_pass() {
        " (with credentials)"
    } else {
        ""
    };
    format!(
        "{}://{}:{}{credentials}",
        server.scheme(),
        server.host(),
        server.port()
    )
}

/// What the variables set, without a secret: for `Debug`.
struct Applied {
    auth: Auth,
    ca: Option<PathBuf>,
    client_certificate: Option<(PathBuf, PathBuf)>,
    inbox_prefix: Option<String>,
}

/// How the connection authenticates. The user's name is shown; passwords, tokens and seeds
/// are not even kept.
enum Auth {
    None,
    Creds(PathBuf),
    Nkey(PathBuf),
    User(String),
    Token,
}

impl fmt::Debug for Auth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Auth::None => f.write_str("none"),
            Auth::Creds(path) => write!(f, "credentials file {} (NATS_CREDS)", path.display()),
            Auth::Nkey(path) => write!(f, "nkey seed file {} (NATS_NKEY)", path.display()),
            Auth::User(user) => write!(f, "user {user:?} with a password (NATS_USER)"),
            Auth::Token => f.write_str("a token (NATS_TOKEN)"),
        }
    }
}

/// The variables read, empty values counting as unset.
struct Vars {
    url: Option<String>,
    creds: Option<String>,
    nkey: Option<String>,
    user: Option<String>,
    password: Option<String>,
    token: Option<String>,
    ca: Option<String>,
    cert: Option<String>,
    key: Option<String>,
    inbox_prefix: Option<String>,
}

impl Vars {
    fn read(lookup: impl Fn(&str) -> Option<String>) -> Vars {
        let get = |name: &str| lookup(name).filter(|value| !value.is_empty());
        Vars {
            url: get(NATS_URL),
            creds: get(NATS_CREDS),
            nkey: get(NATS_NKEY),
            user: get(NATS_USER),
            password: get(NATS_PASSWORD),
            token: get(NATS_TOKEN),
            ca: get(NATS_CA),
            cert: get(NATS_CERT),
            key: get(NATS_KEY),
            inbox_prefix: get(NATS_INBOX_PREFIX),
        }
    }
}

/// The servers and [`connect_options`] with what the variables that `lookup` returns give:
/// `NATS_URL`, `NATS_CREDS`, `NATS_NKEY`, `NATS_USER` and `NATS_PASSWORD`, `NATS_TOKEN`,
/// `NATS_CA`, `NATS_CERT` and `NATS_KEY`, `NATS_INBOX_PREFIX` (see the [module
/// documentation](super)). An empty value counts as unset.
///
/// The files are read and checked here (a credentials file must parse, a seed file must hold
/// a user seed, the PEM files a certificate or a key), so that a bad path is an error now
/// rather than a client that retries in the background forever. Every error names the
/// variable and what to do, and never contains a secret.
///
/// `lookup` is how tests give variables without changing the process environment (which is
/// shared by the test threads); [`connect_from_env`](super::connect_from_env) passes
/// `std::env::var`.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), topology_runtime::connect::EnvError> {
/// use std::collections::HashMap;
/// use topology_runtime::connect::options_from;
///
/// let vars = HashMap::from([
///     ("NATS_URL", "nats://a:4222,nats://b:4222"),
///     ("NATS_USER", "billing"),
///     ("NATS_PASSWORD", "s3cret"),
///     ("NATS_INBOX_PREFIX", "_INBOX_billing"),
/// ]);
/// let env = options_from(|name| vars.get(name).map(|v| v.to_string())).await?;
/// assert_eq!(env.servers.len(), 2);
/// assert!(!format!("{env:?}").contains("s3cret"));
/// # Ok(())
/// # }
/// ```
pub async fn options_from(lookup: impl Fn(&str) -> Option<String>) -> Result<EnvOptions, EnvError> {
    let vars = Vars::read(lookup);
    let url = vars.url.as_deref().unwrap_or(DEFAULT_URL);
    let servers = parse_servers(url).map_err(|e| {
        let detail = e
            .to_string()
            .strip_prefix("failed to parse server or server list: ")
            .map(str::to_owned)
            .unwrap_or_else(|| e.to_string());
        EnvError::new(
            EnvErrorKind::Invalid,
            NATS_URL,
            format!(
                "NATS_URL is not a list of servers ({detail}); set it to one URL or several \
                 separated by commas, for example `nats://a:4222,nats://b:4222`"
            ),
        )
    })?;
    let auth = choose_auth(&vars)?;
    let client_certificate = match (&vars.cert, &vars.key) {
        (Some(cert), Some(key)) => Some((cert.clone(), key.clone())),
        (Some(_), None) => {
            return Err(EnvError::new(
                EnvErrorKind::Incomplete,
                NATS_CERT,
                "NATS_CERT is set but NATS_KEY is not: a client certificate needs its private \
                 key; set NATS_KEY to the key's PEM file, or unset NATS_CERT",
            ));
        }
        (None, Some(_)) => {
            return Err(EnvError::new(
                EnvErrorKind::Incomplete,
                NATS_KEY,
                "NATS_KEY is set but NATS_CERT is not: set NATS_CERT to the client \
                 certificate's PEM file, or unset NATS_KEY",
            ));
        }
        (None, None) => None,
    };
    if let Some(prefix) = &vars.inbox_prefix {
        check_inbox_prefix(prefix)?;
    }
    for (variable, value) in [
        (NATS_CREDS, &vars.creds),
        (NATS_NKEY, &vars.nkey),
        (NATS_CA, &vars.ca),
        (NATS_CERT, &vars.cert),
        (NATS_KEY, &vars.key),
    ] {
        if let Some(value) = value {
            check_is_a_path(variable, value)?;
        }
    }

    let mut options = connect_options();
    let applied_auth = match auth {
        Chosen::None => Auth::None,
        Chosen::Creds(path) => {
            let text = read_text(NATS_CREDS, &path).await?;
            options = options.credentials(&text).map_err(|_| {
                EnvError::new(
                    EnvErrorKind::Invalid,
                    NATS_CREDS,
                    format!(
                        "NATS_CREDS is set to `{path}`, which is not a credentials file: it \
                         must hold a user JWT and the user's nkey seed, as `nsc generate \
                         creds` writes them"
                    ),
                )
            })?;
            Auth::Creds(path.into())
        }
        Chosen::Nkey(path) => {
            let text = read_text(NATS_NKEY, &path).await?;
            let seed = user_seed(&text).ok_or_else(|| {
                EnvError::new(
                    EnvErrorKind::Invalid,
                    NATS_NKEY,
                    format!(
                        "NATS_NKEY is set to `{path}`, which holds no valid user nkey seed: \
                         the file must hold the seed (a line starting with `SU`, as `nk -gen \
                         user` writes it)"
                    ),
                )
            })?;
            options = options.nkey(seed);
            Auth::Nkey(path.into())
        }
        Chosen::User(user, password) => {
            options = options.user_and_password(user.clone(), password);
            Auth::User(user)
        }
        Chosen::Token(token) => {
            options = options.token(token);
            Auth::Token
        }
    };
    let ca = match vars.ca {
        Some(ca) => {
            let pem = read_file(NATS_CA, &ca).await?;
            if !holds_certificates(&pem) {
                return Err(not_pem(NATS_CA, &ca, "a PEM certificate (the CA's)"));
            }
            options = options
                .add_root_certificates(ca.clone().into())
                .require_tls(true);
            Some(PathBuf::from(ca))
        }
        None => None,
    };
    let client_certificate = match client_certificate {
        Some((cert, key)) => {
            if !holds_certificates(&read_file(NATS_CERT, &cert).await?) {
                return Err(not_pem(NATS_CERT, &cert, "a PEM certificate"));
            }
            if PrivateKeyDer::from_pem_slice(&read_file(NATS_KEY, &key).await?).is_err() {
                return Err(not_pem(NATS_KEY, &key, "a PEM private key"));
            }
            options = options
                .add_client_certificate(cert.clone().into(), key.clone().into())
                .require_tls(true);
            Some((cert.into(), key.into()))
        }
        None => None,
    };
    if let Some(prefix) = &vars.inbox_prefix {
        options = options.custom_inbox_prefix(prefix);
    }
    Ok(EnvOptions {
        servers,
        options,
        applied: Applied {
            auth: applied_auth,
            ca,
            client_certificate,
            inbox_prefix: vars.inbox_prefix,
        },
    })
}

/// The one way of authenticating the variables choose, its secrets not yet read.
enum Chosen {
    None,
    Creds(String),
    Nkey(String),
    User(String, String),
    Token(String),
}

/// The way of authenticating: none or one of them; a user without a password (or the
/// reverse) is incomplete, and two ways are a conflict.
fn choose_auth(vars: &Vars) -> Result<Chosen, EnvError> {
    let user = match (&vars.user, &vars.password) {
        (Some(user), Some(password)) => Some((user.clone(), password.clone())),
        (Some(_), None) => {
            return Err(EnvError::new(
                EnvErrorKind::Incomplete,
                NATS_USER,
                "NATS_USER is set but NATS_PASSWORD is not: set NATS_PASSWORD to the user's \
                 password; for a token, set NATS_TOKEN instead (the `nats` CLI also takes a \
                 token in NATS_USER alone; this library does not)",
            ));
        }
        (None, Some(_)) => {
            return Err(EnvError::new(
                EnvErrorKind::Incomplete,
                NATS_PASSWORD,
                "NATS_PASSWORD is set but NATS_USER is not: set NATS_USER to the user's name, \
                 or unset NATS_PASSWORD",
            ));
        }
        (None, None) => None,
    };
    let mut chosen = Vec::new();
    if let Some(path) = &vars.creds {
        chosen.push((NATS_CREDS, Chosen::Creds(path.clone())));
    }
    if let Some(path) = &vars.nkey {
        chosen.push((NATS_NKEY, Chosen::Nkey(path.clone())));
    }
    if let Some((user, password)) = user {
        chosen.push((NATS_USER, Chosen::User(user, password)));
    }
    if let Some(token) = &vars.token {
        chosen.push((NATS_TOKEN, Chosen::Token(token.clone())));
    }
    if chosen.len() > 1 {
        let names: Vec<&str> = chosen.iter().map(|(name, _)| *name).collect();
        return Err(EnvError::new(
            EnvErrorKind::Conflict,
            names[0],
            format!(
                "{} are set, but a connection authenticates one way: set only one of \
                 {AUTH_CHOICES}",
                names.join(" and ")
            ),
        ));
    }
    Ok(chosen
        .pop()
        .map(|(_, chosen)| chosen)
        .unwrap_or(Chosen::None))
}

#[cfg(test)]
mod tests;
