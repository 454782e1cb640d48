//! Our services as an official client we did not write sees them: `@nats-io/services` (pinned
//! in `tests/js/package.json`, under node) discovers a `#[service]` served by two replicas,
//! lists both instances with the declared endpoint, calls it, and reads stats that count
//! exactly what each replica's health counted.
//!
//! Node and npm are required (`.ci/run` installs them); a test fails, never skips, without them.

mod fixture;
mod npm;

use std::time::Duration;

use nats_topology::{RequestContext, ServiceError, State, endpoint, service};
use nats_topology_testkit::eventually;
use serde::{Deserialize, Serialize};
use serde_json::Value;

#[service(
    name = "interop_members",
    version = "3.1.4",
    description = "what the interop test serves"
)]
struct InteropMembers;

#[derive(Deserialize)]
struct Query {
    n: u64,
}

#[derive(Serialize)]
struct Answer {
    n: u64,
    squared: u64,
    by: String,
}

/// Answers `n * n`, naming the replica and the subject; `n = 13` is refused with a 422.
#[endpoint(service = InteropMembers, subject = "interop.members.square", concurrency = 4)]
async fn square(
    query: Query,
    cx: RequestContext,
    replica: State<Replica>,
) -> Result<Answer, ServiceError> {
    if query.n == 13 {
        return Err(ServiceError::new(422, "13 is unlucky"));
    }
    Ok(Answer {
        n: query.n,
        squared: query.n * query.n,
        by: format!("{}@{}", replica.0.0, cx.subject()),
    })
}

struct Replica(&'static str);

const REQUESTS: u64 = 40;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_services_client_discovers_calls_and_counts_our_service() {
    let fx = fixture::Fixture::start().await;
    let mut replicas = Vec::new();
    for name in ["a", "b"] {
        // What the macros registered in this binary: the service and its endpoint.
        let builder = fixture::fast(fx.builder().await).state(Replica(name));
        replicas.push(fixture::Running::start(builder).await);
    }

    let url = fx.server.url();
    let (ok, stdout) = tokio::task::spawn_blocking(move || {
        npm::node(
            "services_client.mjs",
            &[
                &url,
                "interop_members",
                "interop.members.square",
                &REQUESTS.to_string(),
            ],
        )
    })
    .await
    .expect("node ran");
    assert!(ok, "the official services client failed: {stdout}");
    let seen: Value = serde_json::from_str(stdout.trim()).expect("one JSON object");

    // Discovery: both instances, with the declared version, description and endpoint.
    let instances = seen["instances"].as_array().expect("instances");
    assert_eq!(instances.len(), 2, "both replicas answer $SRV.PING: {seen}");
    for instance in instances {
        assert_eq!(instance["version"], "3.1.4", "{instance}");
        assert_eq!(instance["description"], "what the interop test serves");
        assert_eq!(
            instance["endpoints"],
            serde_json::json!([{
                "name": "square",
                "subject": "interop.members.square",
                "queue_group": "q",
            }]),
            "{instance}"
        );
    }

    // Calls: every request answered once, the unlucky one with our error code.
    let replies = seen["replies"].as_array().expect("replies");
    assert_eq!(replies.len() as u64, REQUESTS - 1, "{seen}");
    for reply in replies {
        let n = reply["n"].as_u64().expect("n");
        assert_eq!(reply["squared"].as_u64(), Some(n * n), "{reply}");
    }
    assert_eq!(
        seen["errors"],
        serde_json::json!([{ "code": 422, "description": "13 is unlucky" }])
    );

    // Stats: what each instance reports is what its health counted, and they add up.
    let stats = seen["stats"].as_array().expect("stats");
    assert_eq!(stats.len(), 2, "{seen}");
    let reported: Vec<(u64, u64)> = stats
        .iter()
        .map(|s| {
            let endpoint = &s["endpoints"][0];
            assert_eq!(endpoint["name"], "square", "{s}");
            (
                endpoint["num_requests"].as_u64().expect("num_requests"),
                endpoint["num_errors"].as_u64().expect("num_errors"),
            )
        })
        .collect();
    let mut counted: Vec<(u64, u64)> = replicas
        .iter()
        .map(|r| {
            let status = &r.health.endpoints()[0];
            (status.requests, status.errors)
        })
        .collect();
    let mut reported_sorted = reported.clone();
    reported_sorted.sort_unstable();
    counted.sort_unstable();
    assert_eq!(
        reported_sorted, counted,
        "$SRV.STATS counts what each replica's health counted"
    );
    assert_eq!(
        reported.iter().map(|(r, _)| r).sum::<u64>(),
        REQUESTS,
        "every request counted once"
    );
    assert_eq!(reported.iter().map(|(_, e)| e).sum::<u64>(), 1);
    assert!(
        reported.iter().all(|(r, _)| *r > 0),
        "both replicas answered some: {reported:?}"
    );

    for replica in replicas {
        replica.stop().await.expect("drains");
    }
    let client = fx.connect().await;
    eventually(
        Duration::from_secs(5),
        "nothing answers after the drain",
        || async {
            let ping = client.request("$SRV.PING.interop_members", "".into()).await;
            ping.is_err().then_some(())
        },
    )
    .await;
}
