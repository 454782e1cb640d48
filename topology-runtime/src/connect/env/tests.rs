//! The environment layer without a server: variables given by a map (never the process
//! environment, which the test threads share), files in a temporary directory of each test's
//! own. Every error is checked for the secrets around it.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use super::*;

const PASSWORD: &str = "pa55-w0rd-secret";
const TOKEN: &str = "t0ken-secret";

/// Variables for one test.
fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |name| map.get(name).cloned()
}

async fn error_of(pairs: &[(&str, &str)]) -> EnvError {
    match options_from(vars(pairs)).await {
        Ok(env) => panic!("expected an error, got {env:?}"),
        Err(e) => e,
    }
}

/// Asserts that none of `secrets` appears in the error's `Display` or `Debug`.
fn assert_no_secret(error: &EnvError, secrets: &[&str]) {
    let shown = format!("{error} / {error:?}");
    for secret in secrets {
        assert!(!shown.contains(secret), "{secret:?} shown in: {shown}");
    }
}

/// A directory of the test's own, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> TempDir {
        static N: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "topology-runtime-connect-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn file(&self, name: &str, content: &str) -> String {
        let path = self.0.join(name);
        std::fs::write(&path, content).unwrap();
        path.to_string_lossy().into_owned()
    }

    fn missing(&self, name: &str) -> String {
        self.0.join(name).to_string_lossy().into_owned()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn user_seed_text() -> String {
    nkeys::KeyPair::new_user().seed().unwrap()
}

#[tokio::test]
async fn nothing_set_is_the_default_server_without_credentials() {
    let env = options_from(vars(&[])).await.unwrap();
    assert_eq!(env.servers.len(), 1);
    assert_eq!(env.servers[0].port(), 4222);
    let shown = format!("{env:?}");
    assert!(shown.contains("auth: none"), "{shown}");
}

#[tokio::test]
async fn empty_values_count_as_unset() {
    let env = options_from(vars(&[
        ("NATS_URL", ""),
        ("NATS_USER", ""),
        ("NATS_TOKEN", ""),
        ("NATS_CA", ""),
    ]))
    .await
    .unwrap();
    assert_eq!(env.servers[0].port(), 4222);
    assert!(format!("{env:?}").contains("auth: none"));
}

#[tokio::test]
async fn user_and_password_are_applied_and_the_password_is_never_shown() {
    let env = options_from(vars(&[
        ("NATS_URL", "nats://a:4222, nats://b:4223"),
        ("NATS_USER", "billing"),
        ("NATS_PASSWORD", PASSWORD),
        ("NATS_INBOX_PREFIX", "_INBOX_billing"),
    ]))
    .await
    .unwrap();
    assert_eq!(env.servers.len(), 2);
    let shown = format!("{env:?} {:?}", env.options);
    assert!(shown.contains("billing"), "{shown}");
    assert!(shown.contains("_INBOX_billing"), "{shown}");
    assert!(!shown.contains(PASSWORD), "{shown}");

    let env = options_from(vars(&[("NATS_TOKEN", TOKEN)])).await.unwrap();
    let shown = format!("{env:?} {:?}", env.options);
    assert!(shown.contains("a token"), "{shown}");
    assert!(!shown.contains(TOKEN), "{shown}");
}

#[tokio::test]
async fn credentials_in_a_url_are_not_shown() {
    let env = options_from(vars(&[("NATS_URL", "nats://admin:hunter2@a:4222")]))
        .await
        .unwrap();
    let shown = format!("{env:?}");
    assert!(
        shown.contains("nats://a:4222 (with credentials)"),
        "{shown}"
    );
    assert!(!shown.contains("hunter2"), "{shown}");

    let error = error_of(&[("NATS_URL", "nats://admin:hunter2@a:notaport")]).await;
    assert_eq!(error.kind(), EnvErrorKind::Invalid);
    assert_eq!(error.variable(), Some("NATS_URL"));
    assert!(
        error.to_string().contains("nats://a:4222,nats://b:4222"),
        "{error}"
    );
    assert_no_secret(&error, &["hunter2"]);
}

#[tokio::test]
async fn half_pairs_are_incomplete_and_name_the_missing_variable() {
    for (pairs, variable, missing) in [
        (vec![("NATS_USER", "billing")], "NATS_USER", "NATS_PASSWORD"),
        (
            vec![("NATS_PASSWORD", PASSWORD)],
            "NATS_PASSWORD",
            "NATS_USER",
        ),
        (
            vec![("NATS_CERT", "/etc/client.pem")],
            "NATS_CERT",
            "NATS_KEY",
        ),
        (
            vec![("NATS_KEY", "/etc/client-key.pem")],
            "NATS_KEY",
            "NATS_CERT",
        ),
    ] {
        let error = error_of(&pairs).await;
        assert_eq!(error.kind(), EnvErrorKind::Incomplete, "{error}");
        assert_eq!(error.variable(), Some(variable));
        assert!(error.to_string().starts_with(variable), "{error}");
        assert!(error.to_string().contains(missing), "{error}");
        assert_no_secret(&error, &[PASSWORD]);
    }
    // A user alone: the message points a `nats` CLI user with a token to NATS_TOKEN.
    let error = error_of(&[("NATS_USER", TOKEN)]).await;
    assert!(error.to_string().contains("NATS_TOKEN"), "{error}");
    assert_no_secret(&error, &[TOKEN]);
}

#[tokio::test]
async fn two_ways_of_authenticating_are_a_conflict() {
    let dir = TempDir::new();
    let seed = user_seed_text();
    let nkey = dir.file("user.nk", &seed);
    let error = error_of(&[
        ("NATS_NKEY", &nkey),
        ("NATS_USER", "billing"),
        ("NATS_PASSWORD", PASSWORD),
        ("NATS_TOKEN", TOKEN),
    ])
    .await;
    assert_eq!(error.kind(), EnvErrorKind::Conflict);
    assert_eq!(error.variable(), Some("NATS_NKEY"));
    let message = error.to_string();
    assert!(
        message.starts_with("NATS_NKEY and NATS_USER and NATS_TOKEN are set"),
        "{message}"
    );
    assert_no_secret(&error, &[PASSWORD, TOKEN, &seed]);
}

#[tokio::test]
async fn unreadable_files_name_the_variable_and_the_path() {
    let dir = TempDir::new();
    let pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
    for (pairs, variable) in [
        (vec![("NATS_CREDS", dir.missing("svc.creds"))], "NATS_CREDS"),
        (vec![("NATS_NKEY", dir.missing("svc.nk"))], "NATS_NKEY"),
        (vec![("NATS_CA", dir.missing("ca.pem"))], "NATS_CA"),
        (
            vec![
                ("NATS_CERT", dir.missing("cert.pem")),
                ("NATS_KEY", dir.file("key.pem", pem)),
            ],
            "NATS_CERT",
        ),
    ] {
        let pairs: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let error = error_of(&pairs).await;
        assert_eq!(error.kind(), EnvErrorKind::Unreadable, "{error}");
        assert_eq!(error.variable(), Some(variable));
        let message = error.to_string();
        let path = pairs.iter().find(|(k, _)| *k == variable).unwrap().1;
        assert!(
            message.starts_with(&format!("{variable} is set to `{path}`")),
            "{message}"
        );
        assert!(message.contains("or unset"), "{message}");
        assert!(
            std::error::Error::source(&error).is_some(),
            "the I/O error is kept"
        );
    }
}

#[tokio::test]
async fn files_that_do_not_hold_what_they_should_are_invalid_and_not_shown() {
    let dir = TempDir::new();
    let seed = user_seed_text();
    // A credentials file with the seed but no JWT.
    let creds = dir.file(
        "svc.creds",
        &format!("-----BEGIN USER NKEY SEED-----\n{seed}\n------END USER NKEY SEED------\n"),
    );
    let error = error_of(&[("NATS_CREDS", &creds)]).await;
    assert_eq!(error.kind(), EnvErrorKind::Invalid);
    assert_eq!(error.variable(), Some("NATS_CREDS"));
    assert_no_secret(&error, &[&seed]);

    // A seed file holding an account seed and a broken user seed.
    let account = nkeys::KeyPair::new_account().seed().unwrap();
    let broken = format!("SU{}", &seed[2..seed.len() - 1]);
    let nkey = dir.file("svc.nk", &format!("{account}\n{broken}\n"));
    let error = error_of(&[("NATS_NKEY", &nkey)]).await;
    assert_eq!(error.kind(), EnvErrorKind::Invalid);
    assert!(
        error.to_string().contains("no valid user nkey seed"),
        "{error}"
    );
    assert_no_secret(&error, &[&account, &broken]);

    // PEM files that are not what NATS_CA, NATS_CERT and NATS_KEY need.
    let secret_text = "not-a-pem-but-secret-words";
    let junk = dir.file("junk.pem", secret_text);
    let error = error_of(&[("NATS_CA", &junk)]).await;
    assert_eq!(
        (error.kind(), error.variable()),
        (EnvErrorKind::Invalid, Some("NATS_CA"))
    );
    assert_no_secret(&error, &[secret_text]);
    let error = error_of(&[("NATS_CERT", &junk), ("NATS_KEY", &junk)]).await;
    assert_eq!(error.variable(), Some("NATS_CERT"));
    assert_no_secret(&error, &[secret_text]);
}

#[tokio::test]
async fn a_seed_file_with_decoration_is_read_and_the_seed_never_shown() {
    let dir = TempDir::new();
    let seed = user_seed_text();
    let nkey = dir.file("svc.nk", &format!("# the billing service\n\n  {seed}  \n"));
    let env = options_from(vars(&[("NATS_NKEY", &nkey)])).await.unwrap();
    let shown = format!("{env:?} {:?}", env.options);
    assert!(shown.contains("nkey seed file"), "{shown}");
    assert!(!shown.contains(&seed), "{shown}");
}

#[tokio::test]
async fn a_secret_where_a_path_belongs_is_refused_without_showing_it() {
    let seed = user_seed_text();
    let pem = "-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49\n-----END PRIVATE KEY-----";
    let jwt = "eyJ0eXAiOiJKV1QiLCJhbGciOiJlZDI1NTE5LW5rZXkifQ.secret";
    for (variable, value) in [
        ("NATS_NKEY", seed.as_str()),
        ("NATS_CA", pem),
        ("NATS_CREDS", jwt),
    ] {
        let error = error_of(&[(variable, value)]).await;
        assert_eq!(error.kind(), EnvErrorKind::Invalid, "{error}");
        assert_eq!(error.variable(), Some(variable));
        assert!(error.to_string().contains("not a path"), "{error}");
        assert_no_secret(&error, &[value, "MIGHAgEA", "secret"]);
    }
}

#[tokio::test]
async fn an_inbox_prefix_must_be_a_literal_subject() {
    for prefix in ["_INBOX.>", "_INBOX.", "my inbox"] {
        let error = error_of(&[("NATS_INBOX_PREFIX", prefix)]).await;
        assert_eq!(error.kind(), EnvErrorKind::Invalid, "{error}");
        assert_eq!(error.variable(), Some("NATS_INBOX_PREFIX"));
    }
    let env = options_from(vars(&[("NATS_INBOX_PREFIX", "_INBOX.billing")]))
        .await
        .unwrap();
    assert!(format!("{env:?}").contains("_INBOX.billing"));
}
