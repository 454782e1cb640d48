//! What the permissions say beyond the entries of each declaration: other domains and inbox
//! prefixes, the server block and the JSON beside it, a pinned client's own unpin, the old
//! consumer a partitioned group migrates from.

use super::*;

#[test]
fn domains_prefixes_and_extra_outputs() {
    let role = Role::owner("svc")
        .with_domain("edge")
        .with_inbox_prefix("_I.svc")
        .publishes("invoices.>");
    let p = permissions(&every_kind(), &role);
    assert!(p.allows(Verb::Publish, "$JS.edge.API.CONSUMER.MSG.NEXT.ORDERS.pull"));
    assert!(!p.allows(Verb::Publish, "$JS.API.CONSUMER.MSG.NEXT.ORDERS.pull"));
    assert!(p.allows(Verb::Publish, "_I.svc._NT_FLEET.ANSWERS.$JS.edge.API"));
    assert!(p.allows(Verb::Subscribe, "_I.svc.x.y"));
    assert!(p.allows(Verb::Publish, "invoices.paid"));
    assert_eq!(Role::owner("my service.v2").service(), "my_service_v2");
    // Advisories keep their subjects in a domain; behind an arbitrary API prefix the runtime
    // listens to none, and none is granted.
    for subject in [
        "$JS.EVENT.ADVISORY.DOMAIN.LEADER_ELECTED",
        "$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED.ORDERS",
        "$JS.EVENT.ADVISORY.CONSUMER.LEADER_ELECTED.ORDERS.pull",
    ] {
        assert!(p.allows(Verb::Subscribe, subject), "{subject}");
    }
    let imported = permissions(
        &every_kind(),
        &Role::owner("svc").with_api_prefix("JS.hub.API"),
    );
    assert!(imported.allows(Verb::Publish, "JS.hub.API.CONSUMER.MSG.NEXT.ORDERS.pull"));
    assert!(imported.allows(Verb::Publish, "_INBOX_svc._NT_FLEET.WAITING.JS.hub.API"));
    assert!(
        !imported
            .entries
            .iter()
            .any(|e| e.subject.starts_with("$JS.EVENT.ADVISORY.")),
        "{}",
        imported.permissions_map()
    );
}

#[test]
fn the_server_block_and_the_json_list_the_same_entries_with_their_reasons() {
    let p = permissions(&every_kind(), &Role::owner("svc"));
    let block = p.server_config("$SVC_PASSWORD");
    assert!(block.contains("user: \"svc\""), "{block}");
    assert!(block.contains("password: $SVC_PASSWORD"), "{block}");
    assert!(block.contains("# consumer `svc::pull` of stream `ORDERS`: pulls its messages"));
    let json = p.to_json();
    let publish = json["pub"]["allow"].as_array().unwrap();
    let subscribe = json["sub"]["allow"].as_array().unwrap();
    assert_eq!(publish.len() + subscribe.len(), p.entries.len());
    for entry in &p.entries {
        assert!(
            block.contains(&quoted(&entry.pattern())),
            "{}",
            entry.pattern()
        );
    }
    assert!(
        block.contains("allow_responses = { max: 1, expires: \"300000ms\" }"),
        "{block}"
    );
    assert!(block.contains("# every replica: endpoint `crawl` of service `slow` (handler `svc::slow`): answers its requests"), "{block}");
    assert_eq!(json["resp"]["ttl"], 300_000_000_000u64);
    assert!(!block.contains("s3cret"));
    let literal = p.server_config("pa\"ss");
    assert!(literal.contains("password: \"pa\\\"ss\""));
    assert_eq!(p.without(0).entries.len(), p.entries.len() - 1);
}

#[test]
fn a_pinned_client_may_unpin_its_own_consumer_only() {
    let topology = Topology::new().stream(ORDERS).consumer(
        ConsumerDecl::queue(
            "svc::active",
            StreamRef::Declared(&ORDERS),
            QueueDecl::new("active").pinned_client(Duration::from_secs(10)),
        ),
        handler(),
    );
    for role in [Role::owner("svc"), Role::bind_only("svc")] {
        let p = permissions(&topology, &role);
        assert!(p.allows(Verb::Publish, "$JS.API.CONSUMER.UNPIN.ORDERS.active"));
        assert!(!p.allows(Verb::Publish, "$JS.API.CONSUMER.UNPIN.ORDERS.other"));
    }
    // Without a pinned client, no unpin.
    let p = permissions(&every_kind(), &Role::owner("svc"));
    assert!(!p.allows(Verb::Publish, "$JS.API.CONSUMER.UNPIN.ORDERS.pull"));
}

