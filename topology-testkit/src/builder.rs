//! [`ServerBuilder`]: a server or a cluster with configuration of the test's own (users,
//! permissions, accounts), environment variables, TLS, and the credentials the readiness probe
//! connects with.

use std::ffi::OsString;
use std::marker::PhantomData;
use std::sync::Arc;

use crate::error::TestkitError;
use crate::tls::TlsMode;
use crate::{NatsCluster, NatsServer};

/// What a server is started with besides its ports and store directory; shared by the nodes
/// of a cluster and kept across restarts.
#[derive(Clone, Default)]
pub(crate) struct Setup {
    /// Configuration text appended verbatim to the server's configuration file.
    pub(crate) config: String,
    /// Environment variables of the server process (the configuration may read them as
    /// `$NAME`).
    pub(crate) env: Vec<(OsString, OsString)>,
    /// How the readiness probe authenticates.
    pub(crate) probe: ProbeAuth,
    /// TLS for client connections.
    pub(crate) tls: Option<TlsMode>,
}

impl Setup {
    /// Whether the server needs a configuration file (`-c`).
    pub(crate) fn needs_config_file(&self) -> bool {
        !self.config.is_empty() || self.tls.is_some()
    }
}

/// The credentials of the readiness probe's connection.
#[derive(Clone, Default)]
pub(crate) enum ProbeAuth {
    /// No credentials (a server without authorization).
    #[default]
    None,
    UserPassword(String, String),
    Token(String),
    /// An nkey seed (`SU...`).
    Nkey(String),
    /// The text of a credentials file (a user JWT and its seed), for an operator-mode server.
    Credentials(String),
}

impl ProbeAuth {
    /// `options` with these credentials; an error if credentials text does not parse.
    pub(crate) fn apply(
        &self,
        options: async_nats::ConnectOptions,
    ) -> Result<async_nats::ConnectOptions, String> {
        Ok(match self {
            ProbeAuth::None => options,
            ProbeAuth::UserPassword(user, password) => {
                options.user_and_password(user.clone(), password.clone())
            }
            ProbeAuth::Token(token) => options.token(token.clone()),
            ProbeAuth::Nkey(seed) => options.nkey(seed.clone()),
            ProbeAuth::Credentials(text) => options
                .credentials(text)
                .map_err(|e| format!("the probe's credentials (`probe_credentials`): {e}"))?,
        })
    }
}

/// Starts a [`NatsServer`] ([`NatsServer::builder`]) or a [`NatsCluster`]
/// ([`NatsCluster::builder`]) with configuration of the test's own: text included verbatim in
/// the server's configuration file (users and their permissions, accounts), environment
/// variables of the server process, TLS with certificates generated for the test, and the
/// credentials the readiness probe connects with.
///
/// The server still runs JetStream on a free loopback port with its own store directory, as
/// [`NatsServer::start`] does (the command-line flags win over the file for the address, the
/// ports, the store directory and the server name); [`restart`](NatsServer::restart) keeps
/// everything set here.
///
/// Readiness is probed as always (the `INFO` line, then `$JS.API.INFO` answered without an
/// error), over TLS when the server requires it, with the credentials set by
/// [`probe_user`](Self::probe_user), [`probe_token`](Self::probe_token),
/// [`probe_nkey`](Self::probe_nkey) or [`probe_credentials`](Self::probe_credentials). The probe's user must be allowed to publish to
/// `$JS.API.INFO` and to subscribe to `_INBOX.>`, in an account with JetStream (the global
/// account under a plain `authorization` block; `jetstream: enabled` in an `accounts` entry).
///
/// ```no_run
/// use nats_topology_testkit::NatsServer;
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let server = NatsServer::builder()
///     .config(
///         r#"authorization {
///              users = [
///                { user: admin, password: $ADMIN_PASSWORD }
///                { user: reader, password: pw, permissions: { subscribe: "orders.>" } }
///              ]
///            }"#,
///     )
///     .env("ADMIN_PASSWORD", "s3cret")
///     .probe_user("admin", "s3cret")
///     .start()
///     .await?;
/// let admin = async_nats::ConnectOptions::new()
///     .user_and_password("admin".into(), "s3cret".into())
///     .connect(server.url())
///     .await?;
/// # drop(admin);
/// # Ok(())
/// # }
/// ```
pub struct ServerBuilder<T> {
    setup: Setup,
    _starts: PhantomData<fn() -> T>,
}

