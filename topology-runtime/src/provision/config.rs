//! Declaration -> server configuration: the stream and consumer configs a declaration
//! creates, and which of their fields it sets.

use std::time::Duration;

use async_nats::jetstream::{consumer, stream};

use topology_core::model::{
    ConsumerDecl, ConsumerKind, DeliverPolicy, Delivery, Discard, External, Origin, Priority,
    QueueDecl, Retention, Storage, StreamDecl,
};

/// The stream configuration a declaration creates.
pub(crate) fn stream_config(decl: &StreamDecl) -> stream::Config {
    let mut config = stream::Config {
        name: decl.name.to_owned(),
        ..Default::default()
    };
    apply_stream_decl(decl, &mut config);
    config
}

/// Writes every field the declaration sets into `config`; subjects are added, never removed.
pub(crate) fn apply_stream_decl(decl: &StreamDecl, config: &mut stream::Config) {
    for subject in decl.subjects {
        if !config.subjects.iter().any(|s| s == subject) {
            config.subjects.push((*subject).to_owned());
        }
    }
    if let Some(replicas) = decl.replicas {
        config.num_replicas = replicas.into();
    }
    if let Some(storage) = decl.storage {
        config.storage = storage_type(storage);
    }
    if let Some(retention) = decl.retention {
        config.retention = retention_policy(retention);
    }
    if let Some(max_age) = decl.max_age {
        config.max_age = max_age;
    }
    if let Some(max_msgs) = decl.max_msgs {
        config.max_messages = max_msgs;
    }
    if let Some(max_bytes) = decl.max_bytes {
        config.max_bytes = max_bytes;
    }
    if let Some(size) = decl.max_msg_size {
        config.max_message_size = size;
    }
    if let Some(discard) = decl.discard {
        config.discard = match discard {
            Discard::Old => stream::DiscardPolicy::Old,
            Discard::New => stream::DiscardPolicy::New,
        };
    }
    if let Some(window) = decl.duplicate_window {
        config.duplicate_window = window;
    }
    if let Some(description) = decl.description {
        config.description = Some(description.to_owned());
    }
    if let Some(placement) = decl.placement {
        config.placement = Some(stream::Placement {
            cluster: placement.cluster.map(str::to_owned),
            tags: placement.tags.iter().map(|t| (*t).to_owned()).collect(),
        });
    }
    if let Some(origin) = &decl.mirror {
        config.mirror = Some(source_config(origin));
    }
    if !decl.sources.is_empty() {
        config.sources = Some(decl.sources.iter().map(source_config).collect());
    }
    if let Some(transform) = decl.subject_transform {
        config.subject_transform = Some(stream::SubjectTransform {
            source: transform.src.to_owned(),
            destination: transform.dest.to_owned(),
        });
    }
    config.allow_message_ttl = decl.allow_msg_ttl;
    config.allow_message_schedules = decl.allow_msg_schedules;
    if let Some(max) = decl.max_msgs_per_subject {
        config.max_messages_per_subject = max;
    }
    if let Some(shape) = decl.bucket_shape {
        config.allow_rollup = shape.allow_rollup;
        config.deny_delete = shape.deny_delete;
        config.allow_direct = shape.allow_direct;
    }
}

/// The server's form of a mirror or source: a `filter` alone is a filter subject; with a
/// `transform` both go into one subject transform (the server refuses a filter subject beside
/// transforms); a domain is the API prefix `$JS.<domain>.API`, as async-nats writes it.
pub(crate) fn source_config(origin: &Origin) -> stream::Source {
    let (filter_subject, subject_transforms) = match (origin.filter, origin.transform) {
        (filter, None) => (filter.map(str::to_owned), Vec::new()),
        (filter, Some(dest)) => (
            None,
            vec![stream::SubjectTransform {
                source: filter.unwrap_or(">").to_owned(),
                destination: dest.to_owned(),
            }],
        ),
    };
    stream::Source {
        name: origin.name().to_owned(),
        filter_subject,
        subject_transforms,
        external: origin.external().map(|external| stream::External {
            api_prefix: match external {
                External::Prefix(prefix) => prefix.to_owned(),
                External::Domain(domain) => format!("$JS.{domain}.API"),
            },
            delivery_prefix: None,
        }),
        ..Default::default()
    }
}

