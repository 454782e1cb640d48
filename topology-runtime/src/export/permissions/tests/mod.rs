use std::time::Duration;

use topology_core::model::{
    AckMode, BroadcastDecl, ConsumerDecl, Delivery, QueueDecl, Retention, StreamDecl, StreamRef,
};
use topology_core::service::{EndpointDecl, ServiceDecl, SubscriptionDecl};

use super::*;
use crate::handler::HandlerError;

mod entries;
mod outputs;

static ORDERS: StreamDecl = StreamDecl::new("ORDERS", &["orders.>"]);
static AUDIT: StreamDecl = StreamDecl::new("AUDIT", &["audit.>"]).external();
static MEMBERS: ServiceDecl = ServiceDecl::new("members", "1.2.0");
static SLOW: ServiceDecl = ServiceDecl::new("slow", "0.1.0").queue_group("slowpokes");

fn reply(_: crate::service::Request) -> crate::service::ReplyFuture {
    Box::pin(async { Ok::<_, crate::service::ServiceError>(bytes::Bytes::new()) })
}

fn listen(_: crate::service::Request) -> crate::handler::HandlerFuture {
    Box::pin(async { Ok::<(), HandlerError>(()) })
}

fn handler()
-> impl Fn(crate::handler::Incoming) -> crate::handler::HandlerFuture + Send + Sync + 'static {
    |_| Box::pin(async { Ok::<(), HandlerError>(()) })
}

/// Every kind of declaration there is, once.
fn every_kind() -> Topology {
    Topology::new()
        .stream(ORDERS)
        .consumer(
            ConsumerDecl::queue(
                "svc::pull",
                StreamRef::Declared(&ORDERS),
                QueueDecl::new("pull")
                    .dead_letter("orders.dead")
                    .migrate_from("pull-v1")
                    .ack(AckMode::Confirmed)
                    .ack_wait(Duration::from_secs(5)),
            )
            .subjects(&["orders.created"])
            .publishes(&["orders.billed", "invoices.*.issued"]),
            handler(),
        )
        .consumer(
            ConsumerDecl::queue(
                "svc::push",
                StreamRef::Declared(&ORDERS),
                QueueDecl::new("push").delivery(Delivery::Push),
            ),
            handler(),
        )
        .consumer(
            ConsumerDecl::broadcast(
                "svc::relay",
                StreamRef::Declared(&ORDERS),
                BroadcastDecl::new(),
            )
            .subjects(&["orders.shipped"])
            .publishes(&["sessions.>"]),
            handler(),
        )
        .consumer(
            ConsumerDecl::queue(
                "svc::audit",
                StreamRef::Declared(&AUDIT),
                QueueDecl::new("audit"),
            ),
            handler(),
        )
        .consumer(
            ConsumerDecl::queue(
                "svc::named",
                StreamRef::Named("LEDGER"),
                QueueDecl::new("named"),
            ),
            handler(),
        )
        .endpoint(
            EndpointDecl::new("svc::get_member", &MEMBERS, "get", "members.get"),
            reply,
        )
        .endpoint(
            EndpointDecl::new("svc::put_member", &MEMBERS, "put", "members.*.put").group("writers"),
            reply,
        )
        .endpoint(
            EndpointDecl::new("svc::slow", &SLOW, "crawl", "slow.crawl")
                .timeout(Duration::from_secs(300)),
            reply,
        )
        .subscription(
            SubscriptionDecl::group("svc::audit_member", "members.audit", "auditors"),
            listen,
        )
        .subscription(
            SubscriptionDecl::each_instance("svc::invalidate", "cache.invalidate.>"),
            listen,
        )
}

