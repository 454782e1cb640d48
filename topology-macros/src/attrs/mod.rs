//! What each attribute says, as typed values that keep their tokens: `#[stream]` gives a
//! [`StreamAttrs`], `#[queue_consumer]` a [`QueueAttrs`], `#[broadcast]` a [`BroadcastAttrs`],
//! `#[service]` a [`ServiceAttrs`], `#[endpoint]` an [`EndpointAttrs`], `#[subscription]` a
//! [`SubscriptionAttrs`], `#[kv_bucket]` and `#[object_store]` a [`BucketAttrs`], `#[kv_watch]` a [`WatchAttrs`].
//!
//! Parsing reads each key's value as the type the key takes (a string, an integer within its
//! range, a duration, one of a set of words) and reports a missing required key; it applies no
//! rule between values. The rules are in [`crate::validate`]; the code is generated from these
//! structs by [`crate::emit`].

pub(crate) mod broadcast;
pub(crate) mod bucket;
pub(crate) mod consumer;
pub(crate) mod origin;
pub(crate) mod service;
pub(crate) mod stream;
pub(crate) mod watch;

pub(crate) use broadcast::BroadcastAttrs;
pub(crate) use bucket::BucketAttrs;
pub(crate) use consumer::{ConsumerAttrs, Filters, PolicyName, PriorityAttrs, QueueAttrs};
pub(crate) use origin::OriginAttrs;
pub(crate) use service::{EndpointAttrs, ServiceAttrs, SubscriptionAttrs};
pub(crate) use stream::{PlacementAttrs, StreamAttrs};
pub(crate) use watch::WatchAttrs;

use proc_macro2::Span;
use topology_core::codec::CodecId;

use crate::args::Args;
use crate::ctxt::Ctxt;

/// `codec = ".."`: the payload codec, and the key's token (where errors about it point).
#[derive(Clone, Copy)]
pub(crate) struct CodecAttr {
    pub id: CodecId,
    pub span: Span,
}

impl CodecAttr {
    /// The `codec` key of `args`, `None` when absent or unreadable (reported). Raw bytes are
    /// chosen by the payload type (`Bytes`, `Vec<u8>`), not by name.
    pub(crate) fn parse(args: &Args, cx: &mut Ctxt) -> Option<CodecAttr> {
        let key = args.key("codec", "codec = \"msgpack\"");
        let choices = [
            CodecId::Json,
            CodecId::MsgPack,
            CodecId::Cbor,
            CodecId::Protobuf,
        ]
        .map(|id| (id.name(), id));
        let id = key.choice(&choices, cx)?;
        Some(CodecAttr {
            id,
            span: key.arg.map_or_else(Span::call_site, |a| a.key.span()),
        })
    }
}

/// `layer = f`: the path of a function returning the handler's `tower` layer.
pub(crate) fn layer_fn(args: &Args, cx: &mut Ctxt) -> Option<syn::Path> {
    let key = args.key("layer", "layer = billing_layers");
    match key.path_or_string(cx)? {
        crate::value::PathOrString::Path(path) => Some(path),
        crate::value::PathOrString::String(lit) => {
            cx.error_spanned_by(
                &lit,
                key.msg("expected the name of a function returning a `tower` layer, as in `layer = billing_layers`, not a string"),
            );
            None
        }
    }
}
