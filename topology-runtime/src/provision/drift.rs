//! Drift: how the server's stream or consumer configuration differs from the fields a
//! declaration sets, each difference classified as editable in place or immutable.

use std::fmt;
use std::time::Duration;

use async_nats::jetstream::{consumer, stream};

use super::FieldDiff;
use super::config::{retention_policy, storage_type};
use super::error::Drift;
use topology_core::model::{BucketShape, ConsumerDecl, Discard, Placement, StreamDecl};

/// The subjects of the stream on the server that its declaration lacks (kept, said at WARN).
pub(crate) fn extra_subjects(decl: &StreamDecl, server: &stream::Config) -> Vec<String> {
    server
        .subjects
        .iter()
        .filter(|s| !decl.subjects.contains(&s.as_str()))
        .cloned()
        .collect()
}

fn diff(field: &'static str, server: impl fmt::Debug, declared: impl fmt::Debug) -> FieldDiff {
    FieldDiff {
        field,
        server: format!("{server:?}"),
        declared: format!("{declared:?}"),
    }
}

/// Compares the fields a stream declaration sets with the server's configuration.
pub(crate) fn stream_drift(decl: &StreamDecl, server: &stream::Config) -> Drift {
    let mut drift = Drift::default();
    let missing: Vec<&str> = decl
        .subjects
        .iter()
        .copied()
        .filter(|s| !server.subjects.iter().any(|have| have == s))
        .collect();
    if !missing.is_empty() {
        drift
            .editable
            .push(diff("subjects", &server.subjects, decl.subjects));
    }
    if let Some(replicas) = decl.replicas
        && server.num_replicas.max(1) != usize::from(replicas)
    {
        drift
            .editable
            .push(diff("num_replicas", server.num_replicas, replicas));
    }
    if let Some(storage) = decl.storage
        && server.storage != storage_type(storage)
    {
        drift
            .immutable
            .push(diff("storage", server.storage, storage));
    }
    if let Some(retention) = decl.retention {
        let declared = retention_policy(retention);
        if server.retention != declared {
            let workqueue = stream::RetentionPolicy::WorkQueue;
            let entry = diff("retention", server.retention, retention);
            if server.retention == workqueue || declared == workqueue {
                drift.immutable.push(entry);
            } else {
                drift.editable.push(entry);
            }
        }
    }
    let mut editable =
        |field, differs: bool, server: &dyn fmt::Debug, declared: &dyn fmt::Debug| {
            if differs {
                drift.editable.push(diff(field, server, declared));
            }
        };
    if let Some(v) = decl.max_age {
        editable("max_age", server.max_age != v, &server.max_age, &v);
    }
    if let Some(v) = decl.max_msgs {
        editable(
            "max_msgs",
            server.max_messages != v,
            &server.max_messages,
            &v,
        );
    }
    if let Some(v) = decl.max_bytes {
        editable("max_bytes", server.max_bytes != v, &server.max_bytes, &v);
    }
    if let Some(v) = decl.max_msg_size {
        editable(
            "max_msg_size",
            server.max_message_size != v,
            &server.max_message_size,
            &v,
        );
    }
    if let Some(v) = decl.discard {
        let declared = match v {
            Discard::Old => stream::DiscardPolicy::Old,
            Discard::New => stream::DiscardPolicy::New,
        };
        editable("discard", server.discard != declared, &server.discard, &v);
    }
    if let Some(v) = decl.duplicate_window {
        editable(
            "duplicate_window",
            server.duplicate_window != v,
            &server.duplicate_window,
            &v,
        );
    }
    if let Some(v) = decl.description {
        editable(
            "description",
            server.description.as_deref() != Some(v),
            &server.description,
            &v,
        );
    }
    if let Some(v) = decl.max_msgs_per_subject {
        editable(
            "max_msgs_per_subject",
            server.max_messages_per_subject != v,
            &server.max_messages_per_subject,
            &v,
        );
    }
    if let Some(shape) = decl.bucket_shape {
        bucket_shape_drift(&shape, server, &mut drift);
    }
    super::origins::origin_drift(decl, server, &mut drift);
    super::messages::message_drift(decl, server, &mut drift);
    if let Some(placement) = decl.placement
        && !placement_matches(&placement, server.placement.as_ref())
    {
        // Editable, and applying it moves the replicas: a plan says so.
        drift.editable.push(FieldDiff {
            field: "placement",
            server: match &server.placement {
                Some(p) => format!("{{ cluster: {:?}, tags: {:?} }}", p.cluster, p.tags),
                None => "none".to_owned(),
            },
            declared: format!(
                "{{ cluster: {:?}, tags: {:?} }} (the server moves the stream's replicas there)",
                placement.cluster, placement.tags
            ),
        });
    }
    drift
}

/// Whether the server's placement is the declared one: the same cluster, the same tags in any
/// order (the server matches tags case-insensitively).
fn placement_matches(declared: &Placement, server: Option<&stream::Placement>) -> bool {
    let Some(server) = server else {
        return false;
    };
    let lower = |tags: &mut dyn Iterator<Item = &str>| {
        let mut tags: Vec<String> = tags.map(str::to_lowercase).collect();
        tags.sort();
        tags.dedup();
        tags
    };
    server.cluster.as_deref() == declared.cluster
        && lower(&mut server.tags.iter().map(String::as_str))
            == lower(&mut declared.tags.iter().copied())
}

