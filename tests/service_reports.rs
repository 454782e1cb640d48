//! `plan` and `inspect` see the services: `plan` lists every endpoint and core subscription
//! (served, nothing to provision), and `inspect` finds each declared service's live instances
//! through the NATS micro protocol (`$SRV.PING.<name>`, then `$SRV.STATS.<name>.<id>`), or
//! says that no instance answers.
//!
//! The instances here are async-nats `service` instances, which speak the same protocol as
//! the runtime's serving.

use std::collections::BTreeSet;
use std::time::Duration;

use async_nats::service::ServiceExt;
use futures::StreamExt;
use nats_topology::model::{EndpointDecl, ServiceDecl, SubscriptionDecl};
use nats_topology::report::{Served, ServedItem};
use nats_topology::{HandlerError, Runtime, ServiceError, Topology};
use nats_topology_testkit::{NatsServer, eventually};

static MEMBERS: ServiceDecl = ServiceDecl::new("members", "1.2.0").description("Member lookups");
static BILLING: ServiceDecl = ServiceDecl::new("billing", "1.0.0").queue_group("billers");

fn topology() -> Topology {
    Topology::new()
        .endpoint(
            EndpointDecl::new("app::get_member", &MEMBERS, "get", "members.get").concurrency(4),
            |request| Box::pin(async move { Ok::<_, ServiceError>(request.payload().clone()) }),
        )
        .endpoint(
            EndpointDecl::new("app::charge", &BILLING, "charge", "billing.charge"),
            |request| Box::pin(async move { Ok::<_, ServiceError>(request.payload().clone()) }),
        )
        .subscription(
            SubscriptionDecl::each_instance("app::invalidate", "cache.invalidate"),
            |_| Box::pin(async { Ok::<(), HandlerError>(()) }),
        )
        .subscription(
            SubscriptionDecl::group("app::audit", "members.audit", "auditors").concurrency(2),
            |_| Box::pin(async { Ok::<(), HandlerError>(()) }),
        )
}

#[tokio::test]
async fn plan_lists_what_is_served_with_nothing_to_provision() {
    let server = NatsServer::start().await.expect("nats-server starts");
    let client = async_nats::connect(server.url()).await.unwrap();
    let runtime = Runtime::builder(client)
        .topology(topology())
        .build()
        .unwrap();
    let plan = runtime.plan().await.unwrap();
    assert_eq!(plan.items, []);
    assert!(!plan.has_conflicts());
    let endpoint = |service: &str, version: &str, name: &str| Served::Endpoint {
        service: service.into(),
        version: version.into(),
        name: name.into(),
    };
    assert_eq!(
        plan.served,
        [
            ServedItem {
                served: endpoint("billing", "1.0.0", "charge"),
                subject: "billing.charge".into(),
                queue_group: Some("billers".into()),
                concurrency: 1,
                handler: "app::charge".into(),
            },
            ServedItem {
                served: endpoint("members", "1.2.0", "get"),
                subject: "members.get".into(),
                queue_group: Some("q".into()),
                concurrency: 4,
                handler: "app::get_member".into(),
            },
            ServedItem {
                served: Served::Subscription,
                subject: "cache.invalidate".into(),
                queue_group: None,
                concurrency: 1,
                handler: "app::invalidate".into(),
            },
            ServedItem {
                served: Served::Subscription,
                subject: "members.audit".into(),
                queue_group: Some("auditors".into()),
                concurrency: 2,
                handler: "app::audit".into(),
            },
        ]
    );
    assert_eq!(
        plan.to_string(),
        "provisioning plan:\n\
         served, nothing to provision:\n  \
         endpoint `charge` of service `billing@1.0.0` on `billing.charge`, queue group `billers`, concurrency 1 (handler `app::charge`)\n  \
         endpoint `get` of service `members@1.2.0` on `members.get`, queue group `q`, concurrency 4 (handler `app::get_member`)\n  \
         subscription on `cache.invalidate`, each_instance (every instance receives every message), concurrency 1 (handler `app::invalidate`)\n  \
         subscription on `members.audit`, queue group `auditors`, concurrency 2 (handler `app::audit`)\n"
    );
}

/// Starts an instance of `members` serving `members.get`: it echoes, and answers a request
/// whose payload is `fail` with a 400 error.
async fn members_instance(
    url: &str,
) -> (async_nats::service::Service, tokio::task::JoinHandle<()>) {
    let client = async_nats::connect(url).await.unwrap();
    let service = client
        .service_builder()
        .description("Member lookups")
        .start("members", "1.2.0")
        .await
        .unwrap();
    let mut endpoint = service
        .endpoint_builder()
        .name("get")
        .add("members.get")
        .await
        .unwrap();
    let task = tokio::spawn(async move {
        while let Some(request) = endpoint.next().await {
            let answer = if request.message.payload.as_ref() == b"fail" {
                Err(async_nats::service::error::Error {
                    status: "no such member".into(),
                    code: 400,
                })
            } else {
                Ok(request.message.payload.clone())
            };
            request.respond(answer).await.unwrap();
        }
    });
    (service, task)
}

