//! The keys of `#[service(..)]`, `#[endpoint(..)]` and `#[subscription(..)]`.

use syn::{Ident, LitStr, Path};
use topology_core::rules::CONCURRENCY;

use syn::{Expr, ExprLit, Lit};

use super::CodecAttr;
use crate::args::{Arg, Args, Refused, Spec, Value};
use crate::ctxt::Ctxt;
use crate::value::{Dur, Int, Krate, Pairs, PathOrString, ungroup};

/// What a plain subscription for work does, and what to write instead: the end of every
/// message that refuses one.
const N_ANSWERS: &str = "without a queue group every replica receives each request, so N replicas send N answers to one request and do its work N times";
const ENDPOINT_FIX: &str = "an endpoint is always in a queue group shared by the service's instances, so that each request is answered by one of them: name the group with `group = \"...\"` (default: the service's `queue_group`, else `q`), or use `#[subscription(subject = \"...\", each_instance)]` for messages that every instance must receive";
const N_TIMES: &str = "a plain subscription hands every message to every replica, so on N replicas each message is handled N times";
const SUBSCRIPTION_FIX: &str = "write `group = \"...\"` for work shared by the instances (each message handled by one of them), or `each_instance` to say that every instance must receive every message";

/// Why a key is refused, after "`#[attr]` has no `key` key: ".
const ENDPOINT_QUEUE_GROUP: &[&str] = &[
    "an endpoint's queue group is its `group` key, and it cannot be turned off: ",
    N_ANSWERS,
    "; ",
    ENDPOINT_FIX,
];
const ENDPOINT_PLAIN: &[&str] = &[
    "an endpoint cannot leave its queue group: ",
    N_ANSWERS,
    "; ",
    ENDPOINT_FIX,
];
const ENDPOINT_DURABLE: &[&str] = &[
    "an endpoint is a core NATS subscription, not a JetStream consumer, so it has no durable; ",
    ENDPOINT_FIX,
];
const SUBSCRIPTION_QUEUE_GROUP: &[&str] = &[
    "a subscription's queue group is its `group` key, and it cannot be turned off: ",
    N_TIMES,
    "; ",
    SUBSCRIPTION_FIX,
];
const SUBSCRIPTION_PLAIN: &[&str] = &[N_TIMES, "; ", SUBSCRIPTION_FIX];
const SUBSCRIPTION_EACH: &[&str] = &[
    "write `each_instance` for every instance to receive every message, or `group = \"...\"` for work shared by the instances",
];
const SUBSCRIPTION_DURABLE: &[&str] = &[
    "a core subscription keeps nothing for an instance that is down; for stored messages handled once by one instance, use `#[queue_consumer(stream = .., group = \"...\")]`, or ",
    SUBSCRIPTION_FIX,
];
const SERVICE_GROUP: &[&str] = &[
    "the queue group of a service's endpoints is `queue_group = \"...\"` (default `q`; each endpoint may set its own with `group`)",
];

pub(crate) static SERVICE_SPEC: Spec = Spec {
    attr: "service",
    keys: &[
        "name",
        "version",
        "description",
        "queue_group",
        "metadata",
        "crate",
    ],
    refused: &[Refused {
        key: "group",
        why: SERVICE_GROUP,
        answers: None,
    }],
    elsewhere: &[
        ("subject", "endpoint"),
        ("timeout", "endpoint"),
        ("concurrency", "endpoint"),
        ("subjects", "stream"),
    ],
};

/// `Refused` entries, a group of keys at a time: `why, answers => [keys];`.
macro_rules! refused {
    ($($why:expr, $answers:expr => [$($key:literal),*];)*) => {
        &[$($(Refused { key: $key, why: $why, answers: $answers }),*),*]
    };
}

pub(crate) static ENDPOINT_SPEC: Spec = Spec {
    attr: "endpoint",
    keys: &[
        "service",
        "subject",
        "name",
        "group",
        "concurrency",
        "timeout",
        "metadata",
        "codec",
        "layer",
        "crate",
    ],
    // Every way of asking for an endpoint outside a queue group.
    refused: refused![
        ENDPOINT_QUEUE_GROUP, None => ["queue_group", "queue"];
        ENDPOINT_PLAIN, None => [
            "no_queue", "no_group", "plain", "each_instance", "all_instances", "broadcast"
        ];
        ENDPOINT_DURABLE, None => ["durable", "durable_name"];
    ],
    elsewhere: &[
        ("version", "service"),
        ("description", "service"),
        ("stream", "queue_consumer"),
        ("subjects", "queue_consumer"),
    ],
};

