//! The keys of `#[stream(..)]`.

use syn::{Ident, LitStr};
use topology_core::model::{Discard, Retention, Storage};
use topology_core::rules::{MAX_BYTES, MAX_MSG_SIZE, MAX_MSGS, REPLICAS};

use super::origin::{self, OriginAttrs, TransformAttrs};
use crate::args::{Args, Spec};
use crate::ctxt::Ctxt;
use crate::value::{Dur, Int, Krate, StrList};

pub(crate) static SPEC: Spec = Spec {
    attr: "stream",
    keys: &[
        "name",
        "subjects",
        "replicas",
        "storage",
        "retention",
        "max_age",
        "max_msgs",
        "max_bytes",
        "max_msg_size",
        "discard",
        "duplicate_window",
        "description",
        "placement",
        "mirror",
        "sources",
        "subject_transform",
        "allow_msg_ttl",
        "allow_msg_schedules",
        "codec",
        "external",
        "crate",
    ],
    refused: &[],
    elsewhere: &[
        ("stream", "queue_consumer"),
        ("group", "queue_consumer"),
        ("subject", "queue_consumer"),
        ("deliver", "broadcast"),
        ("delivery", "queue_consumer"),
        ("max_deliver", "queue_consumer"),
        ("ack_wait", "queue_consumer"),
        ("backoff", "queue_consumer"),
        ("concurrency", "queue_consumer"),
    ],
};

/// The keys of `placement = { .. }` in `#[stream(..)]`.
static PLACEMENT_SPEC: Spec = Spec {
    attr: "stream(placement = { .. })",
    keys: &["cluster", "tags"],
    refused: &[],
    elsewhere: &[],
};

/// `placement = { cluster = "..", tags = [..] }`.
pub(crate) struct PlacementAttrs {
    pub cluster: Option<LitStr>,
    pub tags: Option<StrList>,
    /// The braces, for an empty block.
    pub block: proc_macro2::Group,
    /// Whether the block is empty or gave a key of its own (an unknown key alone is reported
    /// as such, not also as "names nothing").
    pub speaks: bool,
}

