//! A command line for operators in every application binary (feature `cli`): one line at the
//! top of `main` gives it `plan`, `inspect`, `export`, `provision` and `health` subcommands
//! on the topology the binary declares.
//!
//! ```no_run
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     // `my-service plan`, `my-service provision`, ...: run the subcommand and exit.
//!     // With no subcommand (or arguments of the application's own), it returns.
//!     nats_topology::cli::run_or_continue().await;
//!
//!     let client = nats_topology::connect_from_env().await?;
//!     nats_topology::Runtime::builder(client).build()?.run_until_signal().await?;
//!     Ok(())
//! }
//! ```
//!
//! | subcommand | what it does | exit status |
//! | --- | --- | --- |
//! | `plan` | what provisioning would do (create, update which fields, conflicts), changing nothing; then each endpoint (service@version, subject, queue group, concurrency) and core subscription (queue group or each_instance), "served, nothing to provision" | 0; 1 on a conflict or an error |
//! | `inspect` | each queue consumer on the server: exists, consumed by anyone, pending, ack floor; each declared service's live instances (`$SRV.PING`) with their requests, errors and average processing time (`$SRV.STATS`), or "no instance answers" | 0; 1 on an error |
//! | `export [--asyncapi] [--nats-json] [--permissions] DIR` | writes the AsyncAPI document (endpoints as request/reply operations, core subscriptions as receive operations), the stream and consumer JSON and/or the service user's NATS permissions (endpoints' `subject queue` entries, `$SRV` subjects, `allow_responses`) into `DIR`, without a server (all three when no flag is given) | 0; 1 on an error |
//! | `provision` | provisions every stream and queue consumer, then exits (an init job) | 0 when done; 1 with the precise provisioning error |
//! | `health` | provisions nothing; prints each declared stream and queue consumer as the server has it | 0 when every stream exists (external ones covering what is consumed) and every queue consumer exists and is being consumed; 1 otherwise |
//!
//! The subcommands that talk to a server take `--server URL[,URL..]` (default: `NATS_URL`,
//! else `nats://127.0.0.1:4222`), `--timeout SECONDS` (how long requests are retried
//! while the server is unreachable or electing leaders; default 60), and `--domain NAME` or
//! `--api-prefix PREFIX` for a JetStream other than the connection's own (as
//! [`RuntimeBuilder::domain`](crate::RuntimeBuilder::domain) and
//! [`api_prefix`](crate::RuntimeBuilder::api_prefix); not both). They connect with the
//! credentials, TLS files and inbox prefix of the environment (`NATS_CREDS`, `NATS_USER` and
//! `NATS_PASSWORD`, `NATS_INBOX_PREFIX`, ...), as [`connect_from_env`](crate::connect_from_env)
//! reads them.
//!
//! `export --permissions` writes `permissions.conf`, a nats-server `authorization` block with
//! one user, and `permissions.json`, the same lists in a user JWT's `pub`/`sub` shape
//! ([`export::permissions`]). It takes `--role` `owner`, `bind-only` or `operator` (default
//! `owner`), `--service NAME` (the user's name; default: the application's, as in
//! [`Cli::info`]), `--inbox-prefix PREFIX` (default `_INBOX_<service>`), `--publishes SUBJECT`
//! (repeatable: a subject the service publishes to that no handler declares with
//! `publishes`), `--publish-into-owned-streams` (every subject of the streams the service
//! owns, declared or not: [`Role::publish_into_owned_streams`]), and `--domain` or
//! `--api-prefix` as above. The block's password is `$<SERVICE>_PASSWORD` (the name
//! uppercased, any character but a letter or a digit as `_`), which nats-server reads from its
//! environment: the file holds no secret.
//!
//! A subcommand is recognised only as the first argument, so the application's own flags
//! keep working: `my-service --port 8080` falls through to the application. The exceptions are
//! `help`, `--help` and `-h` as the first argument: they print the subcommands and exit 0
//! instead of starting the service (`my-service help plan` describes one of them).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

mod health;

use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{Parser, Subcommand};
use topology_runtime::connect::{DEFAULT_URL, NATS_URL};

use crate::export::{self, Access, ApiInfo, Permissions, Role};
use crate::{EnvError, RetryPolicy, Runtime, Topology, async_nats, options_from};

/// The subcommands [`Cli`] recognises as a first argument.
pub const SUBCOMMANDS: [&str; 5] = ["plan", "inspect", "export", "provision", "health"];

/// The first arguments that print the subcommands and exit 0 rather than start the service.
const HELP: [&str; 3] = ["help", "--help", "-h"];

