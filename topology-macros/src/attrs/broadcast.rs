//! `#[broadcast(..)]`: its keys, the keys it refuses and why, and what it says.

use syn::Ident;
use topology_core::model::DeliverPolicy;

use super::consumer::{ConsumerAttrs, FIX, PLAIN_DURABLE};
use crate::args::{Args, Refused, Spec};
use crate::ctxt::Ctxt;

const BROADCAST_GROUP: &[&str] = &[
    "a broadcast gives every instance its own ephemeral consumer, so that every instance receives every message; for work handled once by one instance, write `#[queue_consumer(group = \"...\")]` instead",
];
const BROADCAST_ACK: &[&str] = &[
    "a relay's consumer lives in one instance and dies with it, and a relay re-created after a loss resumes after what its own handlers finished, so a confirmed ack would guarantee nothing more; `ack = \"confirmed\"` is for `#[queue_consumer]`, whose durable outlives any instance",
];
const BROADCAST_PRIORITY: &[&str] = &[
    "priority groups choose which instance of a shared durable receives the work, and a broadcast gives every instance its own consumer that receives every message; for active/standby or spill-over instances, write `#[queue_consumer(group = \"...\", priority = \"pinned_client\", ..)]`",
];
const BROADCAST_BATCH: &[&str] = &[
    "a relay hands each message to its handler in order, and resumes after the last one its handlers finished; batches are for `#[queue_consumer(group = \"...\", batch = N)]`",
];
const BROADCAST_DURABLE: &[&str] = &[
    "a broadcast is an ephemeral consumer on every instance, and ",
    PLAIN_DURABLE,
    "; ",
    FIX,
];

pub(crate) static BROADCAST_SPEC: Spec = Spec {
    attr: "broadcast",
    keys: &[
        "stream",
        "subject",
        "subjects",
        "deliver",
        "ordered",
        "concurrency",
        "publishes",
        "codec",
        "layer",
        "crate",
    ],
    refused: &[
        Refused {
            key: "group",
            why: BROADCAST_GROUP,
            answers: None,
        },
        Refused {
            key: "queue",
            why: BROADCAST_GROUP,
            answers: None,
        },
        Refused {
            key: "durable",
            why: BROADCAST_DURABLE,
            answers: None,
        },
        Refused {
            key: "durable_name",
            why: BROADCAST_DURABLE,
            answers: None,
        },
        Refused {
            key: "deliver_group",
            why: BROADCAST_DURABLE,
            answers: None,
        },
        Refused {
            key: "ack",
            why: BROADCAST_ACK,
            answers: None,
        },
        Refused {
            key: "priority",
            why: BROADCAST_PRIORITY,
            answers: None,
        },
        Refused {
            key: "pinned_ttl",
            why: BROADCAST_PRIORITY,
            answers: None,
        },
        Refused {
            key: "min_pending",
            why: BROADCAST_PRIORITY,
            answers: None,
        },
        Refused {
            key: "min_ack_pending",
            why: BROADCAST_PRIORITY,
            answers: None,
        },
        Refused {
            key: "batch",
            why: BROADCAST_BATCH,
            answers: None,
        },
        Refused {
            key: "batch_wait",
            why: BROADCAST_BATCH,
            answers: None,
        },
    ],
    elsewhere: &[
        ("delivery", "queue_consumer"),
        ("max_deliver", "queue_consumer"),
        ("ack_wait", "queue_consumer"),
        ("backoff", "queue_consumer"),
        ("max_ack_pending", "queue_consumer"),
        ("max_waiting", "queue_consumer"),
        ("partitions", "queue_consumer"),
        ("key", "queue_consumer"),
        ("dead_letter", "queue_consumer"),
        ("migrate_from", "queue_consumer"),
        ("description", "queue_consumer"),
        ("replicas", "stream"),
        ("retention", "stream"),
    ],
};

/// `#[broadcast(..)]`.
pub(crate) struct BroadcastAttrs {
    pub common: ConsumerAttrs,
    pub deliver: Option<DeliverPolicy>,
    /// The `deliver` key, when given.
    pub deliver_key: Option<Ident>,
    /// The `ordered` key, when given (and not `= false`).
    pub ordered: Option<Ident>,
}

impl BroadcastAttrs {
    pub(crate) fn parse(args: &Args, cx: &mut Ctxt) -> BroadcastAttrs {
        let deliver = args.key("deliver", "deliver = \"new\"");
        let ordered = args.key("ordered", "ordered");
        BroadcastAttrs {
            common: ConsumerAttrs::parse(args, BROADCAST_SPEC.attr, cx),
            deliver: deliver.choice(
                &[
                    ("new", DeliverPolicy::New),
                    ("all", DeliverPolicy::All),
                    ("last", DeliverPolicy::Last),
                    ("last_per_subject", DeliverPolicy::LastPerSubject),
                ],
                cx,
            ),
            deliver_key: deliver.arg.map(|a| a.key.clone()),
            ordered: ordered
                .flag(cx)
                .then(|| ordered.arg.map(|a| a.key.clone()))
                .flatten(),
        }
    }
}