#[test]
fn a_partitioned_group_migrating_reads_the_old_consumer_and_deletes_it_without_creating_it() {
    use topology_core::model::SubjectTransform;
    static ROUTED: StreamDecl =
        StreamDecl::new("ROUTED", &["routed.*.paid"]).subject_transform(SubjectTransform::new(
            "routed.*.paid",
            "{{partition(2,1)}}.routed.{{wildcard(1)}}.paid",
        ));
    let topology = Topology::new().stream(ROUTED).consumer(
        ConsumerDecl::queue(
            "svc::billing",
            StreamRef::Declared(&ROUTED),
            QueueDecl::new("billing-v2")
                .partitioned(2, &[1])
                .migrate_from("billing"),
        )
        .subjects(&["routed.*.paid"]),
        handler(),
    );
    let api = |s: &str| format!("$JS.API.{s}");
    let owner = permissions(&topology, &Role::owner("svc"));
    for subject in [
        "CONSUMER.MSG.NEXT.ROUTED.billing",
        "CONSUMER.INFO.ROUTED.billing",
        "CONSUMER.DELETE.ROUTED.billing",
        "CONSUMER.MSG.NEXT.ROUTED.billing-v2-p1",
        // Once it is gone, start-up checks that it was no partitioned group.
        "CONSUMER.INFO.ROUTED.billing-p0",
    ] {
        assert!(owner.allows(Verb::Publish, &api(subject)), "{subject}");
    }
    // Never created, updated or paused here: read to its end as the old fleet left it.
    for subject in [
        "CONSUMER.CREATE.ROUTED.billing",
        "CONSUMER.CREATE.ROUTED.billing.routed.*.paid",
        "CONSUMER.DURABLE.CREATE.ROUTED.billing",
        "CONSUMER.PAUSE.ROUTED.billing",
    ] {
        assert!(!owner.allows(Verb::Publish, &api(subject)), "{subject}");
    }
    // The operator's `provision` neither reads it to its end nor deletes it.
    let operator = permissions(&topology, &Role::operator("ops"));
    assert!(!operator.allows(Verb::Publish, &api("CONSUMER.DELETE.ROUTED.billing")));
}

#[test]
fn a_new_partition_count_reads_the_old_partitions_and_deletes_those_it_names() {
    use topology_core::model::SubjectTransform;
    static ROUTED: StreamDecl =
        StreamDecl::new("ROUTED", &["routed.*.paid"]).subject_transform(SubjectTransform::new(
            "routed.*.paid",
            "{{partition(2,1)}}.v2.routed.{{wildcard(1)}}.paid",
        ));
    // From 3 partitions to 2: `billing-p2` is named by no new partition, so it is left.
    let topology = Topology::new().stream(ROUTED).consumer(
        ConsumerDecl::queue(
            "svc::billing",
            StreamRef::Declared(&ROUTED),
            QueueDecl::new("billing-v2")
                .partitioned(2, &[1])
                .migrate_from("billing")
                .migrate_from_partitions(3),
        )
        .subjects(&["routed.*.paid"]),
        handler(),
    );
    let api = |s: &str| format!("$JS.API.{s}");
    let owner = permissions(&topology, &Role::owner("svc"));
    for old in ["billing-p0", "billing-p1", "billing-p2"] {
        for verb in ["MSG.NEXT", "INFO", "UNPIN"] {
            let subject = api(&format!("CONSUMER.{verb}.ROUTED.{old}"));
            assert!(owner.allows(Verb::Publish, &subject), "{subject}");
        }
        assert!(owner.allows(Verb::Publish, &format!("$JS.ACK.ROUTED.{old}.x")));
        // Never created, updated or paused here.
        for verb in ["CREATE", "DURABLE.CREATE", "PAUSE"] {
            let subject = api(&format!("CONSUMER.{verb}.ROUTED.{old}"));
            assert!(!owner.allows(Verb::Publish, &subject), "{subject}");
        }
    }
    for (old, deleted) in [
        ("billing-p0", true),
        ("billing-p1", true),
        ("billing-p2", false),
    ] {
        let subject = api(&format!("CONSUMER.DELETE.ROUTED.{old}"));
        assert_eq!(owner.allows(Verb::Publish, &subject), deleted, "{subject}");
    }
    // Start-up reads that the old group has no fourth partition, and is not a plain consumer;
    // nothing else of either name.
    for name in ["billing-p3", "billing"] {
        let info = api(&format!("CONSUMER.INFO.ROUTED.{name}"));
        assert!(owner.allows(Verb::Publish, &info), "{info}");
        let next = api(&format!("CONSUMER.MSG.NEXT.ROUTED.{name}"));
        assert!(!owner.allows(Verb::Publish, &next), "{next}");
    }
}