/// `#[stream(..)]`: each key's value, `None` when the key is absent or its value unreadable
/// (reported).
pub(crate) struct StreamAttrs {
    pub krate: Krate,
    pub name: Option<LitStr>,
    pub subjects: Option<StrList>,
    /// The `subjects` key, to point at when its list is empty.
    pub subjects_key: Option<Ident>,
    pub replicas: Option<Int>,
    pub storage: Option<Storage>,
    pub retention: Option<Retention>,
    pub max_age: Option<Dur>,
    pub max_msgs: Option<Int>,
    pub max_bytes: Option<Int>,
    pub max_msg_size: Option<Int>,
    pub discard: Option<Discard>,
    pub duplicate_window: Option<Dur>,
    pub description: Option<LitStr>,
    pub placement: Option<PlacementAttrs>,
    pub mirror: Option<OriginAttrs>,
    /// The sources, and the list's brackets.
    pub sources: Option<(Vec<OriginAttrs>, proc_macro2::Span)>,
    pub subject_transform: Option<TransformAttrs>,
    pub allow_msg_ttl: bool,
    pub allow_msg_schedules: bool,
    /// `codec = ".."`: how the handlers that read it decode its messages, unless they name
    /// their own (JSON when absent).
    pub codec: Option<super::CodecAttr>,
    pub external: bool,
    /// Every key given, as written, whatever its value: the keys an external stream cannot
    /// take are refused even when their value is wrong too.
    pub given: Vec<(&'static str, Ident)>,
}

impl StreamAttrs {
    pub(crate) fn parse(args: &Args, cx: &mut Ctxt) -> StreamAttrs {
        let krate = args.key("crate", "crate = my_facade").crate_path(cx);
        let name = args.key("name", "name = \"ORDERS\"").string(cx);
        args.require(
            "name",
            "`#[stream]` needs `name = \"...\"`: the stream's name on the server, as in `#[stream(name = \"ORDERS\", subjects = [\"orders.>\"])]`",
            cx,
        );
        let subjects_key = args.key("subjects", "subjects = [\"orders.>\"]");
        let subjects = subjects_key.strings(cx);
        if args.get("mirror").is_none() && args.get("sources").is_none() {
            args.require(
                "subjects",
                "`#[stream]` needs `subjects = [\"...\"]`: the subjects the stream captures, as in `subjects = [\"orders.>\"]` (or `mirror = ..` / `sources = [..]` for a stream that takes its messages from others)",
                cx,
            );
        }
        StreamAttrs {
            krate,
            name,
            subjects,
            subjects_key: subjects_key.arg.map(|arg| arg.key.clone()),
            external: args.key("external", "external").flag(cx),
            allow_msg_ttl: args.key("allow_msg_ttl", "allow_msg_ttl").flag(cx),
            allow_msg_schedules: args
                .key("allow_msg_schedules", "allow_msg_schedules")
                .flag(cx),
            codec: super::CodecAttr::parse(args, cx),
            replicas: args.key("replicas", "replicas = 3").int(
                REPLICAS,
                "JetStream keeps a stream on at most 5 servers",
                cx,
            ),
            storage: args
                .key("storage", "storage = \"file\"")
                .choice(&[("file", Storage::File), ("memory", Storage::Memory)], cx),
            retention: args.key("retention", "retention = \"limits\"").choice(
                &[
                    ("limits", Retention::Limits),
                    ("interest", Retention::Interest),
                    ("workqueue", Retention::WorkQueue),
                ],
                cx,
            ),
            max_age: args.key("max_age", "max_age = \"7d\"").duration(true, cx),
            max_msgs: args.key("max_msgs", "max_msgs = 1000000").int(
                MAX_MSGS,
                "omit `max_msgs` for no limit",
                cx,
            ),
            max_bytes: args.key("max_bytes", "max_bytes = 1073741824").int(
                MAX_BYTES,
                "omit `max_bytes` for no limit",
                cx,
            ),
            max_msg_size: args.key("max_msg_size", "max_msg_size = 1048576").int(
                MAX_MSG_SIZE,
                "omit `max_msg_size` for the server's limit",
                cx,
            ),
            discard: args
                .key("discard", "discard = \"old\"")
                .choice(&[("old", Discard::Old), ("new", Discard::New)], cx),
            duplicate_window: (args.key("duplicate_window", "duplicate_window = \"2m\""))
                .duration(true, cx),
            description: (args.key(
                "description",
                "description = \"orders placed by customers\"",
            ))
            .string(cx),
            placement: args
                .key(
                    "placement",
                    "placement = { cluster = \"east\", tags = [\"ssd\"] }",
                )
                .block(&PLACEMENT_SPEC, cx)
                .map(|(block, group)| PlacementAttrs {
                    cluster: block.key("cluster", "cluster = \"east\"").string(cx),
                    tags: block.key("tags", "tags = [\"ssd\"]").strings(cx),
                    speaks: group.stream().is_empty() || !block.given().is_empty(),
                    block: group,
                }),
            mirror: origin::mirror(
                &args.key(
                    "mirror",
                    "mirror = Orders` or `mirror = { stream = Orders, filter = \"orders.eu.>\" }",
                ),
                cx,
            ),
            sources: origin::sources(
                &args.key(
                    "sources",
                    "sources = [Orders, { stream = \"BILLING\", filter = \"billing.>\" }]",
                ),
                cx,
            ),
            subject_transform: origin::transform(
                &args.key(
                    "subject_transform",
                    "subject_transform = { src = \"in.>\", dest = \"events.>\" }",
                ),
                cx,
            ),
            given: args.given(),
        }
    }
}

#[cfg(test)]
mod tests {
    use topology_core::rules::EXTERNAL_REFUSED_KEYS;

    use super::SPEC;

    /// The keys that core's rules refuse on an external stream are keys of `#[stream]`, so that
    /// validation refuses them at their token.
    #[test]
    fn external_refused_keys_are_keys() {
        for key in EXTERNAL_REFUSED_KEYS {
            assert!(SPEC.keys.contains(key), "{key}");
        }
    }
}
