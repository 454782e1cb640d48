//! What a new user meets in the first hour, as they meet it: a declared stream found by its
//! `NAME` constant on a real server after provisioning (the development server itself,
//! `cargo run -p nats-topology-testkit --bin dev-server`, is tested in the test kit's
//! `tests/dev_server.rs`; the CLI's `help` in `tests/cli.rs`).

use nats_topology::{Runtime, stream};
use nats_topology_testkit::NatsServer;

/// The stream the README's newcomer declares; private, as in a binary crate.
#[stream(name = "NEWCOMER_MEMBER_STATUS", subjects = ["newcomer.member.status.>"])]
struct MemberStatus;

mod nested {
    /// A public stream in a module: `NAME` is as visible as the struct.
    #[nats_topology::stream(name = "NEWCOMER_AUDIT", subjects = ["newcomer.audit.>"])]
    pub struct Audit;
}

#[test]
fn a_stream_struct_names_its_stream() {
    let name: &'static str = MemberStatus::NAME;
    assert_eq!(name, "NEWCOMER_MEMBER_STATUS");
    assert_eq!(nested::Audit::NAME, "NEWCOMER_AUDIT");
}

#[tokio::test]
async fn a_provisioned_stream_is_found_by_its_name_constant() {
    let server = NatsServer::start().await.expect("nats-server starts");
    let client = nats_topology::connect(&server.url())
        .await
        .expect("connects");
    let runtime = Runtime::builder(client.clone()).build().expect("builds");
    runtime.provision().await.expect("provisions");

    let js = nats_topology::async_nats::jetstream::new(client);
    for name in [MemberStatus::NAME, nested::Audit::NAME] {
        let mut stream = js.get_stream(name).await.expect("the stream exists");
        assert_eq!(stream.info().await.expect("its info").config.name, name);
    }
}