#[test]
fn roles_differ_in_what_they_may_change() {
    let topology = every_kind();
    let owner = permissions(&topology, &Role::owner("svc"));
    let bind = permissions(&topology, &Role::bind_only("svc"));
    let operator = permissions(&topology, &Role::operator("ops"));
    let create = "$JS.API.STREAM.CREATE.ORDERS";
    let pause = "$JS.API.CONSUMER.PAUSE.ORDERS.pull-v1";
    let pull = "$JS.API.CONSUMER.MSG.NEXT.ORDERS.pull";
    let relay = "$JS.API.CONSUMER.CREATE.ORDERS.relay_x_2.orders.shipped";
    assert!(owner.allows(Verb::Publish, create) && owner.allows(Verb::Publish, pause));
    assert!(!bind.allows(Verb::Publish, create) && !bind.allows(Verb::Publish, pause));
    assert!(!bind.allows(
        Verb::Publish,
        "$JS.API.CONSUMER.CREATE.ORDERS.pull.orders.created"
    ));
    assert!(bind.allows(Verb::Publish, pull) && bind.allows(Verb::Publish, relay));
    assert!(bind.allows(Verb::Publish, "$JS.API.CONSUMER.INFO.ORDERS.pull"));
    assert!(operator.allows(Verb::Publish, create) && operator.allows(Verb::Publish, pause));
    assert!(!operator.allows(Verb::Publish, pull) && !operator.allows(Verb::Publish, relay));
    assert!(!operator.allows(Verb::Publish, "orders.created"));
    assert!(operator.allows(Verb::Subscribe, "_INBOX_ops.x"));
    // Every role's requests wait for leaders: the leader watch, on what each role touches,
    // and its fleet channel under its own inbox prefix.
    for (role, inbox) in [
        (&owner, "_INBOX_svc"),
        (&bind, "_INBOX_svc"),
        (&operator, "_INBOX_ops"),
    ] {
        let fleet = format!("{inbox}._NT_FLEET.WAITING.$JS.API");
        assert!(role.allows(Verb::Publish, &fleet) && role.allows(Verb::Subscribe, &fleet));
        for subject in [
            "$JS.EVENT.ADVISORY.DOMAIN.LEADER_ELECTED",
            "$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED.ORDERS",
            "$JS.EVENT.ADVISORY.CONSUMER.LEADER_ELECTED.ORDERS.pull",
        ] {
            assert!(role.allows(Verb::Subscribe, subject), "{subject}");
        }
    }
    // Only who migrates waits on the old consumer; only who runs relays on theirs.
    let old = "$JS.EVENT.ADVISORY.CONSUMER.LEADER_ELECTED.ORDERS.pull-v1";
    assert!(owner.allows(Verb::Subscribe, old) && operator.allows(Verb::Subscribe, old));
    let relays = "$JS.EVENT.ADVISORY.CONSUMER.LEADER_ELECTED.ORDERS.relay_x_2";
    assert!(bind.allows(Verb::Subscribe, relays) && !operator.allows(Verb::Subscribe, relays));
    // The operator inspects the services and serves nothing.
    assert!(operator.allows(Verb::Publish, "$SRV.PING.members"));
    assert!(operator.allows(Verb::Publish, "$SRV.STATS.members.abc"));
    assert!(!operator.allows(Verb::Publish, "$SRV.INFO.members"));
    assert!(!operator.allows_queue("members.get", "q"));
    assert!(!operator.allows(Verb::Subscribe, "$SRV.PING"));
    assert!(operator.responses.is_none());
    // A bind-only replica serves as an owner does.
    assert!(bind.allows_queue("members.get", "q") && bind.responses.is_some());
}

