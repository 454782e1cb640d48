//! Least privilege, proven by running under it, both ways: the representative service
//! (`fixture::least_privilege`: provisioning with drift and migration, queue consumers with
//! confirmed acks, dead letters and a declared output into its own stream, a relay, a bucket's
//! handle, an endpoint, a consumer lost and re-created, `plan`, the drain) lives under exactly
//! the permissions `export::permissions` generates for it, denied nothing and with no
//! violation in the server's log (and a service answers requests and `$SRV` pings under
//! them); and with any one entry of them removed, its health names the declaration that needs
//! it and the subject the server refused, instead of running on silently. Which entries a life
//! uses at all is counted in `tests/permissions_used.rs`.

mod fixture;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use async_nats::jetstream;
use async_nats::service::ServiceExt;
use fixture::least_privilege::{
    EVERY_STEP_DONE, ORDERS, PASSWORD, SERVICE, Seen, live, role, service_client, topology,
    violations_logged,
};
use fixture::{Running, admin_of, fast, users_config};
use futures::StreamExt;
use nats_topology::export::{self, Permission, Permissions, Role};
use nats_topology::model::{
    ConsumerDecl, EndpointDecl, QueueDecl, ServiceDecl, StreamDecl, StreamRef, SubscriptionDecl,
};
use nats_topology::{HandlerError, PermissionDenial, Runtime, ServiceError, Topology};
use nats_topology_testkit::NatsServer;

/// `admin` and the service's user under `permissions`.
fn server_config(permissions: &Permissions) -> String {
    users_config(&[(SERVICE, PASSWORD, permissions)])
}

async fn admin(server: &NatsServer) -> async_nats::Client {
    admin_of(&server.url()).await
}