#[tokio::test]
async fn inspect_shows_each_services_live_instances_or_that_none_answers() {
    let server = NatsServer::start().await.expect("nats-server starts");
    let url = server.url();
    let client = async_nats::connect(&url).await.unwrap();
    let runtime = Runtime::builder(client.clone())
        .topology(topology())
        .build()
        .unwrap();

    // Nothing runs yet.
    let inspection = runtime.inspect().await.unwrap();
    assert_eq!(inspection.consumers, []);
    let names: Vec<&str> = inspection
        .services
        .iter()
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(names, ["billing", "members"]);
    assert!(inspection.services.iter().all(|s| s.instances.is_empty()));
    let text = inspection.to_string();
    assert!(
        text.contains("services:\n  `billing` 1.0.0 (endpoints charge): no instance answers `$SRV.PING.billing` (within 500ms)\n  `members` 1.2.0 (endpoints get): no instance answers `$SRV.PING.members` (within 500ms)\n"),
        "{text}"
    );

    // Two instances of `members`; seven requests, two of them failing.
    let (first, _serving_first) = members_instance(&url).await;
    let (second, _serving_second) = members_instance(&url).await;
    let ids: BTreeSet<String> = [first.info().await.id, second.info().await.id].into();
    for payload in ["a", "fail", "b", "c", "fail", "d", "e"] {
        let reply = client
            .request("members.get", payload.as_bytes().to_vec().into())
            .await
            .unwrap();
        if payload != "fail" {
            assert_eq!(reply.payload.as_ref(), payload.as_bytes());
        }
    }
    // Counted once each instance has settled its last request.
    let inspection = eventually(Duration::from_secs(10), "both instances' stats", || async {
        let inspection = runtime.inspect().await.unwrap();
        let members = inspection.services.iter().find(|s| s.name == "members")?;
        let requests: u64 = members
            .instances
            .iter()
            .map(|i| i.stats.as_ref().map_or(0, |s| s.requests))
            .sum();
        (members.instances.len() == 2 && requests == 7).then_some(inspection)
    })
    .await;
    let billing = &inspection.services[0];
    assert!(billing.instances.is_empty() && billing.unreachable.is_none());
    let members = &inspection.services[1];
    let seen: BTreeSet<String> = members.instances.iter().map(|i| i.id.clone()).collect();
    assert_eq!(seen, ids);
    let mut errors = 0;
    for instance in &members.instances {
        assert_eq!(instance.version, "1.2.0");
        let stats = instance
            .stats
            .as_ref()
            .expect("each instance answers STATS");
        assert_eq!(stats.endpoints.len(), 1);
        let endpoint = &stats.endpoints[0];
        assert_eq!(
            (
                endpoint.name.as_str(),
                endpoint.subject.as_str(),
                endpoint.queue_group.as_str()
            ),
            ("get", "members.get", "q")
        );
        assert_eq!(
            (endpoint.requests, endpoint.errors),
            (stats.requests, stats.errors)
        );
        if stats.errors > 0 {
            assert_eq!(endpoint.last_error.as_deref(), Some("400:no such member"));
        }
        errors += stats.errors;
    }
    assert_eq!(errors, 2);
    let text = inspection.to_string();
    assert!(
        text.contains("  `members` 1.2.0 (endpoints get): 2 instance(s)\n"),
        "{text}"
    );
    for id in &ids {
        assert!(
            text.contains(&format!("    instance `{id}` 1.2.0: requests ")),
            "{text}"
        );
    }
    assert!(
        text.contains("      endpoint `get` on `members.get` (queue group `q`): requests "),
        "{text}"
    );
    assert!(
        text.contains("no instance answers `$SRV.PING.billing`"),
        "{text}"
    );

    // An instance that stops is no longer listed.
    first.stop().await.unwrap();
    eventually(Duration::from_secs(10), "one instance left", || async {
        let inspection = runtime.inspect().await.unwrap();
        let members = inspection.services.iter().find(|s| s.name == "members")?;
        (members.instances.len() == 1).then_some(())
    })
    .await;
}

/// Start-up validation sees the services: the runtime is not built, and every problem is
/// named at once.
#[tokio::test]
async fn build_refuses_a_captured_endpoint_and_a_misspelt_group_at_once() {
    use nats_topology::model::StreamDecl;
    static MEMBER_EVENTS: StreamDecl = StreamDecl::new("MEMBER_EVENTS", &["members.events.>"]);
    let server = NatsServer::start().await.expect("nats-server starts");
    let client = async_nats::connect(server.url()).await.unwrap();
    let topology = topology()
        .stream(MEMBER_EVENTS)
        .endpoint(
            EndpointDecl::new("app::replay", &MEMBERS, "replay", "members.events.replay"),
            |request| Box::pin(async move { Ok::<_, ServiceError>(request.payload().clone()) }),
        )
        .endpoint(
            EndpointDecl::new("app::get_member_v2", &MEMBERS, "get2", "members.get").group("qq"),
            |request| Box::pin(async move { Ok::<_, ServiceError>(request.payload().clone()) }),
        );
    let Err(error) = Runtime::builder(client).topology(topology).build() else {
        panic!("the runtime was built");
    };
    let locations: Vec<&str> = error.problems.iter().map(|p| p.location.as_str()).collect();
    assert_eq!(
        locations,
        [
            "service `members`, endpoint `replay` (handler `app::replay`)",
            "service `members`, endpoint `get` (handler `app::get_member`)",
        ],
        "{error}"
    );
    assert!(
        error.problems[0].message.contains("stream `MEMBER_EVENTS`"),
        "{error}"
    );
    assert!(
        error.problems[1].message.contains("`q` here, `qq` there"),
        "{error}"
    );
}
