//! The keys of `#[queue_consumer(..)]` and `#[broadcast(..)]`.

use syn::{Ident, LitStr};
use topology_core::batch::BATCH_SIZE;
use topology_core::model::{AckMode, Delivery};
use topology_core::priority::THRESHOLD;
use topology_core::rules::{CONCURRENCY, MAX_ACK_PENDING, MAX_DELIVER, MAX_WAITING};

use super::CodecAttr;
use crate::args::{Args, Refused, Spec};
use crate::ctxt::Ctxt;
use crate::value::{Dur, Int, Key, Krate, PathOrString, StrList};

/// Why a plain durable is refused, and what to write instead: the end of every such message.
pub(super) const PLAIN_DURABLE: &str = "a plain durable consumer admits one subscriber, so with a second replica the second instance is refused or receives every message again";
pub(super) const FIX: &str = "write `#[queue_consumer(group = \"...\")]` for work shared by all instances (each message handled by one of them), or `#[broadcast]` for every instance to receive every message";

/// Why a key is refused, after "`#[attr]` has no `key` key: ".
const QUEUE_DURABLE: &[&str] = &[
    PLAIN_DURABLE,
    "; the durable of a queue consumer is its `group`, shared by every instance; ",
    FIX,
];
const QUEUE_DELIVER_GROUP: &[&str] = &[
    "the deliver group is always the `group` (with `delivery = \"push\"`), so that every instance joins the same queue; without it, ",
    PLAIN_DURABLE,
    "; ",
    FIX,
];
const QUEUE_NAME: &[&str] = &[
    "the durable consumer shared by all instances is named by its group; write `group = \"...\"`",
];
pub(crate) static QUEUE_SPEC: Spec = Spec {
    attr: "queue_consumer",
    keys: &[
        "stream",
        "group",
        "subject",
        "subjects",
        "delivery",
        "max_deliver",
        "ack_wait",
        "backoff",
        "max_ack_pending",
        "max_waiting",
        "concurrency",
        "dead_letter",
        "migrate_from",
        "migrate_from_partitions",
        "description",
        "ack",
        "priority",
        "pinned_ttl",
        "min_pending",
        "min_ack_pending",
        "batch",
        "batch_wait",
        "key",
        "partitions",
        "publishes",
        "codec",
        "layer",
        "crate",
    ],
    refused: &[
        Refused {
            key: "durable",
            why: QUEUE_DURABLE,
            answers: Some("group"),
        },
        Refused {
            key: "durable_name",
            why: QUEUE_DURABLE,
            answers: Some("group"),
        },
        Refused {
            key: "deliver_group",
            why: QUEUE_DELIVER_GROUP,
            answers: Some("group"),
        },
        Refused {
            key: "name",
            why: QUEUE_NAME,
            answers: Some("group"),
        },
    ],
    elsewhere: &[
        ("deliver", "broadcast"),
        ("ordered", "broadcast"),
        ("replicas", "stream"),
        ("storage", "stream"),
        ("retention", "stream"),
        ("max_age", "stream"),
    ],
};

/// What both consumer macros take.
pub(crate) struct ConsumerAttrs {
    /// The attribute's name, for messages.
    pub attr: &'static str,
    pub krate: Krate,
    pub stream: Option<PathOrString>,
    pub filters: Filters,
    pub concurrency: Option<Int>,
    /// `publishes = [..]`: the subjects the handler publishes to.
    pub publishes: Option<StrList>,
    /// `codec = ".."`: how its payloads are written (JSON when absent).
    pub codec: Option<CodecAttr>,
    /// `layer = f`: the function building the handler's `tower` layer.
    pub layer: Option<syn::Path>,
}

/// The `subject` or `subjects` key.
pub(crate) enum Filters {
    /// Neither: the whole stream.
    Whole,
    /// `subject = ".."`.
    One(LitStr),
    /// `subjects = [..]`.
    Many(StrList),
    /// Both keys (refused; their values are not read): the one written second.
    Both { later: Ident },
    /// A value that is not a string, or not a list (reported).
    Unreadable,
}

impl Filters {
    /// The filter subjects read.
    pub(crate) fn lits(&self) -> &[LitStr] {
        match self {
            Filters::One(lit) => std::slice::from_ref(lit),
            Filters::Many(list) => &list.lits,
            Filters::Whole | Filters::Both { .. } | Filters::Unreadable => &[],
        }
    }
}