async fn client_of(
    server: &NatsServer,
    user: &str,
    password: &str,
    inbox_prefix: &str,
) -> async_nats::Client {
    fixture::client_of(&server.url(), user, password, inbox_prefix).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_lives_under_exactly_its_generated_owner_permissions() {
    let seen = Arc::new(Seen::default());
    let permissions = export::permissions(&topology(&seen), &role());
    let life = live(&permissions, "").await;
    let report = life.report();
    assert!(
        life.denials.is_empty(),
        "denied: {:?}\n{report}",
        life.denials
    );
    for expected in EVERY_STEP_DONE {
        assert!(report.contains(expected), "{expected}:\n{report}");
    }
    assert_eq!(life.drained, Ok(()), "{report}");
    let logged = violations_logged(&life.server_log);
    assert!(logged.is_empty(), "the server logged {logged:#?}");
}

/// The entries only an outage (the leader watch waits for an election) or a consumer with
/// replicas (its session follows its leader's elections; one replica elects none while it
/// runs) uses: a life on one healthy server cannot miss them; `tests/permissions_cluster.rs`
/// runs R3 consumers through a meta leader's loss under exactly the generated permissions.
fn outage_only(entry: &Permission) -> bool {
    // The meta leader's elections, the streams', the consumers', an old consumer's, and
    // publishing into the fleet channel.
    entry.needed_by.iter().all(|n| {
        n.why.starts_with("the leader watch")
            || n.why.contains("when its consumer's leader changes")
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_entry_removed_is_named_in_health_with_the_declaration_that_needs_it() {
    let seen = Arc::new(Seen::default());
    let permissions = export::permissions(&topology(&seen), &role());
    let checked: Vec<usize> = (0..permissions.entries.len())
        .filter(|&i| !outage_only(&permissions.entries[i]))
        .collect();
    // The queue consumers, the relay, the migration, the bucket, the endpoint and its
    // service, the output and the job published from outside a handler.
    let needs = |what: &str| {
        permissions.entries.iter().any(|e| {
            e.needed_by
                .iter()
                .any(|n| n.declaration.to_string().contains(what) || n.why.contains(what))
        })
    };
    for what in [
        "billing::on_order",
        "billing::on_shipped",
        "migrate_from",
        "KV_PERM_INVOICED",
        "billing::quote",
        "service `billing`",
        "`publishes`",
        "Role::publishes",
    ] {
        assert!(needs(what), "{what}: {}", permissions.permissions_map());
    }
    assert!(checked.len() >= 40, "{}", permissions.permissions_map());
    // Several lives at once: each is mostly waiting on its server or a timeout.
    let mut failures = Vec::new();
    for chunk in checked.chunks(15) {
        let lives = futures::future::join_all(chunk.iter().map(|&i| {
            let without = permissions.without(i);
            async move { (i, live(&without, "").await) }
        }))
        .await;
        for (i, life) in lives {
            let entry = &permissions.entries[i];
            // What only `Role::publishes` needs (a publish from outside any handler) is named
            // by no declaration the runtime knows: health shows the subject denied, and the
            // step that publishes fails.
            let from_outside = entry
                .needed_by
                .iter()
                .all(|n| n.why.contains("Role::publishes"));
            let shown = if from_outside {
                life.denials.iter().any(|d| {
                    d.permission.is_none() && permissions.granting(d.action, &d.subject).count() > 0
                }) && life.steps.iter().any(|s| s == "published a job: false")
            } else {
                life.denied(entry)
            };
            if !shown {
                failures.push(format!(
                    "without {}: not named in health; denials {:?}; steps:\n{}",
                    entry.describe(),
                    life.denials,
                    life.report()
                ));
            }
            // `plan` under the service's own credentials fails at once, naming what is denied.
            for plan in life.steps.iter().filter(|s| s.starts_with("plan: ")) {
                assert!(
                    plan.starts_with("plan: ok") || plan.contains("(Permissions Violation)"),
                    "{plan}"
                );
            }
            for denial in &life.denials {
                // The message names the subject and who needs it.
                let text = denial.to_string();
                assert!(text.contains(&denial.subject), "{text}");
                if d_matches(denial, entry) {
                    for need in &entry.needed_by {
                        assert!(text.contains(&need.declaration.to_string()), "{text}");
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

fn d_matches(denial: &PermissionDenial, entry: &Permission) -> bool {
    denial.action == entry.action && denial.permission.as_deref() == Some(entry.subject.as_str())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bind_only_consumes_what_an_operator_provisioned_and_owning_is_refused_precisely() {
    let seen = Arc::new(Seen::default());
    let operator = export::permissions(&topology(&seen), &Role::operator("ops"));
    let bind_only = export::permissions(&topology(&seen), &Role::bind_only(SERVICE));
    let server = NatsServer::builder()
        .config(users_config(&[
            ("ops", "ops-pw", &operator),
            (SERVICE, PASSWORD, &bind_only),
        ]))
        .probe_user("admin", "admin")
        .start()
        .await
        .expect("server starts");

    // The service's user may not provision: the refusal names the request and the fix.
    let service = service_client(&server).await;
    let owning = fast(Runtime::builder(service.clone()))
        .topology(topology(&seen))
        .build()
        .unwrap();
    let refused = owning
        .provision()
        .await
        .expect_err("provisioning is refused");
    assert_eq!(
        refused.kind(),
        nats_topology::ProvisionErrorKind::PermissionDenied,
        "{refused}"
    );
    let text = refused.to_string();
    assert!(
        text.contains("publishing to `$JS.API.STREAM.CREATE.")
            && text.contains("export --permissions"),
        "{text}"
    );
    drop(owning);

    // The operator provisions under exactly the operator's permissions.
    let ops = client_of(
        &server,
        "ops",
        "ops-pw",
        Role::operator("ops").inbox_prefix(),
    )
    .await;
    let provisioning = Runtime::builder(ops)
        .topology(topology(&seen))
        .build()
        .unwrap();
    provisioning
        .provision()
        .await
        .expect("the operator provisions");

    // The service binds to what the operator provisioned, under the bind-only permissions.
    let runtime = fast(Runtime::builder(service.clone()))
        .bind_only()
        .topology(topology(&seen))
        .build()
        .unwrap();
    let running = Running::spawn(runtime);
    if running
        .health
        .wait_ready(Duration::from_secs(15))
        .await
        .is_err()
    {
        panic!("not ready: {}", running.health);
    }
    assert!(running.health.bind_only());
    assert!(
        running.health.to_string().contains("bind-only"),
        "{}",
        running.health
    );
    let js = jetstream::new(admin(&server).await);
    for (subject, body) in [
        ("perm.orders.created", "order-1"),
        ("perm.orders.shipped", "s-1"),
        ("perm.jobs.run", "job-1"),
    ] {
        js.publish(subject, body.into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    nats_topology_testkit::eventually(Duration::from_secs(10), "every message handled", || {
        let seen = seen.clone();
        async move {
            (seen.orders.load(Ordering::Relaxed) == 1
                && seen.shipped.load(Ordering::Relaxed) == 1
                && seen.jobs.load(Ordering::Relaxed) == 1)
                .then_some(())
        }
    })
    .await;
    assert!(running.health.denials().is_empty(), "{}", running.health);
    let health = running.health.clone();
    running.stop().await.expect("clean drain");
    assert!(health.denials().is_empty(), "{health}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_services_user_cannot_pull_ack_or_delete_this_services_consumers() {
    static OTHER: StreamDecl = StreamDecl::new("PERM_SHIPPING", &["perm.shipping.>"]);
    let seen = Arc::new(Seen::default());
    let billing = export::permissions(&topology(&seen), &role());
    let shipping_topology = Topology::new().stream(OTHER).consumer(
        ConsumerDecl::queue(
            "shipping::on_ship",
            StreamRef::Declared(&OTHER),
            QueueDecl::new("shipper"),
        ),
        |_| Box::pin(async { Ok::<(), HandlerError>(()) }),
    );
    let shipping = export::permissions(&shipping_topology, &Role::owner("shipping"));
    let server = NatsServer::builder()
        .config(users_config(&[
            (SERVICE, PASSWORD, &billing),
            ("shipping", "shipping-pw", &shipping),
        ]))
        .probe_user("admin", "admin")
        .start()
        .await
        .expect("server starts");
    let running = Running::start(
        fast(Runtime::builder(service_client(&server).await)).topology(topology(&seen)),
    )
    .await;
    let admin = admin(&server).await;
    let js = jetstream::new(admin.clone());
    js.publish("perm.orders.created", "order-1".into())
        .await
        .unwrap()
        .await
        .unwrap();

    // The other service, trying: every attempt is a violation its connection is told of.
    let (told, mut violations) = tokio::sync::mpsc::unbounded_channel::<String>();
    let other = async_nats::ConnectOptions::new()
        .user_and_password("shipping".into(), "shipping-pw".into())
        .custom_inbox_prefix("_INBOX_shipping")
        .event_callback(move |event| {
            let told = told.clone();
            async move {
                if let async_nats::Event::ServerError(e) = event {
                    let _ = told.send(e.to_string());
                }
            }
        })
        .connect(server.url())
        .await
        .unwrap();
    let pull = format!("$JS.API.CONSUMER.MSG.NEXT.{}.invoicer", ORDERS.name);
    let ack = format!("$JS.ACK.{}.invoicer.1.1.1.0.0", ORDERS.name);
    let delete = format!("$JS.API.CONSUMER.DELETE.{}.invoicer", ORDERS.name);
    let relay_delete = format!("$JS.API.CONSUMER.DELETE.{}.anything", ORDERS.name);
    for subject in [&pull, &ack, &delete, &relay_delete] {
        other
            .publish_with_reply(subject.clone(), "_INBOX_shipping.x", "{}".into())
            .await
            .unwrap();
        let said = tokio::time::timeout(Duration::from_secs(5), violations.recv())
            .await
            .expect("the server says the publish is denied")
            .unwrap();
        assert!(
            said.contains("Permissions Violation") && said.contains(subject.as_str()),
            "{said}"
        );
    }
    // And nothing happened to this service: its consumer is there and it consumes.
    let orders = js.get_stream(ORDERS.name).await.unwrap();
    orders.consumer_info("invoicer").await.expect("still there");
    js.publish("perm.orders.created", "order-2".into())
        .await
        .unwrap()
        .await
        .unwrap();
    nats_topology_testkit::eventually(Duration::from_secs(10), "both orders handled here", || {
        let seen = seen.clone();
        async move { (seen.orders.load(Ordering::Relaxed) == 2).then_some(()) }
    })
    .await;
    assert!(running.health.ready(), "{}", running.health);
    running.stop().await.expect("clean drain");
}

// -------------------------------------------------------------------------------------------
// Services: an endpoint and a core subscription, served under exactly the generated set.
// Served here by async-nats' `service` module (the same micro protocol as the runtime's
// serving, which is not on this branch yet).
// -------------------------------------------------------------------------------------------

static MEMBERS: ServiceDecl = ServiceDecl::new("members", "1.2.0");

fn served_topology() -> Topology {
    Topology::new()
        .endpoint(
            EndpointDecl::new("perm::get_member", &MEMBERS, "get", "perm.members.get"),
            |request| Box::pin(async move { Ok::<_, ServiceError>(request.payload().clone()) }),
        )
        .subscription(
            SubscriptionDecl::group("perm::audit", "perm.members.audit", "auditors"),
            |_| Box::pin(async { Ok::<(), HandlerError>(()) }),
        )
}

/// A server whose service user has `permissions`; an instance of `members` on it, echoing;
/// the subscription's queue subscriber; and the admin client (the world).
async fn serve_members(
    permissions: &Permissions,
) -> (
    NatsServer,
    async_nats::service::Service,
    async_nats::Subscriber,
    async_nats::Client,
) {
    let server = NatsServer::builder()
        .config(server_config(permissions))
        .probe_user("admin", "admin")
        .start()
        .await
        .expect("nats-server starts");
    let client = service_client(&server).await;
    let service = client
        .service_builder()
        .start("members", "1.2.0")
        .await
        .expect("the service starts");
    let mut endpoint = service
        .endpoint_builder()
        .name("get")
        .add("perm.members.get")
        .await
        .expect("the endpoint is added");
    tokio::spawn(async move {
        while let Some(request) = endpoint.next().await {
            let payload = request.message.payload.clone();
            let _ = request.respond(Ok(payload)).await;
        }
    });
    let audit = client
        .queue_subscribe("perm.members.audit", "auditors".into())
        .await
        .unwrap();
    client.flush().await.unwrap();
    let admin = admin(&server).await;
    (server, service, audit, admin)
}

#[tokio::test]
async fn a_service_answers_requests_and_pings_under_exactly_its_generated_permissions() {
    let permissions = export::permissions(&served_topology(), &role());
    let subscribed: Vec<String> = permissions
        .of(export::Verb::Subscribe)
        .map(Permission::pattern)
        .filter(|p| p.starts_with("perm.") || p.starts_with("$SRV."))
        .collect();
    assert_eq!(
        subscribed,
        [
            "$SRV.INFO",
            "$SRV.INFO.members",
            "$SRV.INFO.members.*",
            "$SRV.PING",
            "$SRV.PING.members",
            "$SRV.PING.members.*",
            "$SRV.STATS",
            "$SRV.STATS.members",
            "$SRV.STATS.members.*",
            "perm.members.audit auditors",
            "perm.members.get q",
        ]
    );
    assert!(permissions.responses.is_some());
    let (_server, service, mut audit, admin) = serve_members(&permissions).await;
    let id = service.info().await.id;

    let reply = admin
        .request("perm.members.get", "ada".into())
        .await
        .expect("the endpoint answers");
    assert_eq!(reply.payload.as_ref(), b"ada");
    for subject in [
        "$SRV.PING".to_owned(),
        "$SRV.PING.members".to_owned(),
        format!("$SRV.INFO.members.{id}"),
        format!("$SRV.STATS.members.{id}"),
    ] {
        let answer = admin
            .request(subject.clone(), "".into())
            .await
            .unwrap_or_else(|e| panic!("{subject}: {e}"));
        let answer: serde_json::Value = serde_json::from_slice(&answer.payload).unwrap();
        assert_eq!(
            (answer["name"].as_str(), answer["id"].as_str()),
            (Some("members"), Some(id.as_str())),
            "{subject}"
        );
    }
    admin
        .publish("perm.members.audit", "seen".into())
        .await
        .unwrap();
    let message = tokio::time::timeout(Duration::from_secs(10), audit.next())
        .await
        .expect("the subscription receives")
        .unwrap();
    assert_eq!(message.payload.as_ref(), b"seen");
}

#[tokio::test]
async fn without_the_right_to_answer_or_the_queue_entry_requests_go_unanswered() {
    let permissions = export::permissions(&served_topology(), &role());

    // No `allow_responses`: the request reaches the endpoint, whose answer the server drops.
    let (_server, _service, _audit, admin) = serve_members(&permissions.without_responses()).await;
    let unanswered = tokio::time::timeout(
        Duration::from_secs(2),
        admin.request("perm.members.get", "x".into()),
    )
    .await;
    assert!(
        matches!(&unanswered, Err(_) | Ok(Err(_))),
        "answered without the right to: {unanswered:?}"
    );
    assert!(
        !matches!(&unanswered, Ok(Err(e)) if e.kind() == async_nats::RequestErrorKind::NoResponders),
        "the endpoint should have subscribed: {unanswered:?}"
    );

    // No `perm.members.get q`: the endpoint's subscription is refused, nobody receives.
    let index = permissions
        .entries
        .iter()
        .position(|e| e.pattern() == "perm.members.get q")
        .unwrap();
    let (_server, _service, _audit, admin) = serve_members(&permissions.without(index)).await;
    let refused = admin.request("perm.members.get", "x".into()).await;
    assert!(
        matches!(&refused, Err(e) if e.kind() == async_nats::RequestErrorKind::NoResponders),
        "{refused:?}"
    );
}