pub(crate) static SUBSCRIPTION_SPEC: Spec = Spec {
    attr: "subscription",
    keys: &[
        "subject",
        "group",
        "each_instance",
        "concurrency",
        "codec",
        "crate",
    ],
    // Every way of asking for a plain subscription; each explains the missing `group`.
    refused: refused![
        SUBSCRIPTION_QUEUE_GROUP, Some("group") => ["queue_group", "queue"];
        SUBSCRIPTION_PLAIN, Some("group") => ["no_queue", "no_group", "plain"];
        SUBSCRIPTION_EACH, Some("group") => ["all_instances", "broadcast"];
        SUBSCRIPTION_DURABLE, Some("group") => ["durable", "durable_name"];
    ],
    elsewhere: &[
        ("service", "endpoint"),
        ("name", "endpoint"),
        ("timeout", "endpoint"),
        ("metadata", "endpoint"),
        ("stream", "queue_consumer"),
        ("subjects", "queue_consumer"),
    ],
};

/// `#[service(..)]`: each key's value, `None` when the key is absent or its value unreadable
/// (reported).
pub(crate) struct ServiceAttrs {
    pub krate: Krate,
    pub name: Option<LitStr>,
    /// `None`: the declaring crate's version.
    pub version: Option<LitStr>,
    pub description: Option<LitStr>,
    pub queue_group: Option<LitStr>,
    pub metadata: Option<Pairs>,
}

/// `#[endpoint(..)]`.
pub(crate) struct EndpointAttrs {
    pub krate: Krate,
    pub service: Option<Path>,
    pub subject: Option<LitStr>,
    /// `None`: the handler's name.
    pub name: Option<LitStr>,
    pub group: Option<LitStr>,
    pub concurrency: Option<Int>,
    pub timeout: Option<Dur>,
    pub metadata: Option<Pairs>,
    /// How its requests and replies are written (JSON when absent).
    pub codec: Option<CodecAttr>,
    /// `layer = f`: the function building the endpoint's `tower` layer.
    pub layer: Option<syn::Path>,
}

/// `#[subscription(..)]`.
pub(crate) struct SubscriptionAttrs {
    pub krate: Krate,
    pub subject: Option<LitStr>,
    pub group: Option<LitStr>,
    /// The `each_instance` key, when given (and not `= false`).
    pub each_instance: Option<Ident>,
    /// With both `group` and `each_instance`, the key written second.
    pub both: Option<Ident>,
    pub concurrency: Option<Int>,
    /// How its messages are written (JSON when absent).
    pub codec: Option<CodecAttr>,
}

const METADATA_EXAMPLE: &str = "metadata = [(\"team\", \"members\")]";

impl ServiceAttrs {
    pub(crate) fn parse(args: &Args, cx: &mut Ctxt) -> ServiceAttrs {
        let krate = args.key("crate", "crate = my_facade").crate_path(cx);
        let name = args.key("name", "name = \"members\"").string(cx);
        args.require(
            "name",
            "`#[service]` needs `name = \"...\"`: the service's name in the NATS micro protocol (letters, digits, `_`, `-`), as in `#[service(name = \"members\")]`",
            cx,
        );
        ServiceAttrs {
            krate,
            name,
            version: args.key("version", "version = \"1.2.0\"").string(cx),
            description: (args.key("description", "description = \"member lookups\"")).string(cx),
            queue_group: (args.key("queue_group", "queue_group = \"members\"")).string(cx),
            metadata: args.key("metadata", METADATA_EXAMPLE).pairs(cx),
        }
    }
}

