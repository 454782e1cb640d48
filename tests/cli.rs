//! The CLI in an application binary (`nats_topology::cli`), run as operators run it: the
//! quickstart example, built by this test with this test's features, against real servers;
//! exit statuses and output are asserted.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::Duration;

use async_nats::jetstream::{self, consumer};
use nats_topology::cli::Cli;
use nats_topology::export::{self, Permissions, Role, Verb};
use nats_topology::model::{
    BucketDecl, ConsumerDecl, EndpointDecl, QueueDecl, ServiceDecl, StreamDecl, StreamRef,
    SubscriptionDecl,
};
use nats_topology::{HandlerError, Runtime, ServiceError, Topology};
use nats_topology_testkit::{NatsLeafTopology, NatsServer, eventually};

/// The quickstart binary, built once per test run with the features this test has.
fn quickstart() -> &'static PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let mut features = vec!["cli"];
        if cfg!(feature = "http") {
            features.push("http");
        }
        if cfg!(feature = "schemars") {
            features.push("schemars");
        }
        // The test runs from target/PROFILE/deps: the example lands in target/PROFILE/examples.
        let exe = std::env::current_exe().expect("the test knows its executable");
        let profile_dir = exe.ancestors().nth(2).expect("target/PROFILE");
        let target_dir = profile_dir.parent().expect("target");
        let status = Command::new(env!("CARGO"))
            .args(["build", "--example", "quickstart", "--features"])
            .arg(features.join(","))
            .arg("--target-dir")
            .arg(target_dir)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .expect("cargo runs");
        assert!(status.success(), "building the quickstart failed");
        profile_dir.join("examples/quickstart")
    })
}

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    /// Asserts the exit status, and that standard output shows each of `texts`.
    fn shows(&self, code: i32, texts: &[&str]) {
        self.printed(code, ("stdout", &self.stdout), texts);
    }

    /// Asserts the exit status, and that standard error says each of `texts`.
    fn says(&self, code: i32, texts: &[&str]) {
        self.printed(code, ("stderr", &self.stderr), texts);
    }

    fn printed(&self, code: i32, (name, output): (&str, &str), texts: &[&str]) {
        assert_eq!(self.code, Some(code), "{self}");
        for text in texts {
            assert!(output.contains(text), "expected {text:?} on {name}\n{self}");
        }
    }
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {:?}\n--- stdout\n{}--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// Runs the quickstart with `args` (no `NATS_URL` unless given in `env`).
async fn run(args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut command = tokio::process::Command::new(quickstart());
    command.args(args).env_remove("NATS_URL").kill_on_drop(true);
    for (k, v) in env {
        command.env(k, v);
    }
    let Output {
        status,
        stdout,
        stderr,
    } = tokio::time::timeout(Duration::from_secs(120), command.output())
        .await
        .expect("the quickstart finishes within 2 minutes")
        .expect("the quickstart runs");
    Run {
        code: status.code(),
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    }
}

/// The quickstart's topology, declared by hand: what a running instance of it consumes with.
static SIGNUPS: StreamDecl = StreamDecl::new("QUICKSTART_SIGNUPS", &["quickstart.signups.>"]);

fn quickstart_topology() -> Topology {
    Topology::new()
        .bucket(BucketDecl::kv("QUICKSTART_WELCOMED"))
        .consumer(
            ConsumerDecl::queue(
                "quickstart::send_welcome",
                StreamRef::Declared(&SIGNUPS),
                QueueDecl::new("welcome-mailer"),
            )
            .subjects(&["quickstart.signups.created"]),
            |_| Box::pin(async { Ok::<(), HandlerError>(()) }),
        )
}