/// Runs the subcommand given on the command line against the registered topology and exits
/// the process with its status; returns when the first argument is not a subcommand.
/// The same as `Cli::new().run_or_continue()`.
pub async fn run_or_continue() {
    Cli::new().run_or_continue().await
}

/// The operator command line of an application: see the [module documentation](self).
///
/// ```
/// # #[tokio::main] async fn main() {
/// use nats_topology::cli::Cli;
/// use nats_topology::export::ApiInfo;
///
/// let cli = Cli::new().info(ApiInfo::new("my-service", "1.2.0"));
/// // Not a subcommand: the application's own arguments.
/// assert!(cli.run(["my-service", "--port", "8080"]).await.is_none());
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Cli {
    topology: Option<Topology>,
    info: ApiInfo,
    retry: RetryPolicy,
}

impl Default for Cli {
    fn default() -> Self {
        Cli::new()
    }
}

impl Cli {
    /// On the topology the macros registered; the AsyncAPI title is the executable's name.
    pub fn new() -> Self {
        let title = std::env::current_exe()
            .ok()
            .and_then(|exe| Some(exe.file_stem()?.to_string_lossy().into_owned()))
            .unwrap_or_else(|| "application".to_owned());
        Cli {
            topology: None,
            info: ApiInfo::new(title, "0.0.0"),
            retry: RetryPolicy::default(),
        }
    }

    /// On this topology instead of the registered one.
    pub fn topology(mut self, topology: Topology) -> Self {
        self.topology = Some(topology);
        self
    }

    /// The AsyncAPI document's title and version (`--title`/`--api-version` override them).
    pub fn info(mut self, info: ApiInfo) -> Self {
        self.info = info;
        self
    }

    /// The retry policy of requests to the server (`--timeout` overrides its deadline).
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    /// Runs the subcommand on the process's command line, then exits with its status;
    /// returns when there is none.
    pub async fn run_or_continue(self) {
        if let Some(code) = self.status(std::env::args_os()).await {
            use std::io::Write;
            let _ = std::io::stdout().flush();
            std::process::exit(code);
        }
    }

    /// Runs the subcommand in `args` (the program name first) and returns its status
    /// (usage errors print clap's message and return 2; `help`, `--help` and `-h`, first or
    /// after a subcommand, print the help and return 0); `None` when the first argument is
    /// neither a subcommand nor a request for help.
    pub async fn run<I, T>(self, args: I) -> Option<ExitCode>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString>,
    {
        self.status(args)
            .await
            .map(|code| ExitCode::from(code as u8))
    }

    async fn status<I, T>(self, args: I) -> Option<i32>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString>,
    {
        let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
        let first = args.get(1)?.to_str()?;
        if !SUBCOMMANDS.contains(&first) && !HELP.contains(&first) {
            return None;
        }
        let parsed = match Args::try_parse_from(&args) {
            Ok(parsed) => parsed,
            Err(e) => {
                let _ = e.print();
                return Some(e.exit_code());
            }
        };
        Some(match self.execute(parsed.command).await {
            Ok(true) => 0,
            Ok(false) => 1,
            Err(message) => {
                eprintln!("error: {message}");
                1
            }
        })
    }

