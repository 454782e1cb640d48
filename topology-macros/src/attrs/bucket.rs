//! The keys of `#[kv_bucket(..)]` and `#[object_store(..)]`.

use quote::ToTokens;
use syn::{Expr, ExprLit, Ident, Lit, LitStr, Type};
use topology_core::bucket::{BucketKind, HISTORY, MAX_VALUE_SIZE};
use topology_core::model::Storage;
use topology_core::rules::{MAX_BYTES, REPLICAS};

use super::CodecAttr;
use crate::args::{Args, Spec, Value};
use crate::ctxt::Ctxt;
use crate::value::{Dur, Int, Krate, ungroup};

pub(crate) static KV_SPEC: Spec = Spec {
    attr: "kv_bucket",
    keys: &[
        "name",
        "value",
        "codec",
        "history",
        "ttl",
        "replicas",
        "storage",
        "max_value_size",
        "max_bytes",
        "description",
        "external",
        "crate",
    ],
    refused: &[],
    elsewhere: &[
        ("subjects", "stream"),
        ("max_age", "stream"),
        ("max_msgs", "stream"),
        ("max_msg_size", "stream"),
        ("retention", "stream"),
        ("discard", "stream"),
    ],
};

pub(crate) static OBJECT_SPEC: Spec = Spec {
    attr: "object_store",
    keys: &[
        "name",
        "ttl",
        "replicas",
        "storage",
        "max_bytes",
        "description",
        "external",
        "crate",
    ],
    refused: &[],
    elsewhere: &[
        ("history", "kv_bucket"),
        ("max_value_size", "kv_bucket"),
        ("value", "kv_bucket"),
        ("codec", "kv_bucket"),
        ("subjects", "stream"),
        ("max_age", "stream"),
        ("retention", "stream"),
    ],
};

/// `#[kv_bucket(..)]` or `#[object_store(..)]`: each key's value, `None` when the key is
/// absent or its value unreadable (reported).
pub(crate) struct BucketAttrs {
    pub kind: BucketKind,
    pub krate: Krate,
    pub name: Option<LitStr>,
    /// The type of a key-value bucket's values (`None`: raw bytes).
    pub value: Option<Type>,
    /// `codec = ".."`: how its values are written (JSON when absent).
    pub codec: Option<CodecAttr>,
    pub history: Option<Int>,
    pub ttl: Option<Dur>,
    pub replicas: Option<Int>,
    pub storage: Option<Storage>,
    pub max_value_size: Option<Int>,
    pub max_bytes: Option<Int>,
    pub description: Option<LitStr>,
    pub external: bool,
    /// Every key given, as written: the keys an external bucket cannot take are refused.
    pub given: Vec<(&'static str, Ident)>,
}

impl BucketAttrs {
    pub(crate) fn parse_kv(args: &Args, cx: &mut Ctxt) -> BucketAttrs {
        Self::parse(BucketKind::KeyValue, args, cx)
    }

    pub(crate) fn parse_object(args: &Args, cx: &mut Ctxt) -> BucketAttrs {
        Self::parse(BucketKind::Object, args, cx)
    }

    fn parse(kind: BucketKind, args: &Args, cx: &mut Ctxt) -> BucketAttrs {
        let krate = args.key("crate", "crate = my_facade").crate_path(cx);
        let name = args.key("name", "name = \"MEMBER_STATUS\"").string(cx);
        let attr = match kind {
            BucketKind::KeyValue => "kv_bucket",
            BucketKind::Object => "object_store",
        };
        args.require(
            "name",
            format!(
                "`#[{attr}]` needs `name = \"...\"`: the bucket's name on the server, as in `#[{attr}(name = \"MEMBER_STATUS\")]`"
            ),
            cx,
        );
        let kv = kind == BucketKind::KeyValue;
        BucketAttrs {
            kind,
            krate,
            name,
            value: if kv { value_type(args, cx) } else { None },
            codec: if kv { CodecAttr::parse(args, cx) } else { None },
            history: if kv {
                args.key("history", "history = 5").int(
                    HISTORY,
                    "a key-value bucket keeps 1 to 64 values per key",
                    cx,
                )
            } else {
                None
            },
            ttl: args.key("ttl", "ttl = \"1h\"").duration(true, cx),
            replicas: args.key("replicas", "replicas = 3").int(
                REPLICAS,
                "JetStream keeps a bucket on at most 5 servers",
                cx,
            ),
            storage: args
                .key("storage", "storage = \"file\"")
                .choice(&[("file", Storage::File), ("memory", Storage::Memory)], cx),
            max_value_size: if kv {
                args.key("max_value_size", "max_value_size = 1048576").int(
                    MAX_VALUE_SIZE,
                    "omit `max_value_size` for the server's limit",
                    cx,
                )
            } else {
                None
            },
            max_bytes: args.key("max_bytes", "max_bytes = 1073741824").int(
                MAX_BYTES,
                "omit `max_bytes` for no limit",
                cx,
            ),
            description: args
                .key("description", "description = \"the status of each member\"")
                .string(cx),
            external: args.key("external", "external").flag(cx),
            given: args.given(),
        }
    }
}

/// `value = Status`, or a string holding a type (`value = "Vec<String>"`: generic types are not
/// expressions).
fn value_type(args: &Args, cx: &mut Ctxt) -> Option<Type> {
    let arg = args.get("value")?;
    let key = args.key("value", "value = Status");
    let Value::Expr(expr) = &arg.value else {
        // Reported (and nothing else read) by the string reader.
        key.string(cx);
        return None;
    };
    match ungroup(expr) {
        Expr::Path(p) if p.qself.is_none() && p.attrs.is_empty() => {
            syn::parse2::<Type>(p.path.to_token_stream()).ok()
        }
        Expr::Lit(ExprLit {
            lit: Lit::Str(s), ..
        }) => {
            match s.parse::<Type>() {
                Ok(ty) => Some(ty),
                Err(_) => {
                    cx.error_spanned_by(
                    s,
                    key.msg(format!("{:?} is not a type, as in `value = Status` or `value = \"Vec<String>\"`", s.value())),
                );
                    None
                }
            }
        }
        other => {
            cx.error_spanned_by(
                other,
                key.msg("expected a type, as in `value = Status` (a generic type in a string: `value = \"Vec<String>\"`)"),
            );
            None
        }
    }
}
