//! Subject transforms: the compile-time check (`topology_core::transform`, which `#[stream]`
//! and start-up validation call) gives the verdict the pinned nats-server gives, case by case:
//! each transform is also sent to a real server, as a source's transform of a new stream, and
//! the server's answer (created, or refused) must be the check's. A hand-built topology with a
//! transform the server would refuse fails validation naming the stream, the key and the token.

mod fixture;

use async_nats::jetstream::stream::{self, Source, SubjectTransform};
use nats_topology::Topology;
use nats_topology::model::{Origin, StreamDecl};
use topology_core::transform::check_transform;

/// Transforms of every kind the server parses: positions, functions, their arguments, `>`.
const CASES: &[(&str, &str)] = &[
    ("billing.*.paid", "ledger.*.paid"),
    ("billing.*.paid", "ledger.{{wildcard(1)}}.paid"),
    ("billing.*.paid", "ledger.$1.paid"),
    ("billing.*.paid", "ledger.$2.paid"),
    ("billing.*.paid", "ledger.{{wildcard(2)}}.paid"),
    ("billing.*", "copy.>"),
    ("billing.>", "copy.x"),
    ("billing.>", "copy.>"),
    ("", "prefix.>"),
    ("orders.*.*", "o.{{partition(16,1)}}.$1.$2"),
    ("orders.*.*", "o.{{partition(16,1,2)}}"),
    ("orders.*.*", "o.{{partition(16,3)}}"),
    ("orders.*", "o.{{partition()}}"),
    ("orders.*", "o.{{partition(2147483648)}}"),
    ("orders.a", "o.{{partition(4)}}"),
    ("orders.a", "o.{{random(4)}}"),
    ("orders.a", "o.{{left(1,2)}}"),
    ("orders.*", "o.{{splat(1)}}"),
    ("orders.*", "o.{{wildcard()}}"),
    ("orders.*", "o.{{wildcard(1,2)}}"),
    ("orders.*", "o.{{wildcard(x)}}"),
    ("orders.*", "o.{{Wildcard(1)}}"),
    ("orders.*", "o.{{WILDCARD(1)}}"),
    ("orders.*", "o.{{ wildcard(1) }}"),
    ("orders.*", "o.{{splitFromLeft(1,3)}}"),
    ("orders.*", "o.{{SliceFromRight(1,2)}}"),
    ("orders.*", "o.{{split(1,-)}}"),
    ("orders.*", "o.{{split(1,a.b)}}"),
    ("orders.*", "o.{{right(1)}}"),
    ("orders.*", "o.{{partition(10, 1)}}"),
    ("orders.*", "o.$x"),
    ("orders.*", "o.{{left(1,-2147483649)}}"),
    ("orders.*", "o.{{left(1,-2147483648)}}"),
    ("orders.*", "o.{{partition(-3000000000)}}"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_check_gives_the_servers_verdict_on_every_transform() {
    let fx = fixture::Fixture::start().await;
    let js = fx.jetstream().await;
    let mut disagreements = Vec::new();
    for (i, (src, dest)) in CASES.iter().enumerate() {
        let ours = check_transform(src, dest);
        let server = js
            .create_stream(stream::Config {
                name: format!("T{i}"),
                sources: Some(vec![Source {
                    name: "ORIGIN".into(),
                    subject_transforms: vec![SubjectTransform {
                        source: (*src).into(),
                        destination: (*dest).into(),
                    }],
                    ..Default::default()
                }]),
                ..Default::default()
            })
            .await;
        if ours.is_ok() != server.is_ok() {
            disagreements.push(format!(
                "{src:?} -> {dest:?}: ours {ours:?}, the server's {:?}",
                server.map(|_| ()).map_err(|e| e.to_string())
            ));
        }
    }
    assert!(
        disagreements.is_empty(),
        "the check and the server disagree:\n{}",
        disagreements.join("\n")
    );
    // Both verdicts occur: the cases test something.
    let refused = CASES
        .iter()
        .filter(|(s, d)| check_transform(s, d).is_err())
        .count();
    assert!(refused > 10 && refused < CASES.len() - 10, "{refused}");
}

#[test]
fn a_hand_built_stream_with_a_transform_the_server_refuses_fails_validation() {
    static ORIGINS: [Origin; 1] = [Origin::named("BILLING")
        .filter("billing.*.paid")
        .transform("ledger.{{wildcard(2)}}.paid")];
    let topology = Topology::new().stream(StreamDecl::sourced("LEDGER", &ORIGINS));
    let problems = topology_runtime::validate::validate(&topology)
        .expect_err("refused")
        .problems;
    let message = problems
        .iter()
        .map(|p| format!("{}: {}", p.location, p.message))
        .collect::<Vec<_>>()
        .join("\n");
    for named in ["LEDGER", "`sources`", "`{{wildcard(2)}}`", "billing.*.paid"] {
        assert!(message.contains(named), "{named} in {message}");
    }
}
