//! The rules of `priority` on `#[queue_consumer]` and its keys: a pinned client needs
//! `pinned_ttl`, overflow a threshold; each key only with its policy; never on a push consumer.

use topology_core::model::Delivery;
use topology_core::priority::{MIN_PINNED_TTL, PriorityError};

use crate::attrs::{PolicyName, PriorityAttrs, QueueAttrs};
use crate::ctxt::Ctxt;
use crate::value::key_msg;

/// The rules of `priority` and its keys: a pinned client needs `pinned_ttl`, overflow a
/// threshold; each key only with its policy; never on a push consumer.
pub(super) fn priority(attrs: &QueueAttrs, priority: &PriorityAttrs, cx: &mut Ctxt) {
    let attr = attrs.common.attr;
    let msg = |key: &str, what: &str| key_msg(attr, key, what);
    let Some(key) = &priority.policy_key else {
        // Keys that go with a policy, without one.
        let example = if priority.pinned_ttl.is_some() {
            "priority = \"pinned_client\""
        } else {
            "priority = \"overflow\""
        };
        let what = format!(
            "goes with a priority policy, and none is set; add `{example}`, or remove the key"
        );
        if let Some(ttl) = &priority.pinned_ttl {
            cx.error_spanned_by(&ttl.lit, msg("pinned_ttl", &what));
        }
        for (key, n) in [
            ("min_pending", priority.min_pending),
            ("min_ack_pending", priority.min_ack_pending),
        ] {
            if let Some(n) = n {
                cx.error_at(n.span, msg(key, &what));
            }
        }
        return;
    };
    if attrs.delivery == Some(Delivery::Push) {
        cx.error_spanned_by(key, msg("priority", PriorityError::Push.message()));
    }
    match priority.policy {
        Some(PolicyName::PinnedClient) => {
            if let Some(ttl) = &priority.pinned_ttl
                && ttl.value < MIN_PINNED_TTL
            {
                cx.error_spanned_by(
                    &ttl.lit,
                    msg(
                        "pinned_ttl",
                        &format!(
                            "{:?} is too short: {}",
                            ttl.lit.value(),
                            PriorityError::PinnedTtl.message()
                        ),
                    ),
                );
            }
            if priority.pinned_ttl.is_none() {
                cx.error_spanned_by(
                    key,
                    msg(
                        "priority",
                        "`\"pinned_client\"` needs `pinned_ttl = \"..\"`: how long the pinned instance may go without pulling (killed, stalled) before another takes over, as in `pinned_ttl = \"10s\"`",
                    ),
                );
            }
            for (key, n) in [
                ("min_pending", priority.min_pending),
                ("min_ack_pending", priority.min_ack_pending),
            ] {
                if let Some(n) = n {
                    cx.error_at(
                        n.span,
                        msg(
                            key,
                            "is a threshold of `priority = \"overflow\"`; a pinned client has one consuming instance whatever the backlog; remove it",
                        ),
                    );
                }
            }
        }
        Some(PolicyName::Overflow) => {
            if !priority.threshold_written {
                cx.error_spanned_by(
                    key,
                    msg(
                        "priority",
                        "`\"overflow\"` needs a threshold: `min_pending = N` (undelivered messages) or `min_ack_pending = N` (unacknowledged ones), from which spill-over instances take work",
                    ),
                );
            }
            if let Some(ttl) = &priority.pinned_ttl {
                cx.error_spanned_by(
                    &ttl.lit,
                    msg(
                        "pinned_ttl",
                        "is the pin's timeout of `priority = \"pinned_client\"`; overflow pins nobody; remove it",
                    ),
                );
            }
        }
        None => {}
    }
}
