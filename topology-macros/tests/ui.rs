//! The compile-time surface: what the macros accept (`tests/ui/pass`, each `main` asserting what
//! was registered) and what they refuse, with the exact message (`tests/ui/fail`, `.stderr`
//! snapshots generated with `TRYBUILD=overwrite cargo test -p topology-macros --test ui` and
//! reviewed).
//!
//! The snapshots depend on rustc's wording, hence the toolchain pinned in `rust-toolchain.toml`.
//! The refused shapes are split by the attribute they concern, one test each, so that a report
//! of failing tests names the family of a case that no longer matches (trybuild runs them one
//! after the other, in one project).

fn refused(patterns: &[&str]) {
    let cases = trybuild::TestCases::new();
    for pattern in patterns {
        cases.compile_fail(format!("tests/ui/fail/{pattern}"));
    }
}

#[test]
fn accepted() {
    trybuild::TestCases::new().pass("tests/ui/pass/*.rs");
}

#[test]
fn refused_streams() {
    refused(&["stream_*.rs"]);
}

#[test]
fn refused_queue_consumers() {
    refused(&["queue_*.rs"]);
}

#[test]
fn refused_broadcasts_and_relays() {
    refused(&["broadcast_*.rs", "relay_*.rs"]);
}

#[test]
fn refused_buckets_and_watches() {
    refused(&["kv_*.rs", "object_*.rs"]);
}

#[test]
fn refused_services_and_subscriptions() {
    refused(&["service_*.rs", "endpoint_*.rs", "subscription_*.rs"]);
}

#[test]
fn refused_state_and_many_mistakes_at_once() {
    refused(&["state_*.rs", "many_*.rs"]);
}