#[test]
fn queue_entries_follow_nats_server_rules() {
    let topology = Topology::new()
        .endpoint(
            EndpointDecl::new("svc::get_member", &MEMBERS, "get", "members.get"),
            reply,
        )
        // Every instance sees everything under `members.`: it covers the endpoint's entry.
        .subscription(
            SubscriptionDecl::each_instance("svc::tap", "members.>"),
            listen,
        );
    let p = permissions(&topology, &Role::owner("svc"));
    let members: Vec<String> = p
        .of(Verb::Subscribe)
        .filter(|e| e.subject.starts_with("members"))
        .map(Permission::pattern)
        .collect();
    assert_eq!(members, ["members.>"]);
    assert!(p.allows_queue("members.get", "q") && p.allows_queue("members.get", "any"));
    let merged = p
        .of(Verb::Subscribe)
        .find(|e| e.subject == "members.>")
        .unwrap();
    assert!(
        merged
            .needed_by
            .iter()
            .any(|n| n.why.contains("svc::get_member"))
    );
    // Without it, the endpoint's own entry is written as nats-server reads it.
    let alone = permissions(
        &Topology::new().endpoint(
            EndpointDecl::new("svc::get_member", &MEMBERS, "get", "members.get"),
            reply,
        ),
        &Role::owner("svc"),
    );
    let entry = alone
        .of(Verb::Subscribe)
        .find(|e| e.subject == "members.get")
        .unwrap();
    assert_eq!(entry.pattern(), "members.get q");
    assert_eq!(
        entry.describe(),
        "subscribe `members.get` (queue group `q`)"
    );
    let block = alone.server_config("$SVC_PASSWORD");
    assert!(block.contains("\"members.get q\","), "{block}");
    assert!(
        block.contains("allow_responses = { max: 1, expires: \"120000ms\" }"),
        "{block}"
    );
    let json = alone.to_json();
    assert!(
        json["sub"]["allow"]
            .as_array()
            .unwrap()
            .contains(&"members.get q".into())
    );
    assert_eq!(
        json["resp"],
        serde_json::json!({ "max": 1, "ttl": 120_000_000_000u64 })
    );
    assert!(alone.without_responses().responses.is_none());
    // Nothing served: no right to answer.
    assert!(
        permissions(&Topology::new(), &Role::owner("svc"))
            .responses
            .is_none()
    );
}

#[test]
fn outputs_are_granted_where_declared_and_named_by_their_handler() {
    let p = permissions(&every_kind(), &Role::owner("svc"));
    let pull = Declaration::Consumer {
        stream: "ORDERS".into(),
        handler: "svc::pull".into(),
    };
    let relay = Declaration::Consumer {
        stream: "ORDERS".into(),
        handler: "svc::relay".into(),
    };
    for (subject, declaration) in [
        ("orders.billed", &pull),
        ("invoices.*.issued", &pull),
        ("sessions.>", &relay),
    ] {
        let entry = p
            .entries
            .iter()
            .find(|e| e.action == Verb::Publish && e.subject == subject)
            .unwrap_or_else(|| panic!("{subject} not granted:\n{}", p.permissions_map()));
        assert!(
            entry
                .needed_by
                .iter()
                .any(|n| &n.declaration == declaration && n.why.contains("`publishes`")),
            "{entry:?}"
        );
    }
    // The other roles: bind-only publishes as the owner does; the operator publishes nothing.
    let bind = permissions(&every_kind(), &Role::bind_only("svc"));
    assert!(bind.allows(Verb::Publish, "orders.billed"));
    let operator = permissions(&every_kind(), &Role::operator("ops"));
    assert!(!operator.allows(Verb::Publish, "orders.billed"));
    assert!(!operator.allows(Verb::Publish, "sessions.x"));
}

#[test]
fn publishing_into_every_owned_stream_is_granted_only_when_asked_with_its_reason() {
    let wide = permissions(
        &every_kind(),
        &Role::owner("svc").publish_into_owned_streams(),
    );
    assert!(
        Role::owner("svc")
            .publish_into_owned_streams()
            .publishes_into_owned_streams()
    );
    let entry = wide
        .entries
        .iter()
        .find(|e| e.action == Verb::Publish && e.subject == "orders.>")
        .expect("every subject of the owned stream");
    // It covers the handler's own `orders.billed`, whose need it now lists beside its own.
    assert!(!wide.entries.iter().any(|e| e.subject == "orders.billed"));
    let reasons: Vec<&str> = entry.needed_by.iter().map(|n| n.why.as_str()).collect();
    assert!(
        reasons
            .iter()
            .any(|r| r.contains("`publish_into_owned_streams`") && r.contains("compromised")),
        "{reasons:?}"
    );
    assert!(
        reasons.iter().any(|r| r.contains("`publishes`")),
        "{reasons:?}"
    );
    // Never an external stream's, nor for the operator.
    assert!(!wide.allows(Verb::Publish, "audit.written"));
    let operator = permissions(
        &every_kind(),
        &Role::operator("ops").publish_into_owned_streams(),
    );
    assert!(!operator.allows(Verb::Publish, "orders.created"));
}