    /// Whether the subcommand succeeded; `Err` with what to print.
    async fn execute(self, command: Command) -> Result<bool, String> {
        let topology = self.topology.unwrap_or_else(Topology::from_registry);
        let server = match command {
            Command::Export(args) => {
                let mut info = self.info;
                // The user is named after the application, whatever the document's title.
                let application = info.title.clone();
                if let Some(title) = &args.title {
                    info.title = title.clone();
                }
                if let Some(version) = &args.api_version {
                    info.version = version.clone();
                }
                return export_to(&topology, &info, &application, &args);
            }
            Command::Plan(ref s)
            | Command::Inspect(ref s)
            | Command::Provision(ref s)
            | Command::Health(ref s) => s.clone(),
        };
        let client = connect(&server.server)
            .await
            .map_err(|e| format!("cannot connect to {:?}: {e}", server.server))?;
        let local_api = server.jetstream.domain.is_none() && server.jetstream.api_prefix.is_none();
        reachable(&client, local_api).await?;
        let retry = RetryPolicy {
            deadline: Duration::from_secs_f64(server.timeout),
            ..self.retry
        };
        let mut builder = Runtime::builder(client.clone())
            .topology(topology)
            .retry(retry);
        if let Some(domain) = &server.jetstream.domain {
            builder = builder.domain(domain);
        }
        if let Some(prefix) = &server.jetstream.api_prefix {
            builder = builder.api_prefix(prefix);
        }
        let runtime = builder.build().map_err(|e| e.to_string())?;
        match command {
            Command::Plan(_) => {
                let plan = runtime.plan().await.map_err(|e| e.to_string())?;
                print!("{plan}");
                if plan.fails() {
                    eprintln!("error: provisioning would fail on the conflicts or refusals above");
                }
                Ok(!plan.fails())
            }
            Command::Inspect(_) => {
                let inspection = runtime.inspect().await.map_err(|e| e.to_string())?;
                print!("{inspection}");
                Ok(allowed(&client))
            }
            Command::Provision(_) => {
                let report = runtime.provision().await.map_err(|e| e.to_string())?;
                let topology = runtime.topology();
                let nats = export::nats_json(topology);
                let buckets = topology.buckets().iter().filter(|b| !b.external).count();
                let buckets = match buckets {
                    0 => String::new(),
                    n => format!(", {n} bucket(s)"),
                };
                println!(
                    "provisioned {} stream(s){buckets} and {} queue consumer(s) in {:?} ({} attempt(s))",
                    nats.streams.len()
                        - nats
                            .streams
                            .iter()
                            .filter(|s| topology.bucket_of_stream(&s.config.name).is_some())
                            .count(),
                    nats.consumers.len(),
                    report.elapsed,
                    report.attempts
                );
                Ok(true)
            }
            Command::Health(_) => {
                let report = health::read(&runtime).await?;
                print!("{report}");
                Ok(allowed(&client) && report.healthy())
            }
            Command::Export(_) => unreachable!("handled above"),
        }
    }
}

/// Connects to `servers` (`--server`, which clap reads from `NATS_URL` when not given) with
/// the credentials, TLS files and inbox prefix of the other variables
/// [`connect_from_env`](crate::connect_from_env) reads: one environment serves an operator's
/// `nats` commands and these.
/// Whether the server denied nothing to the command's user; what it denied is said on stderr
/// (a denied request only goes unanswered, so what the command printed may be incomplete).
fn allowed(client: &async_nats::Client) -> bool {
    let denied = crate::denied(client);
    if denied.is_empty() {
        return true;
    }
    eprintln!(
        "error: the server denied this user {}: what is printed above may be incomplete; run \
         it with credentials that allow it (`export --permissions --role operator` writes them)",
        denied.join(", ")
    );
    false
}

/// How long a command waits for its connection before it says why there is none.
const CONNECT_WAIT: Duration = Duration::from_secs(5);

/// Waits for the connection (at most [`CONNECT_WAIT`]); a command that cannot connect, or
/// whose server has no JetStream, says why at once instead of retrying until its timeout.
async fn reachable(client: &async_nats::Client, local_api: bool) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + CONNECT_WAIT;
    let mut diagnosed_at = tokio::time::Instant::now() + Duration::from_millis(500);
    while client.connection_state() != async_nats::connection::State::Connected {
        let now = tokio::time::Instant::now();
        if now >= diagnosed_at || now >= deadline {
            if let Some(problem) = crate::diagnose(client).await {
                return Err(problem.to_string());
            }
            if now >= deadline {
                return Err(format!("not connected after {CONNECT_WAIT:?}"));
            }
            diagnosed_at = now + Duration::from_secs(1);
        }
        // Polling: the client has no future that completes on connection.
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    match crate::no_jetstream(client, local_api) {
        Some(problem) => Err(problem.to_string()),
        None => Ok(()),
    }
}

async fn connect(servers: &str) -> Result<async_nats::Client, EnvError> {
    let servers = servers.to_owned();
    let lookup = move |name: &str| {
        if name == NATS_URL {
            return Some(servers.clone());
        }
        std::env::var_os(name).map(|value| value.to_string_lossy().into_owned())
    };
    options_from(lookup).await?.connect().await
}

fn export_to(
    topology: &Topology,
    info: &ApiInfo,
    application: &str,
    args: &ExportArgs,
) -> Result<bool, String> {
    let all = !args.asyncapi && !args.nats_json && !args.permissions;
    let mut written = Vec::new();
    if args.asyncapi || all {
        let doc = export::asyncapi(topology, info);
        written.extend(doc.write_to(&args.dir).map_err(|e| e.to_string())?);
    }
    if args.nats_json || all {
        let nats = export::nats_json(topology);
        written.extend(nats.write_to(&args.dir).map_err(|e| e.to_string())?);
    }
    if args.permissions || all {
        let roles = match args.all_roles {
            false => vec![args.role(application)],
            true => args.every_role(application),
        };
        let permissions: Vec<Permissions> = roles
            .iter()
            .map(|role| export::permissions(topology, role))
            .collect();
        written.extend(write_permissions(&permissions, &args.dir).map_err(|e| e.to_string())?);
    }
    for path in written {
        println!("wrote {}", path.display());
    }
    Ok(true)
}

