//! The keys of `#[kv_watch(..)]`.

use syn::{LitStr, Path};
use topology_core::watch::WatchFrom;

use crate::args::{Args, Refused, Spec};
use crate::ctxt::Ctxt;
use crate::value::{Krate, PathOrString};

const WATCH_GROUP: &[&str] = &[
    "a watch runs on every instance, each handling every change (as a `#[broadcast]` relay does); for work done once per change by one instance, write a `#[queue_consumer(stream = \"KV_<bucket>\", group = \"...\")]`",
];

pub(crate) static WATCH_SPEC: Spec = Spec {
    attr: "kv_watch",
    keys: &["bucket", "keys", "from", "crate"],
    refused: &[
        Refused {
            key: "group",
            why: WATCH_GROUP,
            answers: None,
        },
        Refused {
            key: "durable",
            why: WATCH_GROUP,
            answers: None,
        },
    ],
    elsewhere: &[
        ("stream", "broadcast"),
        ("subject", "broadcast"),
        ("subjects", "broadcast"),
        ("deliver", "broadcast"),
        ("concurrency", "broadcast"),
        ("name", "kv_bucket"),
    ],
};

/// `#[kv_watch(..)]`: each key's value, `None` when absent or unreadable (reported).
pub(crate) struct WatchAttrs {
    pub krate: Krate,
    /// The `#[kv_bucket]` type watched.
    pub bucket: Option<Path>,
    /// The keys watched (`None`: every key, `>`).
    pub keys: Option<LitStr>,
    pub from: Option<WatchFrom>,
}

impl WatchAttrs {
    pub(crate) fn parse(args: &Args, cx: &mut Ctxt) -> WatchAttrs {
        let krate = args.key("crate", "crate = my_facade").crate_path(cx);
        args.require(
            "bucket",
            "`#[kv_watch]` needs `bucket = ..`: the `#[kv_bucket]` type whose keys it watches, as in `#[kv_watch(bucket = MemberStatus, keys = \"member.>\")]`",
            cx,
        );
        let bucket = match args
            .key("bucket", "bucket = MemberStatus")
            .path_or_string(cx)
        {
            Some(PathOrString::Path(path)) => Some(path),
            Some(PathOrString::String(lit)) => {
                cx.error_spanned_by(
                    &lit,
                    format!(
                        "`#[kv_watch]` key `bucket`: name the bucket by its `#[kv_bucket]` type, not by a string ({:?}), so that the watch knows the type of its values, as in `bucket = MemberStatus`",
                        lit.value()
                    ),
                );
                None
            }
            None => None,
        };
        WatchAttrs {
            krate,
            bucket,
            keys: args.key("keys", "keys = \"member.>\"").string(cx),
            from: args.key("from", "from = \"now\"").choice(
                &[("current", WatchFrom::Current), ("now", WatchFrom::Now)],
                cx,
            ),
        }
    }
}
