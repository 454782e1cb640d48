//! The compile-time surface: what the macros accept (`tests/ui/pass`, each `main` asserting what
//! was registered) and what they refuse, with the exact message (`tests/ui/fail`, `.stderr`
//! snapshots generated with `TRYBUILD=overwrite cargo test -p topology-macros --test ui` and
//! reviewed).
//!
//! The snapshots depend on rustc's wording, hence the toolchain pinned in `rust-toolchain.toml`.

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.pass("tests/ui/pass/*.rs");
    cases.compile_fail("tests/ui/fail/*.rs");
}
