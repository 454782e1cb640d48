//! The entries of the topology with every kind of declaration, for its owner: each
//! declaration contributes what it needs, nothing else is granted, and no entry is covered
//! by another.

use super::*;

fn needed_by<'a>(p: &'a Permissions, declaration: &'a Declaration) -> Vec<&'a Permission> {
    p.entries
        .iter()
        .filter(|e| e.needed_by.iter().any(|n| &n.declaration == declaration))
        .collect()
}

#[test]
fn every_declared_kind_contributes_entries() {
    let topology = every_kind();
    let p = permissions(&topology, &Role::owner("svc"));
    let mut declarations = vec![Declaration::Service];
    for stream in ["ORDERS", "AUDIT", "LEDGER"] {
        declarations.push(Declaration::Stream(stream.to_owned()));
    }
    for consumer in topology.consumers() {
        declarations.push(Declaration::Consumer {
            stream: consumer.decl.stream.name().to_owned(),
            handler: consumer.decl.handler.to_owned(),
        });
    }
    for declaration in &declarations {
        assert!(
            !needed_by(&p, declaration).is_empty(),
            "{declaration} contributes no entry:\n{}",
            p.permissions_map()
        );
    }
    // Each service, endpoint and subscription, named in the reasons of what it needs.
    let mut served = vec!["service `members`".to_owned(), "service `slow`".to_owned()];
    served.extend(
        topology
            .endpoints()
            .iter()
            .map(|e| e.decl.handler.to_owned()),
    );
    served.extend(
        topology
            .subscriptions()
            .iter()
            .map(|s| s.decl.handler.to_owned()),
    );
    for what in &served {
        assert!(
            p.entries
                .iter()
                .any(|e| e.needed_by.iter().any(|n| n.why.contains(what.as_str()))),
            "{what} contributes no entry:\n{}",
            p.permissions_map()
        );
    }
    let responses = p.responses.as_ref().expect("endpoints answer requests");
    assert_eq!(responses.max, 1);
    // The longest endpoint timeout, longer than nats-server's default expiry.
    assert_eq!(responses.expires, Duration::from_secs(300));
    for what in [
        "svc::get_member",
        "svc::put_member",
        "svc::slow",
        "service `members`",
        "service `slow`",
    ] {
        assert!(
            responses.needed_by.iter().any(|n| n.why.contains(what)),
            "{what}: {responses:?}"
        );
    }
    for (subject, queue) in [
        ("members.get", "q"),
        ("members.7.put", "writers"),
        ("slow.crawl", "slowpokes"),
        ("members.audit", "auditors"),
    ] {
        assert!(
            p.allows_queue(subject, queue),
            "{subject} in {queue} denied"
        );
        // Only in its own queue group, and in one.
        assert!(
            !p.allows_queue(subject, "other"),
            "{subject} in other allowed"
        );
        assert!(
            !p.allows(Verb::Subscribe, subject),
            "{subject} without a group allowed"
        );
    }
    for name in ["members", "slow"] {
        for verb in ["PING", "INFO", "STATS"] {
            for subject in [
                format!("$SRV.{verb}"),
                format!("$SRV.{verb}.{name}"),
                format!("$SRV.{verb}.{name}.Yq2wnRDjSbKRZDzvKVOmYZ"),
            ] {
                assert!(p.allows(Verb::Subscribe, &subject), "{subject} denied");
            }
        }
        // The self-probe: a round trip to its own `$SRV.PING.<name>.<id>`, and no other verb.
        assert!(p.allows(Verb::Publish, &format!("$SRV.PING.{name}.Yq2wnRDjS")));
        assert!(!p.allows(Verb::Publish, &format!("$SRV.INFO.{name}.Yq2wnRDjS")));
    }
    assert!(p.allows(Verb::Subscribe, "cache.invalidate.members.7"));
    // A core subscription's probe: a round trip through an inbox of the service's own.
    assert!(p.allows(Verb::Publish, "_INBOX_svc.probe.1"));
    assert!(!p.allows(Verb::Publish, "_INBOX.probe.1"));
    assert!(!p.allows(Verb::Subscribe, "$SRV.PING.other"));
    assert!(!p.allows(Verb::Subscribe, "$SRV.>"));
    // And each setting that uses a subject of its own.
    for (action, subject) in [
        (Verb::Publish, "orders.dead"),
        (Verb::Publish, "$JS.API.CONSUMER.PAUSE.ORDERS.pull-v1"),
        (Verb::Publish, "$JS.API.CONSUMER.DELETE.ORDERS.pull-v1"),
        (
            Verb::Publish,
            "$JS.API.CONSUMER.CREATE.ORDERS.pull.orders.created",
        ),
        (Verb::Publish, "$JS.API.CONSUMER.MSG.NEXT.ORDERS.pull"),
        (Verb::Publish, "$JS.ACK.ORDERS.pull.1.2.3.4.5"),
        (Verb::Subscribe, "_NT_DELIVER.ORDERS.push"),
        (
            Verb::Publish,
            "$JS.API.CONSUMER.CREATE.ORDERS.relay_x_2.orders.shipped",
        ),
        (Verb::Publish, "$JS.API.CONSUMER.MSG.NEXT.ORDERS.relay_x_2"),
        (Verb::Publish, "$JS.API.STREAM.INFO.AUDIT"),
        (Verb::Publish, "$JS.API.STREAM.INFO.LEDGER"),
        (Verb::Publish, "$JS.API.CONSUMER.MSG.NEXT.LEDGER.named"),
        // What the handlers declare they publish (`publishes`), patterns included.
        (Verb::Publish, "orders.billed"),
        (Verb::Publish, "invoices.7.issued"),
        (Verb::Publish, "sessions.ada.seen"),
        (Verb::Subscribe, "_INBOX_svc.abc.*"),
        // The leader watch: the meta leader's elections, and those of the streams and
        // consumers this service provisions, reads and runs (a relay's under any name).
        (Verb::Subscribe, "$JS.EVENT.ADVISORY.DOMAIN.LEADER_ELECTED"),
        (
            Verb::Subscribe,
            "$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED.ORDERS",
        ),
        (
            Verb::Subscribe,
            "$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED.AUDIT",
        ),
        (
            Verb::Subscribe,
            "$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED.LEDGER",
        ),
        (
            Verb::Subscribe,
            "$JS.EVENT.ADVISORY.CONSUMER.LEADER_ELECTED.ORDERS.pull",
        ),
        (
            Verb::Subscribe,
            "$JS.EVENT.ADVISORY.CONSUMER.LEADER_ELECTED.ORDERS.pull-v1",
        ),
        (
            Verb::Subscribe,
            "$JS.EVENT.ADVISORY.CONSUMER.LEADER_ELECTED.ORDERS.relay_x_2",
        ),
        (
            Verb::Subscribe,
            "$JS.EVENT.ADVISORY.CONSUMER.LEADER_ELECTED.AUDIT.audit",
        ),
        (
            Verb::Subscribe,
            "$JS.EVENT.ADVISORY.CONSUMER.LEADER_ELECTED.LEDGER.named",
        ),
        // The fleet channel, under the service's own inbox prefix.
        (Verb::Publish, "_INBOX_svc._NT_FLEET.WAITING.$JS.API"),
        (Verb::Subscribe, "_INBOX_svc._NT_FLEET.ANSWERS.$JS.API"),
    ] {
        assert!(p.allows(action, subject), "{action:?} {subject} denied");
    }
}