#[tokio::test]
async fn cli_plan_provision_inspect_and_health_against_a_server() {
    let server = NatsServer::start().await.expect("nats-server starts");
    let url = server.url();
    let s = ["--server", url.as_str()];

    let plan = run(&["plan", s[0], s[1]], &[]).await;
    plan.shows(
        0,
        &[
            "stream `QUICKSTART_SIGNUPS`: create",
            "consumer `welcome-mailer` on `QUICKSTART_SIGNUPS`: create",
            "key-value bucket `QUICKSTART_WELCOMED` (stream `KV_QUICKSTART_WELCOMED`): create",
        ],
    );

    // Nothing provisioned yet: health names what is missing and fails.
    let health = run(&["health", s[0], s[1]], &[]).await;
    health.shows(
        1,
        &[
            "stream `QUICKSTART_SIGNUPS`: DOES NOT EXIST",
            "key-value bucket `QUICKSTART_WELCOMED` (stream `KV_QUICKSTART_WELCOMED`): DOES NOT EXIST",
            "NOT HEALTHY",
        ],
    );

    // `NATS_URL` is read when `--server` is not given.
    let provision = run(&["provision"], &[("NATS_URL", &url)]).await;
    provision.shows(
        0,
        &["provisioned 1 stream(s), 1 bucket(s) and 1 queue consumer(s)"],
    );
    let js = jetstream::new(async_nats::connect(&url).await.unwrap());
    js.get_stream("QUICKSTART_SIGNUPS")
        .await
        .expect("provision created the stream")
        .consumer_info("welcome-mailer")
        .await
        .expect("provision created the consumer");

    let plan = run(&["plan", s[0], s[1]], &[]).await;
    plan.shows(0, &["stream `QUICKSTART_SIGNUPS`: nothing to do"]);

    let inspect = run(&["inspect", s[0], s[1]], &[]).await;
    inspect.shows(
        0,
        &[
            "`welcome-mailer` on `QUICKSTART_SIGNUPS`",
            "BOUND BY NOBODY",
            "key-value bucket `QUICKSTART_WELCOMED` (stream `KV_QUICKSTART_WELCOMED`): 0 messages",
        ],
    );

    // Provisioned but consumed by nobody: not healthy.
    let health = run(&["health", s[0], s[1]], &[]).await;
    health.shows(
        1,
        &["stream `QUICKSTART_SIGNUPS`: exists", "BOUND BY NOBODY"],
    );

    // An instance consumes: healthy.
    let client = async_nats::connect(&url).await.unwrap();
    let runtime = Runtime::builder(client)
        .topology(quickstart_topology())
        .build()
        .unwrap();
    let ready = runtime.health();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(runtime.run_until(async move {
        let _ = stopped.await;
    }));
    ready.wait_ready(Duration::from_secs(30)).await.unwrap();
    let healthy = eventually(Duration::from_secs(30), "`health` to exit 0", || async {
        let health = run(&["health", "--server", url.as_str()], &[]).await;
        // Shown with the test's output if it never gets there.
        eprintln!("{health}");
        (health.code == Some(0)).then_some(health)
    })
    .await;
    assert!(healthy.stdout.contains("consumed;"), "{healthy}");
    assert!(healthy.stdout.ends_with("\nhealthy\n"), "{healthy}");
    let _ = stop.send(());
    running.await.unwrap().unwrap();
}

#[tokio::test]
async fn cli_provision_conflict_exits_1_with_the_precise_error() {
    let server = NatsServer::start().await.expect("nats-server starts");
    let url = server.url();
    // Someone created the group as a plain push durable: the declaration (pull) cannot be
    // applied in place.
    let js = jetstream::new(async_nats::connect(&url).await.unwrap());
    let stream = js
        .create_stream(jetstream::stream::Config {
            name: "QUICKSTART_SIGNUPS".into(),
            subjects: vec!["quickstart.signups.>".into()],
            ..Default::default()
        })
        .await
        .unwrap();
    stream
        .create_consumer(consumer::push::Config {
            durable_name: Some("welcome-mailer".into()),
            deliver_subject: "somewhere".into(),
            filter_subject: "quickstart.signups.created".into(),
            ..Default::default()
        })
        .await
        .unwrap();

    let provision = run(&["provision", "--server", &url], &[]).await;
    provision.says(
        1,
        &[
            "QUICKSTART_SIGNUPS",
            "welcome-mailer",
            "deliver_group",
            "migrate_from",
        ],
    );
    assert!(provision.stdout.is_empty(), "{provision}");

    let plan = run(&["plan", "--server", &url], &[]).await;
    plan.shows(1, &["CONFLICT"]);
}

#[tokio::test]
async fn cli_server_down_exits_1_naming_the_url_and_the_cause() {
    // A port nothing listens on: a server started and stopped.
    let mut server = NatsServer::start().await.expect("nats-server starts");
    let url = server.url();
    server.stop().await;

    // Every command that needs the server says at once why it cannot reach it, rather than
    // retrying until its timeout.
    for command in ["provision", "plan", "inspect", "health"] {
        let out = run(&[command, "--server", &url, "--timeout", "30"], &[]).await;
        out.says(1, &[url.as_str(), "connection refused"]);
        assert!(out.stderr.starts_with("error: "), "{out}");
    }

    let bad = run(&["plan", "--server", "nats://127.0.0.1:notaport"], &[]).await;
    bad.says(1, &["notaport"]);
}