impl NatsServer {
    /// A [`ServerBuilder`] for one server with configuration of the test's own.
    ///
    /// ```no_run
    /// use nats_topology_testkit::NatsServer;
    ///
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// let server = NatsServer::builder()
    ///     .config("authorization { token: $TOKEN }")
    ///     .env("TOKEN", "t0ken")
    ///     .probe_token("t0ken")
    ///     .start()
    ///     .await?;
    /// # drop(server);
    /// # Ok(())
    /// # }
    /// ```
    pub fn builder() -> ServerBuilder<NatsServer> {
        ServerBuilder::new()
    }
}

impl NatsCluster {
    /// A [`ServerBuilder`] for a three-node cluster whose every node has the same configuration
    /// of the test's own (and, with TLS, certificates from one CA).
    ///
    /// ```no_run
    /// use nats_topology_testkit::NatsCluster;
    ///
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// let cluster = NatsCluster::builder()
    ///     .config("authorization { user: admin, password: pw }")
    ///     .probe_user("admin", "pw")
    ///     .start()
    ///     .await?;
    /// let client = async_nats::ConnectOptions::new()
    ///     .user_and_password("admin".into(), "pw".into())
    ///     .connect(cluster.server_addrs())
    ///     .await?;
    /// # drop(client);
    /// # Ok(())
    /// # }
    /// ```
    pub fn builder() -> ServerBuilder<NatsCluster> {
        ServerBuilder::new()
    }
}

impl<T> ServerBuilder<T> {
    fn new() -> Self {
        ServerBuilder {
            setup: Setup::default(),
            _starts: PhantomData,
        }
    }

    /// Appends `text` verbatim to the server's configuration file (each call adds a line
    /// break after its text): an `authorization { .. }` block with users and their
    /// `permissions`, `accounts { .. }`, limits. It may read the variables given with
    /// [`env`](Self::env) as `$NAME`.
    ///
    /// ```no_run
    /// use nats_topology_testkit::NatsServer;
    ///
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// let server = NatsServer::builder()
    ///     .config("max_payload: 65536")
    ///     .start()
    ///     .await?;
    /// # drop(server);
    /// # Ok(())
    /// # }
    /// ```
    pub fn config(mut self, text: impl Into<String>) -> Self {
        self.setup.config.push_str(&text.into());
        self.setup.config.push('\n');
        self
    }

    /// Sets an environment variable of the server process (on top of the test's own
    /// environment, which it inherits); the configuration reads it as `$NAME`.
    ///
    /// ```no_run
    /// use nats_topology_testkit::NatsServer;
    ///
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// let server = NatsServer::builder()
    ///     .config("authorization { user: app, password: $APP_PASSWORD }")
    ///     .env("APP_PASSWORD", "pw")
    ///     .probe_user("app", "pw")
    ///     .start()
    ///     .await?;
    /// # drop(server);
    /// # Ok(())
    /// # }
    /// ```
    pub fn env(mut self, name: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.setup.env.push((name.into(), value.into()));
        self
    }

    /// The readiness probe connects as `user` with `password` (replacing any other probe
    /// credentials).
    ///
    /// ```no_run
    /// use nats_topology_testkit::NatsServer;
    ///
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// let server = NatsServer::builder()
    ///     .config("authorization { user: admin, password: pw }")
    ///     .probe_user("admin", "pw")
    ///     .start()
    ///     .await?;
    /// # drop(server);
    /// # Ok(())
    /// # }
    /// ```
    pub fn probe_user(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.setup.probe = ProbeAuth::UserPassword(user.into(), password.into());
        self
    }

    /// The readiness probe connects with `token` (replacing any other probe credentials).
    ///
    /// ```no_run
    /// use nats_topology_testkit::NatsServer;
    ///
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// let server = NatsServer::builder()
    ///     .config("authorization { token: t0ken }")
    ///     .probe_token("t0ken")
    ///     .start()
    ///     .await?;
    /// # drop(server);
    /// # Ok(())
    /// # }
    /// ```
    pub fn probe_token(mut self, token: impl Into<String>) -> Self {
        self.setup.probe = ProbeAuth::Token(token.into());
        self
    }

    /// The readiness probe authenticates with the nkey whose seed (`SU...`) is `seed`
    /// (replacing any other probe credentials); the configuration lists its public key
    /// (`U...`), as in `authorization { users = [ { nkey: U... } ] }`.
    ///
    /// ```no_run
    /// use nats_topology_testkit::NatsServer;
    ///
    /// # async fn demo(seed: String, public_key: String) -> Result<(), Box<dyn std::error::Error>> {
    /// let server = NatsServer::builder()
    ///     .config(format!("authorization {{ users = [ {{ nkey: {public_key} }} ] }}"))
    ///     .probe_nkey(seed)
    ///     .start()
    ///     .await?;
    /// # drop(server);
    /// # Ok(())
    /// # }
    /// ```
    pub fn probe_nkey(mut self, seed: impl Into<String>) -> Self {
        self.setup.probe = ProbeAuth::Nkey(seed.into());
        self
    }