#[test]
fn the_consumer_migrated_from_is_deleted_only_by_who_deletes_it_on_that_retention() {
    static LIMITS: StreamDecl = StreamDecl::new("LIMITS", &["limits.>"]);
    static INTEREST: StreamDecl =
        StreamDecl::new("INTEREST", &["interest.>"]).retention(Retention::Interest);
    static WORK: StreamDecl = StreamDecl::new("WORK", &["work.>"]).retention(Retention::WorkQueue);
    static ELSEWHERE: StreamDecl = StreamDecl::new("ELSEWHERE", &["elsewhere.>"]).external();
    let migrating = |stream: &'static StreamDecl| {
        ConsumerDecl::queue(
            "svc::migrating",
            StreamRef::Declared(stream),
            QueueDecl::new("v2").migrate_from("v1"),
        )
    };
    let topology = Topology::new()
        .stream(LIMITS)
        .stream(INTEREST)
        .stream(WORK)
        .stream(ELSEWHERE)
        .consumer(migrating(&LIMITS), handler())
        .consumer(migrating(&INTEREST), handler())
        .consumer(migrating(&WORK), handler())
        .consumer(migrating(&ELSEWHERE), handler())
        .consumer(
            ConsumerDecl::queue(
                "svc::named",
                StreamRef::Named("UNDECLARED"),
                QueueDecl::new("v2").migrate_from("v1"),
            ),
            handler(),
        );
    let delete = |stream: &str| format!("$JS.API.CONSUMER.DELETE.{stream}.v1");
    // (stream, the owner deletes it, the operator's `provision` deletes it)
    for (stream, owner, operator) in [
        // A running instance retires it once nobody pulls from it; `provision` never does.
        ("LIMITS", true, false),
        ("INTEREST", true, false),
        // The migration deletes it before creating the new one, whoever provisions.
        ("WORK", true, true),
        // The retention is not known here: it may be a work-queue stream.
        ("ELSEWHERE", true, true),
        ("UNDECLARED", true, true),
    ] {
        let p = permissions(&topology, &Role::owner("svc"));
        assert_eq!(
            p.allows(Verb::Publish, &delete(stream)),
            owner,
            "owner, {stream}"
        );
        let p = permissions(&topology, &Role::operator("ops"));
        assert_eq!(
            p.allows(Verb::Publish, &delete(stream)),
            operator,
            "operator, {stream}"
        );
        // Both pause it and read it.
        for p in [
            permissions(&topology, &Role::owner("svc")),
            permissions(&topology, &Role::operator("ops")),
        ] {
            assert!(p.allows(
                Verb::Publish,
                &format!("$JS.API.CONSUMER.PAUSE.{stream}.v1")
            ));
        }
        // A bind-only instance never migrates.
        let p = permissions(&topology, &Role::bind_only("svc"));
        assert!(
            !p.allows(Verb::Publish, &delete(stream)),
            "bind-only, {stream}"
        );
    }
    let p = permissions(&topology, &Role::owner("svc"));
    let why = |stream: &str| {
        p.entries
            .iter()
            .find(|e| e.subject == delete(stream))
            .map(|e| e.needed_by[0].why.clone())
            .unwrap()
    };
    assert!(why("WORK").contains("work-queue"), "{}", why("WORK"));
    assert!(why("LIMITS").contains("retirement"), "{}", why("LIMITS"));
}
