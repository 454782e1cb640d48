//! `nats_topology::connect` survives a broker that is down when the service starts: it returns
//! at once, and the client connects as soon as a server listens. And the environment the
//! `nats` CLI reads connects a running runtime with each kind of credentials: user and
//! password (with a per-service inbox prefix), token, nkey, a credentials file (an
//! operator-mode server) and mutual TLS.
//!
//! The environment tests give their variables to `options_from`, the function
//! `connect_from_env` calls with the process environment, rather than to `connect_from_env`
//! itself: the process environment is shared by the test threads (setting it is `unsafe` in
//! edition 2024 and races with every other test reading it), and `connect_from_env` adds
//! nothing but the lookup `std::env::var_os` to what is tested here.

mod fixture;

use std::collections::HashMap;
use std::net::TcpListener;
use std::time::Duration;

use fixture::{Ledger, Running};
use futures::StreamExt;
use nats_topology::Runtime;
use nats_topology::async_nats::Client;
use nats_topology::async_nats::{self, client::Request, connection::State, jetstream};
use nats_topology::model::QueueDecl;
use nats_topology_testkit::NatsServer;
use topology_runtime::connect::options_from;

#[tokio::test]
async fn connect_with_the_broker_down_then_up() {
    // A loopback port on which nothing listens (bound, read, released).
    let port = {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        listener.local_addr().expect("local address").port()
    };
    let url = format!("nats://127.0.0.1:{port}");

    // Plain `async_nats::connect` gives up at once: the failure `connect` exists to survive.
    assert!(async_nats::connect(url.as_str()).await.is_err());

    let client = tokio::time::timeout(Duration::from_secs(10), nats_topology::connect(&url))
        .await
        .expect("connect returns while no server listens")
        .expect("a valid server list");
    assert_ne!(client.connection_state(), State::Connected);

    let server = NatsServer::start_on_port(port)
        .await
        .expect("a server on the port the client is trying");

    // Something to answer, on its own connection, subscribed before the request is sent.
    let responder = async_nats::connect(server.url()).await.expect("responder");
    let mut requests = responder
        .subscribe("connect.echo")
        .await
        .expect("subscribe");
    // `flush` only writes the buffer out; the server has processed the subscription once a
    // message this connection publishes afterwards comes back to it (it handles one
    // connection's commands in order).
    let mut probe = responder
        .subscribe("connect.probe")
        .await
        .expect("subscribe");
    responder
        .publish("connect.probe", "".into())
        .await
        .expect("publish");
    tokio::time::timeout(Duration::from_secs(10), probe.next())
        .await
        .expect("the responder's own message comes back")
        .expect("the probe subscription is open");
    let answering = tokio::spawn(async move {
        let request = requests.next().await.expect("a request");
        let reply = request.reply.expect("a reply subject");
        let mut answer = b"echo: ".to_vec();
        answer.extend_from_slice(&request.payload);
        responder
            .publish(reply, answer.into())
            .await
            .expect("answer");
        responder.flush().await.expect("flush");
    });

    // Sent whether or not the client has reconnected yet: it waits in the client's queue.
    let request = Request::new()
        .payload("ping".into())
        .timeout(Some(Duration::from_secs(60)));
    let answer = match client.send_request("connect.echo", request).await {
        Ok(answer) => answer,
        Err(e) => panic!(
            "the request is answered once the client has connected: {e:?}; the client is on {:?} (server {}), state {:?}",
            client.server_info().port,
            server.url(),
            client.connection_state()
        ),
    };
    assert_eq!(&answer.payload[..], b"echo: ping");
    assert_eq!(client.connection_state(), State::Connected);
    answering.await.expect("responder task");
}

#[tokio::test]
async fn a_malformed_server_list_is_an_error() {
    assert!(nats_topology::connect(" , ").await.is_err());
    assert!(
        nats_topology::connect("nats://127.0.0.1:notaport")
            .await
            .is_err()
    );
}

// ---------------------------------------------------------------------------------------------
// The environment of the `nats` CLI, against servers that require it
// ---------------------------------------------------------------------------------------------

/// Variables as `connect_from_env` would read them from the environment.
type Vars = HashMap<&'static str, String>;