/// `#[queue_consumer(..)]`: each key's value, `None` when the key is absent or its value
/// unreadable (reported).
pub(crate) struct QueueAttrs {
    pub common: ConsumerAttrs,
    pub group: Option<LitStr>,
    pub delivery: Option<Delivery>,
    pub max_deliver: Option<Int>,
    pub ack_wait: Option<Dur>,
    pub backoff: Option<Backoff>,
    pub max_ack_pending: Option<Int>,
    pub max_waiting: Option<Int>,
    pub dead_letter: Option<LitStr>,
    pub migrate_from: Option<LitStr>,
    /// `migrate_from_partitions = 16`: the group migrated from is partitioned, into this many.
    pub migrate_from_partitions: Option<Int>,
    pub description: Option<LitStr>,
    pub ack: Option<AckMode>,
    pub priority: Option<PriorityAttrs>,
    pub batch: Option<Int>,
    /// `batch` was written, even when its value was refused (its error already reported).
    pub batch_given: bool,
    pub batch_wait: Option<Dur>,
    /// `key = "{1}"`: the subject tokens a partitioned consumer is keyed by.
    pub key: Option<LitStr>,
    pub partitions: Option<Int>,
}

/// `priority = ".."` and the keys that go with it, each with the token it was read from.
pub(crate) struct PriorityAttrs {
    /// The policy read, `None` when absent or unreadable (reported).
    pub policy: Option<PolicyName>,
    /// The `priority` key, when given: where errors about the policy point.
    pub policy_key: Option<Ident>,
    pub pinned_ttl: Option<Dur>,
    pub min_pending: Option<Int>,
    pub min_ack_pending: Option<Int>,
    /// Whether `min_pending` or `min_ack_pending` is written (its value may be unreadable).
    pub threshold_written: bool,
}

/// The value of `priority`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PolicyName {
    PinnedClient,
    Overflow,
}

/// `backoff = [..]`: the list, and the durations of its steps that could be read.
pub(crate) struct Backoff {
    pub steps: StrList,
    pub durations: Vec<core::time::Duration>,
}

impl ConsumerAttrs {
    pub(super) fn parse(args: &Args, attr: &'static str, cx: &mut Ctxt) -> ConsumerAttrs {
        let krate = args.key("crate", "crate = my_facade").crate_path(cx);
        let stream = args.key("stream", "stream = Orders").path_or_string(cx);
        args.require(
            "stream",
            format!(
                "`#[{attr}]` needs `stream = ...`: a `#[stream]` type, as in `stream = Orders`, or the name of a stream declared elsewhere, as in `stream = \"ORDERS\"`"
            ),
            cx,
        );
        ConsumerAttrs {
            attr,
            krate,
            stream,
            filters: Filters::parse(args, cx),
            concurrency: args
                .key("concurrency", "concurrency = 8")
                .int(CONCURRENCY, "", cx),
            publishes: args
                .key("publishes", "publishes = [\"orders.billed\"]")
                .strings(cx),
            codec: CodecAttr::parse(args, cx),
            layer: super::layer_fn(args, cx),
        }
    }
}

impl Filters {
    fn parse(args: &Args, cx: &mut Ctxt) -> Filters {
        let subject = args.key("subject", "subject = \"orders.created\"");
        let subjects = args.key(
            "subjects",
            "subjects = [\"orders.created\", \"orders.paid\"]",
        );
        match (subject.arg, subjects.arg) {
            (Some(one), Some(many)) => Filters::Both {
                later: if args.position("subject") < args.position("subjects") {
                    many.key.clone()
                } else {
                    one.key.clone()
                },
            },
            (Some(_), None) => subject.string(cx).map_or(Filters::Unreadable, Filters::One),
            (None, Some(_)) => (subjects.strings(cx)).map_or(Filters::Unreadable, Filters::Many),
            (None, None) => Filters::Whole,
        }
    }
}