/// Writes `permissions.conf` (one nats-server `authorization` block with a user per role,
/// each password read from the server's environment) and `permissions.json` (one role's
/// object, or an array of them) into `dir`.
fn write_permissions(
    roles: &[Permissions],
    dir: &Path,
) -> Result<Vec<PathBuf>, export::ExportError> {
    let variables: Vec<String> = roles
        .iter()
        .map(|p| format!("${}", password_variable(p.role.service())))
        .collect();
    let users: Vec<(&Permissions, &str)> = roles
        .iter()
        .zip(&variables)
        .map(|(p, v)| (p, v.as_str()))
        .collect();
    let whence = match &variables[..] {
        [one] => format!(
            "# The password is `{one}`: nats-server reads it from its environment variable \
             {}.\n# Set it where the server runs, or replace the reference with a bcrypt hash \
             (`nats server passwd`);",
            one.trim_start_matches('$')
        ),
        many => format!(
            "# The passwords are {}: nats-server reads each from the environment variable of \
             that name.\n# Set them where the server runs, or replace each reference with a \
             bcrypt hash (`nats server passwd`);",
            many.iter()
                .map(|v| format!("`{v}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let conf = format!(
        "{whence}\n# never write the secret itself here.\n{}",
        Permissions::server_config_of(&users)
    );
    let json = match roles {
        [one] => one.to_json(),
        many => serde_json::Value::Array(many.iter().map(Permissions::to_json).collect()),
    };
    let mut json = serde_json::to_string_pretty(&json).expect("a JSON value always serializes");
    json.push('\n');
    let files = [("permissions.conf", conf), ("permissions.json", json)];
    let write = |path: &Path, contents: &str| {
        std::fs::create_dir_all(dir)
            .and_then(|()| std::fs::write(path, contents))
            .map_err(|source| export::ExportError {
                path: path.to_owned(),
                source,
            })
    };
    let mut written = Vec::new();
    for (name, contents) in files {
        let path = dir.join(name);
        write(&path, &contents)?;
        written.push(path);
    }
    Ok(written)
}

/// `QUICKSTART_PASSWORD` for service `quickstart`: the name uppercased, every character
/// that is not a letter or a digit as `_`.
fn password_variable(service: &str) -> String {
    let name: String = service
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect();
    format!("{name}_PASSWORD")
}

#[derive(Debug, Parser)]
#[command(
    about = "Operate this application's NATS topology",
    long_about = "Operate this application's NATS topology: what provisioning would do, what the \
                  server holds, export it, provision it (an init job) or check it.",
    after_help = "Without a subcommand the application itself runs. The subcommands that talk \
                  to a server use --server, else NATS_URL, else nats://127.0.0.1:4222."
)]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print what provisioning would do (create, update which fields, conflicts); change nothing.
    Plan(ServerArgs),
    /// Print each queue consumer as the server has it: exists, consumed, pending, ack floor.
    Inspect(ServerArgs),
    /// Write the AsyncAPI document, the NATS stream and consumer JSON and/or the service
    /// user's NATS permissions into DIR (no server).
    Export(ExportArgs),
    /// Provision every stream and queue consumer, then exit: 0 when done, 1 on an error.
    Provision(ServerArgs),
    /// Provision nothing; print each declared stream and queue consumer on the server. Exit
    /// 0 when all exist and every queue consumer is consumed, 1 otherwise.
    Health(ServerArgs),
}

#[derive(Debug, Clone, clap::Args)]
struct ServerArgs {
    /// The servers, comma-separated.
    #[arg(long, env = "NATS_URL", default_value = DEFAULT_URL)]
    server: String,
    /// How long, in seconds, requests are retried while the server is unreachable.
    #[arg(long, default_value_t = 60.0, value_parser = positive_seconds)]
    timeout: f64,
    #[command(flatten)]
    jetstream: JetStreamArgs,
}

/// Which JetStream the runtime talks to: `plan` and the others send their requests there;
/// `export --permissions` grants its API subjects.
#[derive(Debug, Clone, clap::Args)]
struct JetStreamArgs {
    /// The JetStream domain to talk to (requests go to `$JS.<NAME>.API`, and `export
    /// --permissions` grants those), for example an edge site's across a leaf node connection.
    #[arg(long, value_name = "NAME")]
    domain: Option<String>,
    /// The JetStream API prefix to talk to (an account import's, e.g. `JS.hub.API`).
    #[arg(long, value_name = "PREFIX", conflicts_with = "domain")]
    api_prefix: Option<String>,
}

