//! The rules of `batch` and `batch_wait` on `#[queue_consumer]`, which need the handler: a
//! batch handler takes `Batch<T>` and no `Context` (each item carries its own), and a
//! `Batch<T>` handler needs `batch = N`.

use quote::ToTokens;
use syn::spanned::Spanned;
use topology_core::batch::{BatchDecl, BatchError, check_batch};

use crate::attrs::QueueAttrs;
use crate::ctxt::Ctxt;
use crate::item::{Arg, Handler};
use crate::value::key_msg;

pub(crate) fn batch(attrs: &QueueAttrs, handler: Option<&Handler>, cx: &mut Ctxt) {
    let attr = attrs.common.attr;
    let msg = |key: &str, what: &str| key_msg(attr, key, what);
    let batched = handler.and_then(|h| h.batch_of.as_ref().map(|_| h));
    let Some(size) = attrs.batch else {
        if attrs.batch_given {
            // The value was refused as it was read; one error is enough.
            return;
        }
        if let Some(wait) = &attrs.batch_wait {
            cx.error_spanned_by(
                &wait.lit,
                msg(
                    "batch_wait",
                    "sets how long a batch waits to fill, and no `batch = N` is set: add `batch = 50` (and a handler taking `Batch<T>`), or remove the key",
                ),
            );
        }
        if let Some(handler) = batched {
            cx.error_spanned_by(
                &handler.payload,
                format!(
                    "`#[{attr}]` handler takes `{}`, and the attribute sets no batch size: add `batch = N` (the most messages one call gets, as in `batch = 50`), or take a single message",
                    handler.payload.to_token_stream().to_string().replace(' ', "")
                ),
            );
        }
        return;
    };
    if let Some(handler) = handler {
        if handler.batch_of.is_none() {
            cx.error_spanned_by(
                &handler.payload,
                format!(
                    "`#[{attr}]` with `batch = {}` gives the handler a batch of messages: take `Batch<T>` here, as in `async fn {}(orders: Batch<Order>) -> Result<(), BatchError>`, or remove `batch`",
                    size.value,
                    handler.name()
                ),
            );
        }
        for arg in &handler.rest {
            if let Arg::Context(ty) = arg {
                cx.error_at(
                    ty.span(),
                    format!(
                        "`#[{attr}]` batch handlers take no `Context`: each message of the batch carries its own (`item.context()`); remove this argument"
                    ),
                );
            }
        }
    }
    let decl = BatchDecl::new(size.value as u32);
    let decl = match &attrs.batch_wait {
        Some(wait) => decl.wait(wait.value),
        None => decl,
    };
    let concurrency = attrs.common.concurrency.map(|n| n.value as u32);
    let max_ack_pending = attrs.max_ack_pending.map(|n| n.value as i64);
    match check_batch(&decl, concurrency, max_ack_pending) {
        Ok(()) => {}
        Err(BatchError::ConcurrencyBelowSize) => {
            if let Some(n) = attrs.common.concurrency {
                cx.error_at(
                    n.span,
                    msg(
                        "concurrency",
                        &format!(
                            "is {}, below `batch = {}`: {}",
                            n.value,
                            size.value,
                            BatchError::ConcurrencyBelowSize.message()
                        ),
                    ),
                );
            }
        }
        Err(BatchError::MaxAckPendingBelowSize) => {
            if let Some(n) = attrs.max_ack_pending {
                cx.error_at(
                    n.span,
                    msg(
                        "max_ack_pending",
                        &format!(
                            "is {}, below `batch = {}`: {}",
                            n.value,
                            size.value,
                            BatchError::MaxAckPendingBelowSize.message()
                        ),
                    ),
                );
            }
        }
        // The size's range and the wait's duration were checked as they were read.
        Err(BatchError::Size | BatchError::Wait) => {}
    }
}
