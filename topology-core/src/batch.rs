//! Batch handlers on a queue consumer: the handler gets up to `size` messages at once, or
//! what arrived within `wait` of the first, and each message is settled on its own (one
//! failure naks or dead-letters that message only).
//!
//! The batch is gathered by the instance from the messages it is delivered; nothing about it
//! is sent to the server, so it needs no server version. What it changes there is the
//! consumer's `max_ack_pending` when none is declared: it defaults to the instance's
//! concurrency, which a batch consumer sets to a whole batch.

pub use crate::error::BatchError;
pub use crate::model::BatchDecl;

use crate::duration;
use crate::prim::IntRange;

/// `batch`: at least 1 message, at most 10,000 (a batch is held in memory, and every message
/// of it waits for the slowest).
pub const BATCH_SIZE: IntRange = IntRange {
    min: 1,
    max: 10_000,
};

/// Checks a batch declaration against the consumer's declared `concurrency` and
/// `max_ack_pending`.
pub const fn check_batch(
    batch: &BatchDecl,
    concurrency: Option<u32>,
    max_ack_pending: Option<i64>,
) -> Result<(), BatchError> {
    if !BATCH_SIZE.contains(batch.size as i128) {
        return Err(BatchError::Size);
    }
    if batch.wait.is_zero() || !duration::fits(batch.wait) {
        return Err(BatchError::Wait);
    }
    if let Some(n) = concurrency
        && n < batch.size
    {
        return Err(BatchError::ConcurrencyBelowSize);
    }
    if let Some(n) = max_ack_pending
        && n < batch.size as i64
    {
        return Err(BatchError::MaxAckPendingBelowSize);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::time::Duration;

    #[test]
    fn a_batch_fits_its_consumer() {
        let batch = BatchDecl::new(50);
        assert_eq!(check_batch(&batch, None, None), Ok(()));
        assert_eq!(check_batch(&batch, Some(100), Some(150)), Ok(()));
        assert_eq!(
            check_batch(&batch, Some(49), None),
            Err(BatchError::ConcurrencyBelowSize)
        );
        assert_eq!(
            check_batch(&batch, None, Some(10)),
            Err(BatchError::MaxAckPendingBelowSize)
        );
        assert_eq!(
            check_batch(&BatchDecl::new(0), None, None),
            Err(BatchError::Size)
        );
        assert_eq!(
            check_batch(&batch.wait(Duration::ZERO), None, None),
            Err(BatchError::Wait)
        );
    }
}
