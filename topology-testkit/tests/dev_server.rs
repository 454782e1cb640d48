//! The development server, `cargo run -p nats-topology-testkit --bin dev-server`, run as a user
//! runs it: it prints `NATS_URL=..`, serves JetStream there until SIGTERM, then stops its
//! servers (Unix only, like the kit).

#![cfg(unix)]

use std::process::Stdio;
use std::time::Duration;

use async_nats::jetstream::{self, stream};
use nats_topology_testkit::eventually;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// The dev server with `args`, its standard output piped.
fn dev_server(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_dev-server"));
    command
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true);
    command
}

/// Starts it and returns the value of the `NATS_URL=` line it prints; `None` if it exits
/// without printing one.
async fn started(child: &mut Child) -> Option<String> {
    let stdout = child.stdout.take().expect("stdout is piped");
    let mut lines = BufReader::new(stdout).lines();
    let url = tokio::time::timeout(Duration::from_secs(120), async {
        while let Some(line) = lines.next_line().await.expect("reads stdout") {
            if let Some(url) = line.strip_prefix("NATS_URL=") {
                return Some(url.to_owned());
            }
        }
        None
    })
    .await
    .expect("the dev server prints NATS_URL= within 2 minutes")?;
    // Keep reading, so that its later lines never block it.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Some(url)
}

/// SIGTERM by pid (our own child), then its exit status within 30 s.
async fn terminate(mut child: Child) -> std::process::ExitStatus {
    let pid = child.id().expect("it runs") as libc::pid_t;
    // SAFETY: kill(2) has no memory-safety preconditions; the pid is our own unreaped child.
    unsafe {
        libc::kill(pid, libc::SIGTERM);
    }
    tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .expect("the dev server exits within 30 s of SIGTERM")
        .expect("its status")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

#[tokio::test]
async fn dev_server_serves_jetstream_on_its_port_until_sigterm() {
    // A port found free can be taken before the server binds it (the other tests here start
    // servers too): the dev server then exits without a URL, and another port is tried.
    let mut tries = 0;
    let (port, child, url) = loop {
        let port = free_port();
        let mut child = dev_server(&["--port", &port.to_string()])
            .spawn()
            .expect("the dev server runs");
        match started(&mut child).await {
            Some(url) => break (port, child, url),
            None if tries < 4 => tries += 1,
            None => panic!("the dev server exited without printing NATS_URL=, on 5 free ports"),
        }
    };
    assert_eq!(url, format!("nats://127.0.0.1:{port}"));

    let client = async_nats::connect(&url).await.expect("connects");
    let js = jetstream::new(client);
    js.create_stream(stream::Config {
        name: "DEV".into(),
        subjects: vec!["dev.>".into()],
        ..Default::default()
    })
    .await
    .expect("JetStream creates a stream");

    let status = terminate(child).await;
    assert!(status.success(), "{status}");
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
        "the server stopped with the dev server"
    );
}

#[tokio::test]
async fn dev_server_cluster_prints_three_urls_and_takes_r3_streams() {
    let mut child = dev_server(&["--cluster"])
        .spawn()
        .expect("the dev server runs");
    let url = started(&mut child)
        .await
        .expect("the dev server prints NATS_URL=");
    let urls: Vec<&str> = url.split(',').collect();
    assert_eq!(urls.len(), 3, "{url}");

    let addrs: Vec<async_nats::ServerAddr> = urls.iter().map(|u| u.parse().unwrap()).collect();
    let client = async_nats::connect(addrs).await.expect("connects");
    let js = jetstream::new(client);
    eventually(Duration::from_secs(30), "an R3 stream", || {
        let js = js.clone();
        async move {
            js.create_stream(stream::Config {
                name: "DEV_R3".into(),
                subjects: vec!["dev.r3.>".into()],
                num_replicas: 3,
                ..Default::default()
            })
            .await
            .ok()
        }
    })
    .await;

    let status = terminate(child).await;
    assert!(status.success(), "{status}");
    for url in urls {
        let port: u16 = url.rsplit(':').next().unwrap().parse().unwrap();
        assert!(
            std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
            "node at {url} stopped with the dev server"
        );
    }
}

#[tokio::test]
async fn dev_server_help_and_usage_errors() {
    let help = dev_server(&["--help"]).output().await.expect("runs");
    assert!(help.status.success());
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(
        text.contains("--cluster") && text.contains("--port"),
        "{text}"
    );

    for args in [
        &["--cluster", "--port", "4333"][..],
        &["--port", "x"],
        &["--bogus"],
    ] {
        let out = dev_server(args).output().await.expect("runs");
        assert_eq!(out.status.code(), Some(2), "{args:?}");
    }
}