#[test]
fn nothing_else_is_granted() {
    let p = permissions(&every_kind(), &Role::owner("svc"));
    for (action, subject) in [
        (Verb::Publish, "$JS.API.STREAM.CREATE.AUDIT"),
        (Verb::Publish, "$JS.API.STREAM.DELETE.ORDERS"),
        (Verb::Publish, "$JS.API.STREAM.PURGE.ORDERS"),
        // A relay's per-instance consumer name is unknown in advance, so a stream with a
        // relay grants any consumer name on it; a stream without one grants names only.
        (Verb::Publish, "$JS.API.CONSUMER.DELETE.AUDIT.audit"),
        (Verb::Publish, "$JS.API.CONSUMER.CREATE.AUDIT.other"),
        (Verb::Publish, "$JS.API.CONSUMER.CREATE.LEDGER.other"),
        (Verb::Publish, "$JS.API.STREAM.CREATE.LEDGER"),
        (Verb::Publish, "audit.written"),
        // An owned stream's subjects: only what a handler declares it publishes.
        (Verb::Publish, "orders.anything"),
        (Verb::Publish, "orders.created"),
        (Verb::Publish, "invoices.7.voided"),
        (Verb::Publish, "$JS.ACK.AUDIT.other.1"),
        (Verb::Subscribe, "_INBOX.>"),
        (Verb::Subscribe, "orders.>"),
        (Verb::Subscribe, ">"),
        (Verb::Publish, "$JS.API.>"),
        // The elections of what another service declares, and everyone's at once.
        (
            Verb::Subscribe,
            "$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED.OTHER",
        ),
        (
            Verb::Subscribe,
            "$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED.>",
        ),
        (
            Verb::Subscribe,
            "$JS.EVENT.ADVISORY.CONSUMER.LEADER_ELECTED.OTHER.other",
        ),
        (
            Verb::Subscribe,
            "$JS.EVENT.ADVISORY.CONSUMER.LEADER_ELECTED.AUDIT.other",
        ),
        (
            Verb::Subscribe,
            "$JS.EVENT.ADVISORY.CONSUMER.LEADER_ELECTED.>",
        ),
        // Another service's fleet channel, and the account-wide one of earlier versions.
        (Verb::Publish, "_INBOX_other._NT_FLEET.WAITING.$JS.API"),
        (Verb::Subscribe, "_INBOX_other._NT_FLEET.WAITING.$JS.API"),
        (Verb::Publish, "_NATS_TOPOLOGY.META.WAITING.$JS.API"),
        (Verb::Subscribe, "_NATS_TOPOLOGY.META.WAITING.$JS.API"),
    ] {
        assert!(!p.allows(action, subject), "{action:?} {subject} allowed");
    }
}

#[test]
fn no_entry_is_covered_by_another_and_each_is_listed_once() {
    let p = permissions(&every_kind(), &Role::owner("svc"));
    for (i, a) in p.entries.iter().enumerate() {
        for (j, b) in p.entries.iter().enumerate() {
            if i != j && a.action == b.action && (b.queue.is_none() || a.queue == b.queue) {
                assert!(
                    !is_subset(&a.subject, &b.subject),
                    "{} is covered by {}",
                    a.describe(),
                    b.describe()
                );
            }
        }
        assert!(!a.needed_by.is_empty());
    }
    // The relay's `CONSUMER.INFO.ORDERS.*` covers the queue consumers' own, whose needs it
    // now carries.
    let info = p
        .entries
        .iter()
        .find(|e| e.subject == "$JS.API.CONSUMER.INFO.ORDERS.*")
        .unwrap();
    assert!(info.needed_by.iter().any(|n| n.declaration
        == Declaration::Consumer {
            stream: "ORDERS".into(),
            handler: "svc::pull".into()
        }));
}
