//! Batch handlers on a queue consumer: the handler gets up to `size` messages at once, or
//! what arrived within `wait` of the first, and each message is settled on its own (one
//! failure naks or dead-letters that message only).
//!
//! The batch is gathered by the instance from the messages it is delivered; nothing about it
//! is sent to the server, so it needs no server version. What it changes there is the
//! consumer's `max_ack_pending` when none is declared: it defaults to the instance's
//! concurrency, which a batch consumer sets to a whole batch.

use core::time::Duration;

use crate::duration;
use crate::rules::IntRange;

/// How a queue consumer's handler receives its messages in batches.
///
/// ```
/// use core::time::Duration;
/// use topology_core::batch::BatchDecl;
/// use topology_core::model::QueueDecl;
///
/// const BILLING: QueueDecl = QueueDecl::new("billing").batch(BatchDecl::new(50));
/// const SLOW: QueueDecl =
///     QueueDecl::new("audit").batch(BatchDecl::new(500).wait(Duration::from_secs(1)));
/// assert_eq!(BILLING.batch.unwrap().wait, BatchDecl::DEFAULT_WAIT);
/// assert_eq!(SLOW.batch.unwrap().size, 500);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BatchDecl {
    /// The most messages one call of the handler gets.
    pub size: u32,
    /// How long the first message of a batch waits for the others before the handler runs
    /// with what arrived.
    pub wait: Duration,
}

impl BatchDecl {
    /// How long a batch waits to fill when no `batch_wait` is declared.
    pub const DEFAULT_WAIT: Duration = Duration::from_millis(100);

    /// Batches of up to `size` messages, waiting [`BatchDecl::DEFAULT_WAIT`] to fill.
    pub const fn new(size: u32) -> Self {
        BatchDecl {
            size,
            wait: Self::DEFAULT_WAIT,
        }
    }

    /// Sets how long a batch waits to fill.
    pub const fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }
}

/// `batch`: at least 1 message, at most 10,000 (a batch is held in memory, and every message
/// of it waits for the slowest).
pub const BATCH_SIZE: IntRange = IntRange {
    min: 1,
    max: 10_000,
};

/// What is wrong with a batch declaration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BatchError {
    /// `size` outside [`BATCH_SIZE`].
    Size,
    /// `wait` is zero or too long.
    Wait,
    /// A declared `concurrency` below the batch size: no batch could fill.
    ConcurrencyBelowSize,
    /// A declared `max_ack_pending` below the batch size: the server would never deliver a
    /// whole batch.
    MaxAckPendingBelowSize,
}

impl BatchError {
    /// What is wrong, in lowercase, with what to do.
    pub const fn message(&self) -> &'static str {
        match self {
            BatchError::Size => "a batch holds at least 1 and at most 10000 messages",
            BatchError::Wait => {
                "batch_wait must be more than zero and at most about 292 years; omit it for 100ms"
            }
            BatchError::ConcurrencyBelowSize => {
                "a batch consumer holds a whole batch at once, so its concurrency (counted in messages) must be at least the batch size: omit it for one batch at a time, or set a multiple of the batch size to run that many batches at once"
            }
            BatchError::MaxAckPendingBelowSize => {
                "the server would never deliver a whole batch: raise max_ack_pending to at least the batch size times the replicas, or omit it"
            }
        }
    }
}

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
