//! The rules of `#[broadcast]`: those of every consumer, and an ordered replay's.

use topology_core::ordered;

use super::consumer;
use crate::attrs::BroadcastAttrs;
use crate::ctxt::Ctxt;
use crate::value::key_msg;

/// The rules of `#[broadcast]`: those of every consumer, and an ordered replay's (decided by
/// `topology_core::ordered`, reported at the key that breaks them).
pub(crate) fn broadcast(attrs: &BroadcastAttrs, cx: &mut Ctxt) {
    consumer(&attrs.common, cx);
    if attrs.ordered.is_none() {
        return;
    }
    // A value outside `u32` is refused by the range check alone.
    if let Some(n) = &attrs.common.concurrency
        && let Ok(concurrency) = u32::try_from(n.value)
        && let Err(e) = ordered::check_concurrency(Some(concurrency))
    {
        cx.error_at(n.span, key_msg("broadcast", "concurrency", e.message()));
    }
    if let (Some(deliver), Some(key)) = (attrs.deliver, &attrs.deliver_key)
        && let Err(e) = ordered::check_deliver(deliver)
    {
        cx.error_spanned_by(key, key_msg("broadcast", "deliver", e.message()));
    }
}
