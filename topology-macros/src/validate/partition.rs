//! The rules of `key` and `partitions` on `#[queue_consumer]`: both or neither, a key of `*`
//! tokens the consumer's one subject has, a count in range, and none of what each partition
//! sets itself.

use topology_core::model::Delivery;
use topology_core::partition::{PartitionError, Partitioning, check_partitioning};

use crate::attrs::{Filters, QueueAttrs};
use crate::ctxt::Ctxt;
use crate::value::key_msg;

/// The rules of `key` and `partitions`: both or neither, a key of `*` tokens the one subject
/// has, and none of what each partition sets itself.
pub(super) fn partitioned(attrs: &QueueAttrs, cx: &mut Ctxt) {
    let attr = attrs.common.attr;
    let msg = |key: &str, what: String| key_msg(attr, key, what);
    if let Some(old) = attrs.migrate_from_partitions
        && (attrs.migrate_from.is_none() || attrs.partitions.is_none())
    {
        let why = PartitionError::MigrateFromPartitionsAlone.message();
        cx.error_at(old.span, msg("migrate_from_partitions", why.into()));
    }
    let (key, partitions) = match (&attrs.key, attrs.partitions) {
        (None, None) => return,
        (Some(key), None) => {
            cx.error_spanned_by(key, msg("key", "a key partitions the group, and needs `partitions = N` beside it: how many partitions (fixed for the group; each is a consumer on the server), e.g. `partitions = 16`".into()));
            return;
        }
        (None, Some(n)) => {
            cx.error_at(n.span, msg("partitions", "partitions need `key = \"{n}\"` beside them: the subject's `*` tokens whose value keeps its messages in order (e.g. the member id in `orders.*.paid` is `{1}`)".into()));
            return;
        }
        (Some(key), Some(n)) => (key, n),
    };
    let positions = match crate::value::partition_key(&key.value()) {
        Ok(positions) => positions,
        Err(why) => {
            cx.error_spanned_by(key, msg("key", why));
            return;
        }
    };
    let refuse = |cx: &mut Ctxt, error: PartitionError| {
        cx.error_at(partitions.span, msg("partitions", error.message().into()));
    };
    let lits = attrs.common.filters.lits();
    let [subject] = lits else {
        if !lits.is_empty() || matches!(attrs.common.filters, Filters::Whole) {
            refuse(cx, PartitionError::OneSubject);
        }
        return;
    };
    let key_static: &'static [u8] = Box::leak(positions.into_boxed_slice());
    let partitioning = Partitioning::new(partitions.value as u16, key_static);
    match check_partitioning(&subject.value(), &partitioning) {
        Ok(()) => {}
        Err(
            error @ PartitionError::KeyPastWildcards {
                position,
                wildcards,
            },
        ) => {
            let has = match wildcards {
                0 => "no `*` token, so nothing to key by: partition a subject with the key as a `*` token, e.g. `orders.*.paid`".to_owned(),
                1 => "one `*` token: `{1}`".to_owned(),
                n => format!("{n} `*` tokens: `{{1}}` to `{{{n}}}`"),
            };
            cx.error_spanned_by(
                key,
                msg(
                    "key",
                    format!(
                        "`{{{position}}}` is not a `*` token of {:?}, which has {has} ({})",
                        subject.value(),
                        error.message()
                    ),
                ),
            );
        }
        Err(error) => cx.error_spanned_by(key, msg("key", error.message().into())),
    }
    if attrs.delivery == Some(Delivery::Push) {
        refuse(cx, PartitionError::Push);
    }
    if attrs.priority.is_some() {
        refuse(cx, PartitionError::Priority);
    }
    if attrs.max_ack_pending.is_some() {
        refuse(cx, PartitionError::MaxAckPending);
    }
    if attrs.batch_given {
        refuse(cx, PartitionError::Batch);
    }
    if attrs.common.concurrency.is_some() {
        refuse(cx, PartitionError::Concurrency);
    }
}