#[tokio::test]
async fn cli_export_needs_no_server() {
    let dir = std::env::temp_dir().join(format!("nt-cli-export-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let nothing_there = [("NATS_URL", "nats://127.0.0.1:1")];
    let listing = |dir: &PathBuf| {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };

    let json = dir.join("json");
    let out = run(
        &["export", "--nats-json", json.to_str().unwrap()],
        &nothing_there,
    )
    .await;
    assert_eq!(out.code, Some(0), "{out}");
    assert_eq!(
        listing(&json),
        [
            "KV_QUICKSTART_WELCOMED.stream.json",
            "QUICKSTART_SIGNUPS.stream.json",
            "QUICKSTART_SIGNUPS.welcome-mailer.consumer.json"
        ]
    );
    let consumer: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(json.join("QUICKSTART_SIGNUPS.welcome-mailer.consumer.json"))
            .unwrap(),
    )
    .unwrap();
    assert_eq!(consumer["durable_name"], "welcome-mailer");
    assert_eq!(consumer["filter_subject"], "quickstart.signups.created");

    let api = dir.join("api");
    let out = run(
        &[
            "export",
            "--asyncapi",
            "--api-version",
            "2.0.0",
            api.to_str().unwrap(),
        ],
        &nothing_there,
    )
    .await;
    assert_eq!(out.code, Some(0), "{out}");
    assert_eq!(listing(&api), ["asyncapi.json", "asyncapi.yaml"]);
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(api.join("asyncapi.json")).unwrap()).unwrap();
    assert_eq!(doc["info"]["title"], "quickstart");
    assert_eq!(doc["info"]["version"], "2.0.0");

    // No flag: every output (AsyncAPI, NATS JSON, permissions).
    let both = dir.join("both");
    let out = run(&["export", both.to_str().unwrap()], &nothing_there).await;
    assert_eq!(out.code, Some(0), "{out}");
    assert_eq!(listing(&both).len(), 7, "{out}");

    // A usage error is clap's, with status 2.
    let out = run(&["export", "--yaml-only", both.to_str().unwrap()], &[]).await;
    out.says(2, &["--yaml-only"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn cli_without_a_subcommand_falls_through_to_the_application() {
    let server = NatsServer::start().await.expect("nats-server starts");
    let url = server.url();
    // No arguments: the quickstart itself runs (against NATS_URL) and exits 0.
    let app = run(&[], &[("NATS_URL", &url)]).await;
    app.shows(0, &["all 5 events handled"]);
    // An argument that is not a subcommand is the application's to judge.
    let app = run(&["--port", "8080"], &[("NATS_URL", &url)]).await;
    app.says(1, &["unknown argument `--port`"]);
}

/// `help`, `--help` and `-h` print the subcommands and exit 0; the application does not start
/// (it would start an embedded server and publish: no `NATS_URL` is set). Help on one
/// subcommand, either way round, exits 0 too.
#[tokio::test]
async fn cli_help_lists_the_subcommands_and_exits_0_without_running_the_application() {
    for flag in ["help", "--help", "-h"] {
        let out = run(&[flag], &[]).await;
        out.shows(0, &nats_topology::cli::SUBCOMMANDS);
        out.shows(
            0,
            &["Usage: quickstart", "Without a subcommand the application"],
        );
        assert!(!out.stdout.contains("published"), "{out}");
        assert!(!out.stdout.contains("embedded nats-server"), "{out}");
    }
    for args in [["help", "plan"], ["plan", "--help"]] {
        let out = run(&args, &[]).await;
        out.shows(0, &["--server", "NATS_URL"]);
    }
}

/// `--domain` sends every request to that JetStream: from the hub, `provision --domain edge`
/// creates the stream on the leaf node's JetStream and none on the hub's; `health` and
/// `plan` read it there too. `--domain` with `--api-prefix` is a usage error.
#[tokio::test]
async fn cli_commands_reach_a_jetstream_domain() {
    let sites = NatsLeafTopology::start()
        .await
        .expect("a hub and a leaf node start");
    let hub = sites.hub_url();
    let edge = sites.leaf_domain().to_owned();
    let at_edge = ["--server", hub.as_str(), "--domain", edge.as_str()];

    let provision = run(&[&["provision"], &at_edge[..]].concat(), &[]).await;
    assert_eq!(provision.code, Some(0), "{provision}");
    let leaf_js = jetstream::new(async_nats::connect(sites.leaf_url()).await.unwrap());
    leaf_js
        .get_stream("QUICKSTART_SIGNUPS")
        .await
        .expect("the stream is on the leaf node's JetStream")
        .consumer_info("welcome-mailer")
        .await
        .expect("and its consumer");
    let hub_js = jetstream::new(async_nats::connect(&hub).await.unwrap());
    assert!(
        hub_js.get_stream("QUICKSTART_SIGNUPS").await.is_err(),
        "nothing was created on the hub's own JetStream"
    );

    let plan = run(&[&["plan"], &at_edge[..]].concat(), &[]).await;
    plan.shows(0, &["stream `QUICKSTART_SIGNUPS`: nothing to do"]);
    // The stream exists there; nobody consumes yet.
    let health = run(&[&["health"], &at_edge[..]].concat(), &[]).await;
    health.shows(
        1,
        &["stream `QUICKSTART_SIGNUPS`: exists", "BOUND BY NOBODY"],
    );
    // Without the domain, the hub's own JetStream: nothing there.
    let health = run(&["health", "--server", hub.as_str()], &[]).await;
    health.shows(1, &["stream `QUICKSTART_SIGNUPS`: DOES NOT EXIST"]);

    let both = run(
        &[&["plan"], &at_edge[..], &["--api-prefix", "JS.edge.API"]].concat(),
        &[],
    )
    .await;
    both.says(2, &["--api-prefix"]);
}

/// A fresh directory for one test's files.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("nt-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// The `pub` and `sub` allow lists of a `permissions.json`.
fn allow_lists(json: &serde_json::Value) -> [Vec<String>; 2] {
    ["pub", "sub"].map(|key| {
        json[key]["allow"]
            .as_array()
            .unwrap_or_else(|| panic!("`{key}.allow` is a list: {json}"))
            .iter()
            .map(|subject| subject.as_str().unwrap().to_owned())
            .collect()
    })
}

/// What `permissions` lists, publish then subscribe.
fn subjects(permissions: &Permissions) -> [Vec<String>; 2] {
    [Verb::Publish, Verb::Subscribe].map(|action| {
        permissions
            .of(action)
            .map(|entry| entry.pattern())
            .collect()
    })
}

fn read_json(path: PathBuf) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap())
        .unwrap_or_else(|e| panic!("{} is JSON: {e}", path.display()))
}

/// `export --permissions` writes the service user's block and its JSON, exactly what
/// `export::permissions` gives for the quickstart's topology, with the password a reference
/// to the server's environment; the flags shape the role; a role that does not exist is a
/// usage error naming the three.
#[tokio::test]
async fn cli_export_permissions_writes_the_server_block_and_its_json() {
    let dir = scratch("permissions");
    let owner = dir.join("owner");
    let out = run(&["export", "--permissions", owner.to_str().unwrap()], &[]).await;
    assert_eq!(out.code, Some(0), "{out}");
    let mut names: Vec<String> = std::fs::read_dir(&owner)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["permissions.conf", "permissions.json"], "{out}");

    let expected = export::permissions(&quickstart_topology(), &Role::owner("quickstart"));
    let conf = std::fs::read_to_string(owner.join("permissions.conf")).unwrap();
    for text in [
        "authorization {",
        "user: \"quickstart\"",
        "password: $QUICKSTART_PASSWORD",
        // The comment that says where the password comes from.
        "# The password is `$QUICKSTART_PASSWORD`: nats-server reads it from its environment \
         variable QUICKSTART_PASSWORD.",
        "# Connect it with the inbox prefix `_INBOX_quickstart` (NATS_INBOX_PREFIX).",
        "\"$JS.API.STREAM.CREATE.QUICKSTART_SIGNUPS\"",
        "\"$JS.API.CONSUMER.MSG.NEXT.QUICKSTART_SIGNUPS.welcome-mailer\"",
        "\"$JS.ACK.QUICKSTART_SIGNUPS.welcome-mailer.>\"",
        "\"_INBOX_quickstart.>\"",
        "# consumer `quickstart::send_welcome` of stream `QUICKSTART_SIGNUPS`: pulls its messages",
    ] {
        assert!(conf.contains(text), "expected {text:?} in\n{conf}");
    }
    for entry in &expected.entries {
        assert!(
            conf.contains(&format!("\"{}\",", entry.subject)),
            "{} is missing from\n{conf}",
            entry.describe()
        );
    }
    let json = read_json(owner.join("permissions.json"));
    assert_eq!(allow_lists(&json), subjects(&expected));
    assert_eq!(json, expected.to_json());
    // The quickstart's handler declares no output: nothing of its stream is granted.
    assert!(!conf.contains("\"quickstart.signups"), "{conf}");

    // The wider grant, on request, with its reason.
    let wide = dir.join("wide");
    let out = run(
        &[
            "export",
            "--permissions",
            "--publish-into-owned-streams",
            wide.to_str().unwrap(),
        ],
        &[],
    )
    .await;
    assert_eq!(out.code, Some(0), "{out}");
    let expected = export::permissions(
        &quickstart_topology(),
        &Role::owner("quickstart").publish_into_owned_streams(),
    );
    assert_eq!(
        allow_lists(&read_json(wide.join("permissions.json"))),
        subjects(&expected)
    );
    let conf = std::fs::read_to_string(wide.join("permissions.conf")).unwrap();
    assert!(
        conf.contains("`publish_into_owned_streams` (`--publish-into-owned-streams`)")
            && conf.contains("\"quickstart.signups.>\","),
        "{conf}"
    );

    // Every flag of the role.
    let shaped = dir.join("shaped");
    let out = run(
        &[
            "export",
            "--permissions",
            "--role",
            "bind-only",
            "--service",
            "billing",
            "--inbox-prefix",
            "_I.billing",
            "--domain",
            "edge",
            "--publishes",
            "invoices.>",
            "--publishes",
            "audit.billing",
            shaped.to_str().unwrap(),
        ],
        &[],
    )
    .await;
    assert_eq!(out.code, Some(0), "{out}");
    let role = Role::bind_only("billing")
        .with_inbox_prefix("_I.billing")
        .with_domain("edge")
        .publishes("invoices.>")
        .publishes("audit.billing");
    let expected = export::permissions(&quickstart_topology(), &role);
    let json = read_json(shaped.join("permissions.json"));
    assert_eq!(allow_lists(&json), subjects(&expected));
    assert_eq!(json["role"], "bind-only");
    let conf = std::fs::read_to_string(shaped.join("permissions.conf")).unwrap();
    assert!(conf.contains("password: $BILLING_PASSWORD"), "{conf}");
    assert!(
        conf.contains("\"$JS.edge.API.CONSUMER.MSG.NEXT.QUICKSTART_SIGNUPS.welcome-mailer\""),
        "{conf}"
    );
    assert!(
        !conf.contains("STREAM.CREATE"),
        "bind-only creates nothing\n{conf}"
    );

    let operator = dir.join("operator");
    let out = run(
        &[
            "export",
            "--permissions",
            "--role",
            "operator",
            operator.to_str().unwrap(),
        ],
        &[],
    )
    .await;
    assert_eq!(out.code, Some(0), "{out}");
    let expected = export::permissions(&quickstart_topology(), &Role::operator("quickstart"));
    let json = read_json(operator.join("permissions.json"));
    assert_eq!(allow_lists(&json), subjects(&expected));

    let bad = dir.join("bad");
    let out = run(
        &[
            "export",
            "--permissions",
            "--role",
            "admin",
            bad.to_str().unwrap(),
        ],
        &[],
    )
    .await;
    out.says(2, &["'admin'", "--role", "owner", "bind-only", "operator"]);
    assert!(!bad.exists(), "a usage error writes nothing");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// nats-server takes the generated block as it is, reading the password from its environment,
/// and the quickstart runs under it: connected as the service's user with the inbox prefix
/// the block names (the `nats` CLI's variables), it provisions, publishes, consumes and
/// drains, denied nothing (a denial would keep it from getting ready). The quickstart
/// publishes its own signups from `main`, outside any handler: `--publishes` grants that.
#[tokio::test]
async fn cli_export_permissions_nats_server_runs_the_service_under_them() {
    let dir = scratch("permissions-server");
    let out = run(
        &[
            "export",
            "--permissions",
            "--publishes",
            "quickstart.signups.created",
            dir.to_str().unwrap(),
        ],
        &[],
    )
    .await;
    assert_eq!(out.code, Some(0), "{out}");
    let conf = std::fs::read_to_string(dir.join("permissions.conf")).unwrap();
    let server = serve_generated(&conf, &[("QUICKSTART_PASSWORD", "pw")]).await;

    let url = server.url();
    let app = run(
        &[],
        &[
            ("NATS_URL", url.as_str()),
            ("NATS_USER", "quickstart"),
            ("NATS_PASSWORD", "pw"),
            ("NATS_INBOX_PREFIX", "_INBOX_quickstart"),
        ],
    )
    .await;
    app.shows(0, &["all 5 events handled; drained cleanly"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The `operator` role is what the CLI needs: under the block generated for it, `provision`,
/// `plan`, `inspect` and `health` work, connected with the `nats` CLI's variables (the user,
/// its password and the inbox prefix the block names).
/// A server under a generated `permissions.conf`, its password variables set from `env`, with
/// an `admin` user beside the generated ones for the test kit's readiness probe (which takes
/// its replies on `_INBOX.>`, which the generated users may not).
async fn serve_generated(conf: &str, env: &[(&str, &str)]) -> NatsServer {
    let with_admin = conf.replacen(
        "  users = [\n",
        "  users = [\n    { user: admin, password: admin }\n",
        1,
    );
    assert_ne!(with_admin, conf, "the block lists its users:\n{conf}");
    let mut builder = NatsServer::builder().config(with_admin);
    for (name, value) in env {
        builder = builder.env(*name, *value);
    }
    builder
        .probe_user("admin", "admin")
        .start()
        .await
        .expect("nats-server starts with the generated block")
}

#[tokio::test]
async fn cli_export_permissions_operator_role_serves_the_cli() {
    let dir = scratch("permissions-operator");
    let out = run(
        &[
            "export",
            "--permissions",
            "--role",
            "operator",
            "--service",
            "ops",
            dir.to_str().unwrap(),
        ],
        &[],
    )
    .await;
    assert_eq!(out.code, Some(0), "{out}");
    let conf = std::fs::read_to_string(dir.join("permissions.conf")).unwrap();
    assert!(conf.contains("password: $OPS_PASSWORD"), "{conf}");
    let server = serve_generated(&conf, &[("OPS_PASSWORD", "ops-pw")]).await;
    let url = server.url();
    let env = [
        ("NATS_URL", url.as_str()),
        ("NATS_USER", "ops"),
        ("NATS_PASSWORD", "ops-pw"),
        ("NATS_INBOX_PREFIX", "_INBOX_ops"),
    ];

    let provision = run(&["provision", "--timeout", "10"], &env).await;
    provision.shows(
        0,
        &["provisioned 1 stream(s), 1 bucket(s) and 1 queue consumer(s)"],
    );
    let plan = run(&["plan", "--timeout", "10"], &env).await;
    plan.shows(0, &["stream `QUICKSTART_SIGNUPS`: nothing to do"]);
    let inspect = run(&["inspect", "--timeout", "10"], &env).await;
    inspect.shows(0, &["`welcome-mailer` on `QUICKSTART_SIGNUPS`"]);
    let health = run(&["health", "--timeout", "10"], &env).await;
    health.shows(
        1,
        &["stream `QUICKSTART_SIGNUPS`: exists", "BOUND BY NOBODY"],
    );

    // Without the inbox prefix the block allows, the replies are denied: the error says so.
    let denied = run(&["plan", "--timeout", "10"], &env[..3]).await;
    denied.says(1, &["_INBOX", "Permissions Violation"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

static LOOKUPS: ServiceDecl = ServiceDecl::new("lookups", "3.0.1");

/// The quickstart's topology with an endpoint and a core subscription: what a service with
/// both would declare.
fn served_topology() -> Topology {
    quickstart_topology()
        .endpoint(
            EndpointDecl::new("lookups::find", &LOOKUPS, "find", "quickstart.lookups.find"),
            |request| Box::pin(async move { Ok::<_, ServiceError>(request.payload().clone()) }),
        )
        .subscription(
            SubscriptionDecl::each_instance("lookups::invalidate", "quickstart.cache.invalidate"),
            |_| Box::pin(async { Ok::<(), HandlerError>(()) }),
        )
}

/// `export` writes the endpoint and the subscription into the AsyncAPI document and the
/// permissions; `plan` and `inspect` run with them (what they print is tested in
/// `tests/service_reports.rs`: these are the same reports).
#[tokio::test]
async fn cli_export_plan_and_inspect_see_endpoints_and_subscriptions() {
    let dir = scratch("served");
    let cli = || Cli::new().topology(served_topology());
    let code = cli()
        .run([
            "app",
            "export",
            "--service",
            "lookups",
            dir.to_str().unwrap(),
        ])
        .await;
    assert_eq!(code, Some(std::process::ExitCode::SUCCESS));

    let doc = read_json(dir.join("asyncapi.json"));
    let find = &doc["operations"]["lookups.find"];
    assert_eq!(find["bindings"]["nats"]["queue"], "q");
    assert_eq!(find["x-nats-service"]["name"], "lookups");
    assert_eq!(
        find["reply"]["channel"]["$ref"],
        "#/channels/lookups.find.reply"
    );
    assert_eq!(
        doc["operations"]["lookups.invalidate"]["x-nats-subscription"]["fanout"],
        "each_instance"
    );

    let conf = std::fs::read_to_string(dir.join("permissions.conf")).unwrap();
    for line in [
        "\"quickstart.lookups.find q\",",
        "\"quickstart.cache.invalidate\",",
        "\"$SRV.PING.lookups.*\",",
        "allow_responses = { max: 1, expires: \"120000ms\" }",
    ] {
        assert!(conf.contains(line), "{line}:\n{conf}");
    }
    let json = read_json(dir.join("permissions.json"));
    let expected = export::permissions(&served_topology(), &Role::owner("lookups"));
    assert_eq!(allow_lists(&json), subjects(&expected));
    assert_eq!(json["resp"]["max"], 1);

    let server = NatsServer::start().await.expect("nats-server starts");
    let url = server.url();
    for command in ["plan", "inspect"] {
        let code = cli().run(["app", command, "--server", url.as_str()]).await;
        assert_eq!(code, Some(std::process::ExitCode::SUCCESS), "{command}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `export --permissions --all-roles` writes one server configuration with a user for every
/// role (each its own password variable and inbox prefix): a server starts with it as it is,
/// and the operator's user provisions while the service's user runs.
#[tokio::test]
async fn cli_export_permissions_all_roles_in_one_server_config() {
    let dir = scratch("permissions-all-roles");
    let out = run(
        &[
            "export",
            "--permissions",
            "--all-roles",
            "--service",
            "svc",
            dir.to_str().unwrap(),
        ],
        &[],
    )
    .await;
    assert_eq!(out.code, Some(0), "{out}");
    let conf = std::fs::read_to_string(dir.join("permissions.conf")).unwrap();
    for line in [
        "user: \"svc\"",
        "user: \"svc-bind\"",
        "user: \"svc-operator\"",
        "password: $SVC_PASSWORD",
        "password: $SVC_BIND_PASSWORD",
        "password: $SVC_OPERATOR_PASSWORD",
    ] {
        assert!(conf.contains(line), "{line}:\n{conf}");
    }
    assert_eq!(conf.matches("authorization {").count(), 1, "{conf}");
    let json = read_json(dir.join("permissions.json"));
    let roles: Vec<&str> = json
        .as_array()
        .expect("one object per role")
        .iter()
        .map(|r| r["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["owner", "bind-only", "operator"]);

    let server = serve_generated(
        &conf,
        &[
            ("SVC_PASSWORD", "svc-pw"),
            ("SVC_BIND_PASSWORD", "bind-pw"),
            ("SVC_OPERATOR_PASSWORD", "op-pw"),
        ],
    )
    .await;
    let url = server.url();
    let operator = [
        ("NATS_URL", url.as_str()),
        ("NATS_USER", "svc-operator"),
        ("NATS_PASSWORD", "op-pw"),
        ("NATS_INBOX_PREFIX", "_INBOX_svc-operator"),
    ];
    let provision = run(&["provision", "--timeout", "10"], &operator).await;
    assert_eq!(provision.code, Some(0), "{provision}");
    std::fs::remove_dir_all(&dir).unwrap();
}