pub(crate) fn storage_type(storage: Storage) -> stream::StorageType {
    match storage {
        Storage::File => stream::StorageType::File,
        Storage::Memory => stream::StorageType::Memory,
    }
}

pub(crate) fn retention_policy(retention: Retention) -> stream::RetentionPolicy {
    match retention {
        Retention::Limits => stream::RetentionPolicy::Limits,
        Retention::Interest => stream::RetentionPolicy::Interest,
        Retention::WorkQueue => stream::RetentionPolicy::WorkQueue,
    }
}

/// The deliver subject of a push queue consumer: the same for every instance of the group.
pub(crate) fn push_deliver_subject(stream: &str, group: &str) -> String {
    format!("_NT_DELIVER.{stream}.{group}")
}

/// How long a watch's revision may go unacknowledged before the server delivers it again: two
/// of the runtime's default heartbeats.
pub(crate) const WATCH_ACK_WAIT: Duration = Duration::from_secs(10);

/// How long the server keeps a relay whose instance stopped pulling.
pub(crate) const RELAY_INACTIVE_THRESHOLD: Duration = Duration::from_secs(30);

/// The consumer configuration a declaration creates.
pub(crate) fn consumer_config(
    stream: &str,
    decl: &ConsumerDecl,
    relay_name: Option<&str>,
) -> consumer::Config {
    let mut config = consumer::Config {
        ack_policy: consumer::AckPolicy::Explicit,
        ..Default::default()
    };
    match decl.subjects {
        [] => {}
        [one] => config.filter_subject = (*one).to_owned(),
        many => config.filter_subjects = many.iter().map(|s| (*s).to_owned()).collect(),
    }
    match &decl.kind {
        ConsumerKind::Queue(queue) => {
            config.durable_name = Some(queue.group.to_owned());
            config.name = Some(queue.group.to_owned());
            config.deliver_policy = consumer::DeliverPolicy::All;
            apply_queue_decl(queue, &mut config);
            if queue.delivery == Delivery::Pull {
                // Room for a fleet's requests: past it the server drops a replica's requests.
                config.max_waiting = queue
                    .max_waiting
                    .unwrap_or(topology_core::rules::DEFAULT_MAX_WAITING);
            }
            if queue.delivery == Delivery::Push {
                config.deliver_subject = Some(push_deliver_subject(stream, queue.group));
                config.deliver_group = Some(queue.group.to_owned());
                // The server pushes up to `max_ack_pending` unacknowledged messages to the
                // group, however many the instances can start: unless declared, bound it by
                // what one instance starts at once, so nothing waits in a client while its
                // `ack_wait` runs (the bound is the group's, shared by its instances).
                if queue.max_ack_pending.is_none() {
                    config.max_ack_pending = i64::from(decl.effective_concurrency());
                }
            }
        }
        ConsumerKind::Broadcast(relay) => {
            config.name = relay_name.map(str::to_owned);
            config.deliver_policy = match relay.deliver {
                DeliverPolicy::All => consumer::DeliverPolicy::All,
                DeliverPolicy::New => consumer::DeliverPolicy::New,
                DeliverPolicy::Last => consumer::DeliverPolicy::Last,
                DeliverPolicy::LastPerSubject => consumer::DeliverPolicy::LastPerSubject,
            };
            config.inactive_threshold = RELAY_INACTIVE_THRESHOLD;
            // An ordered replay keeps its own place (the last message handled) and never
            // needs a delivery again: it restarts after a failure or a gap on a consumer
            // created there (see `run::replay`), so acks would only cost a message each.
            if relay.ordered {
                config.ack_policy = consumer::AckPolicy::None;
            }
            config.memory_storage = true;
            config.num_replicas = 1;
            // A watch hands over one change at a time: a failed one is delivered again before
            // any later revision, so that the handler sees every key's changes in order. A
            // revision lost with a connection (a node killed while delivering it) then holds
            // every later one until the server delivers it again: after `WATCH_ACK_WAIT`, not
            // the server's default 30 s. A handler that runs longer is held by progress acks.
            if relay.kv_watch.is_some() {
                config.max_ack_pending = 1;
                config.ack_wait = WATCH_ACK_WAIT;
            }
        }
    }
    config
}