impl QueueAttrs {
    pub(crate) fn parse(args: &Args, cx: &mut Ctxt) -> QueueAttrs {
        let attr = QUEUE_SPEC.attr;
        let common = ConsumerAttrs::parse(args, attr, cx);
        let group = args.key("group", "group = \"billing\"").string(cx);
        args.require(
            "group",
            format!(
                "`#[{attr}]` needs `group = \"...\"`, the durable consumer shared by all instances (each message is handled by one of them); without a group it would be a plain durable, and {PLAIN_DURABLE}; for every instance to receive every message, use `#[broadcast]` instead"
            ),
            cx,
        );
        QueueAttrs {
            common,
            group,
            delivery: args
                .key("delivery", "delivery = \"pull\"")
                .choice(&[("pull", Delivery::Pull), ("push", Delivery::Push)], cx),
            max_deliver: args.key("max_deliver", "max_deliver = 5").int(
                MAX_DELIVER,
                "omit `max_deliver` for unlimited deliveries",
                cx,
            ),
            ack_wait: args
                .key("ack_wait", "ack_wait = \"30s\"")
                .duration(true, cx),
            backoff: Backoff::parse(
                &args.key("backoff", "backoff = [\"1s\", \"10s\", \"1m\"]"),
                cx,
            ),
            max_ack_pending: args.key("max_ack_pending", "max_ack_pending = 1000").int(
                MAX_ACK_PENDING,
                "omit `max_ack_pending` for the server's default of 1000",
                cx,
            ),
            max_waiting: args.key("max_waiting", "max_waiting = 4096").int(
                MAX_WAITING,
                "omit `max_waiting` for 4096",
                cx,
            ),
            dead_letter: (args.key("dead_letter", "dead_letter = \"billing.dead\"")).string(cx),
            migrate_from: (args.key("migrate_from", "migrate_from = \"billing_v1\"")).string(cx),
            migrate_from_partitions: args
                .key("migrate_from_partitions", "migrate_from_partitions = 16")
                .int(
                    topology_core::partition::PARTITIONS,
                    "the partition count of the group `migrate_from` names",
                    cx,
                ),
            description: (args.key("description", "description = \"bills each order\"")).string(cx),
            ack: args.key("ack", "ack = \"confirmed\"").choice(
                &[
                    ("fire_and_forget", AckMode::FireAndForget),
                    ("confirmed", AckMode::Confirmed),
                ],
                cx,
            ),
            priority: PriorityAttrs::parse(args, cx),
            batch: args.key("batch", "batch = 50").int(BATCH_SIZE, "", cx),
            batch_given: args.get("batch").is_some(),
            batch_wait: args
                .key("batch_wait", "batch_wait = \"100ms\"")
                .duration(true, cx),
            key: args.key("key", "key = \"{1}\"").string(cx),
            partitions: args.key("partitions", "partitions = 16").int(
                topology_core::partition::PARTITIONS,
                "the count is fixed per group: each partition is a consumer on the server",
                cx,
            ),
        }
    }
}

impl PriorityAttrs {
    /// `None` when none of the keys is given.
    fn parse(args: &Args, cx: &mut Ctxt) -> Option<PriorityAttrs> {
        let key = args.key("priority", "priority = \"pinned_client\"");
        let policy = key.choice(
            &[
                ("pinned_client", PolicyName::PinnedClient),
                ("overflow", PolicyName::Overflow),
            ],
            cx,
        );
        let attrs = PriorityAttrs {
            policy,
            policy_key: key.arg.map(|arg| arg.key.clone()),
            pinned_ttl: args
                .key("pinned_ttl", "pinned_ttl = \"10s\"")
                .duration(true, cx),
            min_pending: args
                .key("min_pending", "min_pending = 100")
                .int(THRESHOLD, "", cx),
            min_ack_pending: args
                .key("min_ack_pending", "min_ack_pending = 100")
                .int(THRESHOLD, "", cx),
            threshold_written: args.get("min_pending").is_some()
                || args.get("min_ack_pending").is_some(),
        };
        let given = attrs.policy_key.is_some()
            || attrs.pinned_ttl.is_some()
            || attrs.min_pending.is_some()
            || attrs.min_ack_pending.is_some();
        given.then_some(attrs)
    }
}

impl Backoff {
    fn parse(key: &Key<'_>, cx: &mut Ctxt) -> Option<Backoff> {
        let steps = key.strings(cx)?;
        let durations = (steps.lits.iter())
            .filter_map(|lit| key.duration_of(lit, true, cx))
            .collect();
        Some(Backoff { steps, durations })
    }
}