impl EndpointAttrs {
    pub(crate) fn parse(args: &Args, cx: &mut Ctxt) -> EndpointAttrs {
        let krate = args.key("crate", "crate = my_facade").crate_path(cx);
        let key = args.key("service", "service = Members");
        let service = match key.path_or_string(cx) {
            Some(PathOrString::Path(path)) => Some(path),
            Some(PathOrString::String(lit)) => {
                cx.error_spanned_by(
                    &lit,
                    key.msg("name the `#[service]` type, as in `service = Members`, not a string: the compiler then checks that it is a service"),
                );
                None
            }
            None => None,
        };
        args.require(
            "service",
            "`#[endpoint]` needs `service = ...`: the `#[service]` type it belongs to, as in `service = Members`",
            cx,
        );
        let subject = args.key("subject", "subject = \"members.get\"").string(cx);
        args.require(
            "subject",
            "`#[endpoint]` needs `subject = \"...\"`: the subject its requests are sent to, as in `subject = \"members.get\"`",
            cx,
        );
        EndpointAttrs {
            krate,
            service,
            subject,
            name: args.key("name", "name = \"get\"").string(cx),
            group: args.key("group", "group = \"members\"").string(cx),
            concurrency: args
                .key("concurrency", "concurrency = 8")
                .int(CONCURRENCY, "", cx),
            timeout: args.key("timeout", "timeout = \"5s\"").duration(true, cx),
            metadata: args.key("metadata", METADATA_EXAMPLE).pairs(cx),
            codec: CodecAttr::parse(args, cx),
            layer: super::layer_fn(args, cx),
        }
    }
}

impl SubscriptionAttrs {
    pub(crate) fn parse(args: &Args, cx: &mut Ctxt) -> SubscriptionAttrs {
        let attr = SUBSCRIPTION_SPEC.attr;
        let krate = args.key("crate", "crate = my_facade").crate_path(cx);
        let subject = args
            .key("subject", "subject = \"cache.invalidate\"")
            .string(cx);
        args.require(
            "subject",
            "`#[subscription]` needs `subject = \"...\"`: the subject it receives, as in `subject = \"cache.invalidate\"`",
            cx,
        );
        let group = args.key("group", "group = \"workers\"").string(cx);
        let each = args.key("each_instance", "each_instance");
        let each_instance = (each.flag(cx))
            .then(|| each.arg.map(|a| a.key.clone()))
            .flatten();
        if args.report_missing("group") {
            match each.arg {
                None => cx.error_at(
                    proc_macro2::Span::call_site(),
                    format!("`#[{attr}]` needs `group = \"...\"` or `each_instance`: without either, {N_TIMES}; {SUBSCRIPTION_FIX}"),
                ),
                Some(arg) if is_false(arg) => cx.error_spanned_by(
                    &arg.key,
                    format!("`#[{attr}]` key `each_instance`: `each_instance = false` without a `group`: {N_TIMES}; {SUBSCRIPTION_FIX}"),
                ),
                Some(_) => {}
            }
        }
        let both = match (args.get("group"), &each_instance) {
            (Some(group), Some(each)) => {
                Some(if args.position("group") < args.position("each_instance") {
                    each.clone()
                } else {
                    group.key.clone()
                })
            }
            _ => None,
        };
        SubscriptionAttrs {
            krate,
            subject,
            group,
            each_instance,
            both,
            concurrency: args
                .key("concurrency", "concurrency = 8")
                .int(CONCURRENCY, "", cx),
            codec: CodecAttr::parse(args, cx),
        }
    }
}

/// `key = false`.
fn is_false(arg: &Arg) -> bool {
    matches!(&arg.value, Value::Expr(expr) if matches!(
        ungroup(expr),
        Expr::Lit(ExprLit { lit: Lit::Bool(b), .. }) if !b.value
    ))
}

#[cfg(test)]
mod tests {
    use super::{ENDPOINT_SPEC, SERVICE_SPEC, SUBSCRIPTION_SPEC};

    /// A refused key or a key of another macro is never also accepted, and an endpoint refuses
    /// every word for a plain subscription that `#[subscription]` refuses.
    #[test]
    fn specs_are_consistent() {
        for spec in [&SERVICE_SPEC, &ENDPOINT_SPEC, &SUBSCRIPTION_SPEC] {
            for refused in spec.refused {
                assert!(!spec.keys.contains(&refused.key), "{}", refused.key);
            }
            for (key, _) in spec.elsewhere {
                assert!(!spec.keys.contains(key), "{key}");
            }
        }
        for refused in SUBSCRIPTION_SPEC.refused {
            let on_endpoint = ENDPOINT_SPEC.refused.iter().any(|r| r.key == refused.key);
            assert!(on_endpoint, "{}", refused.key);
        }
    }
}