fn apply_queue_decl(queue: &QueueDecl, config: &mut consumer::Config) {
    if let Some(v) = queue.max_deliver {
        config.max_deliver = v;
    }
    if let Some(v) = queue.ack_wait {
        config.ack_wait = v;
    }
    // `backoff` is applied by the runtime when it naks a failed message. Sent to the server
    // it would also replace `ack_wait` with its first step, so a handler declared with
    // `ack_wait = "30s", backoff = ["1s", ..]` would be redelivered after one second.
    if let Some(v) = queue.max_ack_pending {
        config.max_ack_pending = v;
    }
    if let Some(v) = queue.description {
        config.description = Some(v.to_owned());
    }
    if let Some(priority) = &queue.priority {
        config.priority_policy = match priority {
            Priority::PinnedClient { ttl } => {
                config.priority_timeout = *ttl;
                consumer::PriorityPolicy::PinnedClient
            }
            Priority::Overflow(_) => consumer::PriorityPolicy::Overflow,
        };
        config.priority_groups = vec![PRIORITY_GROUP.to_owned()];
    }
}

/// The one priority group of a queue consumer declaring a priority: every instance pulls in
/// it. (The server takes group names of at most 16 characters among `a-zA-Z0-9/_=-`, which a
/// queue group need not fit, so it is this fixed name.)
pub(crate) const PRIORITY_GROUP: &str = "replicas";

/// Copies the editable fields a declaration sets from `declared` into `server`.
pub(crate) fn apply_editable_consumer_fields(
    declared: &consumer::Config,
    server: &mut consumer::Config,
) {
    server.filter_subject = declared.filter_subject.clone();
    server.backoff.clear();
    server.filter_subjects = declared.filter_subjects.clone();
    if declared.max_deliver != 0 {
        server.max_deliver = declared.max_deliver;
    }
    if !declared.ack_wait.is_zero() {
        server.ack_wait = declared.ack_wait;
    }
    if declared.max_ack_pending != 0 {
        server.max_ack_pending = declared.max_ack_pending;
    }
    if declared.description.is_some() {
        server.description = declared.description.clone();
    }
    // A queue consumer's priority is always the declaration's, none included: a policy left
    // on the server would keep pulls that do not name its group waiting (pinned) for ever.
    server.priority_policy = declared.priority_policy.clone();
    server.priority_groups = declared.priority_groups.clone();
    server.priority_timeout = declared.priority_timeout;
}

#[cfg(test)]
mod tests {
    use super::*;
    use topology_core::model::{BroadcastDecl, StreamRef};

    #[test]
    fn a_watch_takes_one_revision_at_a_time_and_gets_a_lost_one_back_within_seconds() {
        let watch = ConsumerDecl::broadcast(
            "app::on_flag",
            StreamRef::Named("KV_FLAGS"),
            BroadcastDecl::new().kv_watch("FLAGS"),
        );
        let config = consumer_config("KV_FLAGS", &watch, Some("relay-1"));
        assert_eq!(config.max_ack_pending, 1);
        assert_eq!(config.ack_wait, WATCH_ACK_WAIT);
        let relay = ConsumerDecl::broadcast("app::on", StreamRef::Named("S"), BroadcastDecl::new());
        let config = consumer_config("S", &relay, Some("relay-2"));
        assert!(
            config.ack_wait.is_zero(),
            "other relays keep the server's default"
        );
    }
}