/// A client connected with the options `vars` give (`options_from`, then `connect`).
async fn connect_from(vars: &Vars) -> Client {
    options_from(|name| vars.get(name).cloned())
        .await
        .unwrap_or_else(|e| panic!("the variables are usable: {e}"))
        .connect()
        .await
        .expect("a client")
}

/// Connects from `vars`, runs a queue consumer of the stream `<name>` on that connection,
/// publishes 20 jobs from a second connection made from the same variables, waits until each
/// is handled and drains: each job handled once, nothing pending or unacknowledged after.
async fn consume_and_drain(vars: &Vars, name: &str) {
    fixture::trace();
    let subject = format!("{}.jobs", name.to_lowercase());
    let stream = fixture::stream(name, &[&format!("{}.>", name.to_lowercase())]);
    let consumer = fixture::queue(
        &format!("tests::{name}"),
        &stream,
        &subject,
        QueueDecl::new("workers"),
    );
    let ledger = Ledger::default();
    let builder = Runtime::builder(connect_from(vars).await).topology(fixture::job_topology(
        stream,
        consumer,
        ledger.clone(),
        Duration::ZERO,
    ));
    let running = Running::start(fixture::fast(builder)).await;

    let js = jetstream::new(connect_from(vars).await);
    fixture::publish_jobs(&js, &subject, 0..20).await;
    ledger.wait_covers(0..20, Duration::from_secs(20)).await;
    running.stop().await.expect("a clean drain");
    ledger.assert_handled_once(20);
    fixture::settled(&js, name, "workers", Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_and_password_from_the_environment_with_a_service_inbox_prefix() {
    // `svc` receives replies only under its own inbox prefix: without NATS_INBOX_PREFIX, no
    // request of its connection would be answered. (Its inbox prefix also carries the leader
    // watch's fleet channel; it may also subscribe to the leader advisories the runtime uses,
    // without which its health would show those denials: see tests/permissions.rs.)
    let server = NatsServer::builder()
        .config(
            r#"authorization {
                 users = [
                   { user: admin, password: admin-pw }
                   {
                     user: svc, password: $SVC_PASSWORD
                     permissions: {
                       publish: ">"
                       subscribe: ["_INBOX_svc.>", "$JS.EVENT.ADVISORY.>"]
                     }
                   }
                 ]
               }"#,
        )
        .env("SVC_PASSWORD", "svc-pw")
        .probe_user("admin", "admin-pw")
        .start()
        .await
        .expect("a server with users");
    let vars = Vars::from([
        ("NATS_URL", server.url()),
        ("NATS_USER", "svc".into()),
        ("NATS_PASSWORD", "svc-pw".into()),
        ("NATS_INBOX_PREFIX", "_INBOX_svc".into()),
    ]);
    let client = connect_from(&vars).await;
    assert!(client.new_inbox().starts_with("_INBOX_svc."));
    consume_and_drain(&vars, "ENV_USER").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_from_the_environment() {
    let server = NatsServer::builder()
        .config("authorization { token: $TOKEN }")
        .env("TOKEN", "env-t0ken")
        .probe_token("env-t0ken")
        .start()
        .await
        .expect("a server with a token");
    let vars = Vars::from([
        ("NATS_URL", server.url()),
        ("NATS_TOKEN", "env-t0ken".into()),
    ]);
    consume_and_drain(&vars, "ENV_TOKEN").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_nkey_seed_file_from_the_environment() {
    let user = nkeys::KeyPair::new_user();
    let seed = user.seed().expect("a user key pair has a seed");
    let server = NatsServer::builder()
        .config(format!(
            "authorization {{ users = [ {{ nkey: {} }} ] }}",
            user.public_key()
        ))
        .probe_nkey(seed.clone())
        .start()
        .await
        .expect("a server with an nkey user");
    let seed_file = server.store_dir().join("svc.nk");
    std::fs::write(&seed_file, format!("{seed}\n")).expect("write the seed file");
    let vars = Vars::from([
        ("NATS_URL", server.url()),
        ("NATS_NKEY", seed_file.display().to_string()),
    ]);
    consume_and_drain(&vars, "ENV_NKEY").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_credentials_file_from_the_environment() {
    let operator = operator::Operator::new();
    let server = NatsServer::builder()
        .config(operator.config())
        .probe_credentials(operator.creds())
        .start()
        .await
        .expect("an operator-mode server");
    let creds_file = server.store_dir().join("svc.creds");
    std::fs::write(&creds_file, operator.creds()).expect("write the credentials file");
    let vars = Vars::from([
        ("NATS_URL", server.url()),
        ("NATS_CREDS", creds_file.display().to_string()),
    ]);
    consume_and_drain(&vars, "ENV_CREDS").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_from_the_environment() {
    let server = NatsServer::builder()
        .mutual_tls()
        .start()
        .await
        .expect("a server that requires client certificates");
    let tls = server.tls().expect("TLS files");
    let path = |p: &std::path::Path| p.display().to_string();
    let vars = Vars::from([
        ("NATS_URL", server.url()),
        ("NATS_CA", path(tls.ca())),
        ("NATS_CERT", path(tls.client_cert())),
        ("NATS_KEY", path(tls.client_key())),
    ]);
    consume_and_drain(&vars, "ENV_TLS").await;
}

/// An operator-mode server: an operator, an account with JetStream, a system account and one
/// user, each JWT signed as the server checks it (ed25519 nkeys, base64url without padding).
mod operator {
    use std::time::{SystemTime, UNIX_EPOCH};

    use data_encoding::BASE64URL_NOPAD;
    use nkeys::KeyPair;
    use serde_json::{Value, json};

    pub struct Operator {
        config: String,
        creds: String,
    }

    impl Operator {
        pub fn new() -> Operator {
            let operator = KeyPair::new_operator();
            let account = KeyPair::new_account();
            let system = KeyPair::new_account();
            let user = KeyPair::new_user();
            let unlimited = json!({
                "subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1,
                "wildcards": true, "conn": -1, "leaf": -1,
            });
            let mut with_jetstream = unlimited.clone();
            for key in ["mem_storage", "disk_storage", "streams", "consumer"] {
                with_jetstream[key] = json!(-1);
            }
            let operator_jwt = jwt(
                &operator,
                &operator.public_key(),
                json!({ "type": "operator", "version": 2, "system_account": system.public_key() }),
            );
            let account_jwt = jwt(
                &operator,
                &account.public_key(),
                json!({ "type": "account", "version": 2, "limits": with_jetstream }),
            );
            let system_jwt = jwt(
                &operator,
                &system.public_key(),
                json!({ "type": "account", "version": 2, "limits": unlimited }),
            );
            let user_jwt = jwt(
                &account,
                &user.public_key(),
                json!({
                    "type": "user", "version": 2, "pub": {}, "sub": {},
                    "subs": -1, "data": -1, "payload": -1,
                }),
            );
            let config = format!(
                "operator: \"{operator_jwt}\"\nsystem_account: {system}\nresolver: MEMORY\n\
                 resolver_preload: {{\n  {account}: \"{account_jwt}\"\n  {system}: \"{system_jwt}\"\n}}\n",
                system = system.public_key(),
                account = account.public_key(),
            );
            let creds = format!(
                "-----BEGIN NATS USER JWT-----\n{user_jwt}\n------END NATS USER JWT------\n\n\
                 -----BEGIN USER NKEY SEED-----\n{}\n------END USER NKEY SEED------\n",
                user.seed().expect("a user key pair has a seed")
            );
            Operator { config, creds }
        }

        /// The server configuration: the operator, the system account and the accounts
        /// preloaded into a memory resolver.
        pub fn config(&self) -> String {
            self.config.clone()
        }

        /// The user's credentials file.
        pub fn creds(&self) -> String {
            self.creds.clone()
        }
    }

    /// A JWT about `subject` with the `nats` claims given, issued and signed by `issuer`.
    fn jwt(issuer: &KeyPair, subject: &str, nats: Value) -> String {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("after 1970")
            .as_secs();
        let header = json!({ "typ": "JWT", "alg": "ed25519-nkey" });
        let claims = json!({
            "jti": format!("{subject}{now}"),
            "iat": now,
            "iss": issuer.public_key(),
            "sub": subject,
            "name": subject,
            "nats": nats,
        });
        let signed = format!(
            "{}.{}",
            BASE64URL_NOPAD.encode(header.to_string().as_bytes()),
            BASE64URL_NOPAD.encode(claims.to_string().as_bytes())
        );
        let signature = issuer.sign(signed.as_bytes()).expect("sign");
        format!("{signed}.{}", BASE64URL_NOPAD.encode(&signature))
    }
}