    /// The readiness probe authenticates with the user JWT and nkey seed of `creds`, the text
    /// of a credentials file (replacing any other probe credentials): for a server in operator
    /// mode (`operator`, `resolver: MEMORY` and `resolver_preload` in the configuration).
    ///
    /// ```no_run
    /// use nats_topology_testkit::NatsServer;
    ///
    /// # async fn demo(operator_config: String) -> Result<(), Box<dyn std::error::Error>> {
    /// let creds = std::fs::read_to_string("admin.creds")?;
    /// let server = NatsServer::builder()
    ///     .config(operator_config)
    ///     .probe_credentials(creds)
    ///     .start()
    ///     .await?;
    /// # drop(server);
    /// # Ok(())
    /// # }
    /// ```
    pub fn probe_credentials(mut self, creds: impl Into<String>) -> Self {
        self.setup.probe = ProbeAuth::Credentials(creds.into());
        self
    }

    /// Clients must connect over TLS (a plain connection is refused); the server presents a
    /// certificate for `127.0.0.1` and `localhost` from a CA generated for this server, whose
    /// files [`NatsServer::tls`] and [`NatsCluster::tls`] name. Client certificates are not
    /// asked for; see [`mutual_tls`](Self::mutual_tls). Client URLs become
    /// `tls://127.0.0.1:<port>`. A cluster's routes stay plain.
    ///
    /// ```no_run
    /// use nats_topology_testkit::NatsServer;
    ///
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// let server = NatsServer::builder().tls().start().await?;
    /// let ca = server.tls().expect("started with TLS").ca().to_path_buf();
    /// let client = async_nats::ConnectOptions::new()
    ///     .add_root_certificates(ca)
    ///     .connect(server.url())
    ///     .await?;
    /// # drop(client);
    /// # Ok(())
    /// # }
    /// ```
    pub fn tls(mut self) -> Self {
        self.setup.tls = Some(TlsMode::Server);
        self
    }

    /// [`tls`](Self::tls), and clients must also present a certificate signed by the CA
    /// (`verify: true`): [`TlsFiles::client_cert`](crate::TlsFiles::client_cert) and
    /// [`TlsFiles::client_key`](crate::TlsFiles::client_key).
    ///
    /// ```no_run
    /// use nats_topology_testkit::NatsServer;
    ///
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// let server = NatsServer::builder().mutual_tls().start().await?;
    /// let tls = server.tls().expect("started with TLS");
    /// let client = tls.connect_options().connect(server.url()).await?;
    /// # drop(client);
    /// # Ok(())
    /// # }
    /// ```
    pub fn mutual_tls(mut self) -> Self {
        self.setup.tls = Some(TlsMode::Mutual);
        self
    }
}

impl ServerBuilder<NatsServer> {
    /// Starts the server as [`NatsServer::start`] does, with this builder's configuration, and
    /// waits (up to 20 s) until it is ready.
    pub async fn start(self) -> Result<NatsServer, TestkitError> {
        NatsServer::start_setup(Arc::new(self.setup)).await
    }
}

impl ServerBuilder<NatsCluster> {
    /// Starts the three nodes as [`NatsCluster::start`] does, each with this builder's
    /// configuration, and waits (up to 30 s) until the meta group has formed with all three.
    pub async fn start(self) -> Result<NatsCluster, TestkitError> {
        NatsCluster::start_setup(Arc::new(self.setup), false).await
    }

    /// Starts the three nodes behind links as [`NatsCluster::start_linked`] does, each with
    /// this builder's configuration.
    pub async fn start_linked(self) -> Result<NatsCluster, TestkitError> {
        NatsCluster::start_setup(Arc::new(self.setup), true).await
    }
}

/// Shows what is configured; the probe's credentials and the variables' values are left out.
impl<T> std::fmt::Debug for ServerBuilder<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let probe = match &self.setup.probe {
            ProbeAuth::None => "none".to_owned(),
            ProbeAuth::UserPassword(user, _) => format!("user {user:?} with a password"),
            ProbeAuth::Token(_) => "a token".to_owned(),
            ProbeAuth::Nkey(_) => "an nkey".to_owned(),
            ProbeAuth::Credentials(_) => "a credentials file's text".to_owned(),
        };
        let env: Vec<_> = self.setup.env.iter().map(|(name, _)| name).collect();
        f.debug_struct("ServerBuilder")
            .field("config", &self.setup.config)
            .field("env", &env)
            .field("probe", &probe)
            .field("tls", &self.setup.tls)
            .finish()
    }
}
