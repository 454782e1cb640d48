//! The rules of `#[broadcast]`: those of every consumer, and an ordered replay's.

use topology_core::model::DeliverPolicy;
use topology_core::ordered::{ORDERED_CONCURRENCY, ORDERED_DELIVER};

use super::consumer;
use crate::attrs::BroadcastAttrs;
use crate::ctxt::Ctxt;
use crate::value::key_msg;

/// The rules of `#[broadcast]`: those of every consumer, and an ordered replay's: one
/// message at a time, from what the stream holds.
pub(crate) fn broadcast(attrs: &BroadcastAttrs, cx: &mut Ctxt) {
    consumer(&attrs.common, cx);
    if attrs.ordered.is_none() {
        return;
    }
    if let Some(n) = &attrs.common.concurrency
        && n.value > 1
    {
        cx.error_at(
            n.span,
            key_msg("broadcast", "concurrency", ORDERED_CONCURRENCY),
        );
    }
    if let (Some(DeliverPolicy::New | DeliverPolicy::Last), Some(key)) =
        (attrs.deliver, &attrs.deliver_key)
    {
        cx.error_spanned_by(key, key_msg("broadcast", "deliver", ORDERED_DELIVER));
    }
}