/// The settings every client expects of a bucket's stream: all editable, but the server never
/// lets `deny_delete` be turned off again.
fn bucket_shape_drift(shape: &BucketShape, server: &stream::Config, drift: &mut Drift) {
    let fields = [
        ("allow_rollup_hdrs", server.allow_rollup, shape.allow_rollup),
        ("deny_delete", server.deny_delete, shape.deny_delete),
        ("allow_direct", server.allow_direct, shape.allow_direct),
    ];
    for (field, server, declared) in fields {
        if server == declared {
            continue;
        }
        if field == "deny_delete" && server {
            drift.immutable.push(diff(field, server, declared));
        } else {
            drift.editable.push(diff(field, server, declared));
        }
    }
}

/// Compares a consumer declaration with the server's configuration.
pub(crate) fn consumer_drift(
    decl: &ConsumerDecl,
    declared: &consumer::Config,
    server: &consumer::Config,
) -> Drift {
    let mut drift = Drift::default();
    let push_server = server.deliver_subject.is_some();
    let push_declared = declared.deliver_subject.is_some();
    if push_server && server.deliver_group.is_none() {
        drift.immutable.push(FieldDiff {
            field: "deliver_group",
            server: "none (a plain durable push consumer: it admits one subscriber, so a second \
                     replica is refused or receives duplicates)"
                .to_owned(),
            declared: format!("{:?}", declared.name.as_deref().unwrap_or_default()),
        });
    } else if push_server != push_declared {
        let kind = |push: bool| if push { "push" } else { "pull" };
        drift
            .immutable
            .push(diff("delivery", kind(push_server), kind(push_declared)));
    } else if push_server && server.deliver_group != declared.deliver_group {
        drift.editable.push(diff(
            "deliver_group",
            &server.deliver_group,
            &declared.deliver_group,
        ));
    }
    if server.ack_policy != declared.ack_policy {
        drift
            .immutable
            .push(diff("ack_policy", server.ack_policy, declared.ack_policy));
    }
    // A queue consumer delivers the whole stream; one migrated from another, or re-created
    // after a loss, starts where its predecessor was acknowledged: the same shape.
    let from_start_or_floor = |p: &consumer::DeliverPolicy| {
        matches!(
            p,
            consumer::DeliverPolicy::All | consumer::DeliverPolicy::ByStartSequence { .. }
        )
    };
    let same_start = decl.as_queue().is_some()
        && from_start_or_floor(&server.deliver_policy)
        && from_start_or_floor(&declared.deliver_policy);
    if server.deliver_policy != declared.deliver_policy && !same_start {
        drift.immutable.push(diff(
            "deliver_policy",
            server.deliver_policy,
            declared.deliver_policy,
        ));
    }
    if server.durable_name != declared.durable_name {
        drift.immutable.push(diff(
            "durable_name",
            &server.durable_name,
            &declared.durable_name,
        ));
    }
    let filters = |c: &consumer::Config| -> Vec<String> {
        let mut all = c.filter_subjects.clone();
        if !c.filter_subject.is_empty() {
            all.push(c.filter_subject.clone());
        }
        all.sort();
        all
    };
    if filters(server) != filters(declared) {
        drift
            .editable
            .push(diff("filter_subjects", filters(server), decl.subjects));
    }
    if declared.max_deliver != 0 && server.max_deliver != declared.max_deliver {
        drift.editable.push(diff(
            "max_deliver",
            server.max_deliver,
            declared.max_deliver,
        ));
    }
    if !declared.ack_wait.is_zero() && server.ack_wait != declared.ack_wait {
        drift
            .editable
            .push(diff("ack_wait", server.ack_wait, declared.ack_wait));
    }
    if !server.backoff.is_empty() {
        // Set outside this library: it overrides `ack_wait`; the runtime's naks apply the
        // declared backoff instead.
        drift
            .editable
            .push(diff("backoff", &server.backoff, Vec::<Duration>::new()));
    }
    // Compared only when declared: a consumer created before the default existed (or by the
    // server's default of 512) keeps its wait list until a `migrate_from` moves it.
    if decl.as_queue().is_some_and(|q| q.max_waiting.is_some())
        && server.max_waiting != declared.max_waiting
    {
        drift.immutable.push(diff(
            "max_waiting",
            server.max_waiting,
            declared.max_waiting,
        ));
    }
    if declared.max_ack_pending != 0 && server.max_ack_pending != declared.max_ack_pending {
        drift.editable.push(diff(
            "max_ack_pending",
            server.max_ack_pending,
            declared.max_ack_pending,
        ));
    }
    if declared.description.is_some() && server.description != declared.description {
        drift.editable.push(diff(
            "description",
            &server.description,
            &declared.description,
        ));
    }
    // Editable on the server (2.11 and later replace the whole configuration on an update);
    // always the declaration's for a queue consumer, none included.
    if decl.as_queue().is_some() {
        if server.priority_policy != declared.priority_policy {
            drift.editable.push(diff(
                "priority_policy",
                &server.priority_policy,
                &declared.priority_policy,
            ));
        }
        if server.priority_groups != declared.priority_groups {
            drift.editable.push(diff(
                "priority_groups",
                &server.priority_groups,
                &declared.priority_groups,
            ));
        }
        // The server sets 2 minutes on a pinned consumer declared without one; ours always
        // declare it.
        if server.priority_timeout != declared.priority_timeout {
            drift.editable.push(diff(
                "priority_timeout",
                server.priority_timeout,
                declared.priority_timeout,
            ));
        }
    }
    drift
}