fn positive_seconds(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(s) if s.is_finite() && s >= 0.0 => Ok(s),
        _ => Err(format!("{text:?} is not a number of seconds")),
    }
}

#[derive(Debug, Clone, clap::Args)]
struct ExportArgs {
    /// Write the AsyncAPI 3.0 document (asyncapi.json and asyncapi.yaml).
    #[arg(long)]
    asyncapi: bool,
    /// Write one STREAM.stream.json per owned stream and one STREAM.GROUP.consumer.json per
    /// queue consumer (the JetStream API's shape, as `nats stream add --config` reads).
    #[arg(long)]
    nats_json: bool,
    /// The AsyncAPI document's title (default: the executable's name).
    #[arg(long)]
    title: Option<String>,
    /// The AsyncAPI document's `info.version`.
    #[arg(long)]
    api_version: Option<String>,
    /// Write the NATS permissions of the service's user: permissions.conf (a nats-server
    /// `authorization` block) and permissions.json (a user JWT's `pub`/`sub` shape).
    #[arg(long)]
    permissions: bool,
    /// Whose permissions: `owner` (provisions and consumes), `bind-only` (consumes what an
    /// operator provisioned) or `operator` (provisions, as `provision` does).
    #[arg(long, default_value = "owner", value_parser = access_parser())]
    role: Access,
    /// Every role in one server configuration: the service's user (`owner`), `<service>-bind`
    /// (`bind-only`) and `<service>-operator` (`operator`), each with its own password
    /// variable and inbox prefix.
    #[arg(long, conflicts_with = "role")]
    all_roles: bool,
    /// The service, as the user's name (default: the application's name, the executable's
    /// unless the binary sets one).
    #[arg(long, value_name = "NAME")]
    service: Option<String>,
    /// The prefix of the service's reply subjects (default `_INBOX_<service>`); connect with
    /// the same one (`NATS_INBOX_PREFIX`).
    #[arg(long, value_name = "PREFIX")]
    inbox_prefix: Option<String>,
    /// A subject the service publishes to that no handler declares with `publishes`
    /// (repeatable): a producer in the same process, say.
    #[arg(long, value_name = "SUBJECT")]
    publishes: Vec<String>,
    /// Grant publishing on every subject of the streams the service owns, declared or not
    /// (wider than the handlers' `publishes`: a compromised replica may inject messages).
    #[arg(long)]
    publish_into_owned_streams: bool,
    #[command(flatten)]
    jetstream: JetStreamArgs,
    /// The directory to write into (created if missing).
    dir: PathBuf,
}

impl ExportArgs {
    /// The role that `--role`, `--service` (else `application`), `--inbox-prefix`,
    /// `--domain`, `--api-prefix`, `--publishes` and `--publish-into-owned-streams` describe.
    fn role(&self, application: &str) -> Role {
        let service = self.service.as_deref().unwrap_or(application);
        let mut role = Role::new(self.role, service);
        if let Some(prefix) = &self.inbox_prefix {
            role = role.with_inbox_prefix(prefix);
        }
        if let Some(domain) = &self.jetstream.domain {
            role = role.with_domain(domain);
        }
        if let Some(prefix) = &self.jetstream.api_prefix {
            role = role.with_api_prefix(prefix);
        }
        for subject in &self.publishes {
            role = role.publishes(subject);
        }
        if self.publish_into_owned_streams {
            role = role.publish_into_owned_streams();
        }
        role
    }
}

impl ExportArgs {
    /// `--all-roles`: the owner as the service, the others named after it.
    fn every_role(&self, application: &str) -> Vec<Role> {
        let service = self.service.as_deref().unwrap_or(application);
        [
            (Access::Owner, service.to_owned()),
            (Access::BindOnly, format!("{service}-bind")),
            (Access::Operator, format!("{service}-operator")),
        ]
        .into_iter()
        .map(|(access, user)| {
            let mut args = ExportArgs {
                role: access,
                service: Some(user),
                // Each user has its own inbox prefix, after its name.
                inbox_prefix: None,
                ..self.clone()
            };
            args.all_roles = false;
            args.role(application)
        })
        .collect()
    }
}

/// `--role`'s values, as [`Access::as_str`] spells them: clap lists them on a bad one.
fn access_parser() -> impl TypedValueParser<Value = Access> {
    const ROLES: [Access; 3] = [Access::Owner, Access::BindOnly, Access::Operator];
    PossibleValuesParser::new(ROLES.map(Access::as_str))
        .map(|text| Access::parse(&text).expect("one of the possible values"))
}
