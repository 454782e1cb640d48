//! The server's limits on declared values: the ranges of integers the keys accept, and the
//! longest description.

use crate::prim::IntRange;

/// `replicas`: 1 to 5 (a JetStream cluster replicates a stream on at most five servers).
pub const REPLICAS: IntRange = IntRange { min: 1, max: 5 };
/// `max_msgs`: at least 1 (omit the key for no limit).
pub const MAX_MSGS: IntRange = IntRange {
    min: 1,
    max: i64::MAX as i128,
};
/// `max_bytes`: at least 1 (omit the key for no limit).
pub const MAX_BYTES: IntRange = IntRange {
    min: 1,
    max: i64::MAX as i128,
};
/// `max_msg_size`: at least 1 byte, at most `i32::MAX` (omit the key for the server's limit).
pub const MAX_MSG_SIZE: IntRange = IntRange {
    min: 1,
    max: i32::MAX as i128,
};
/// `max_deliver`: at least 1 (omit the key for unlimited deliveries; `-1` is not accepted).
pub const MAX_DELIVER: IntRange = IntRange {
    min: 1,
    max: i64::MAX as i128,
};
/// `max_ack_pending`: at least 1 (omit the key for the server's default of 1000).
pub const MAX_ACK_PENDING: IntRange = IntRange {
    min: 1,
    max: i64::MAX as i128,
};
/// `max_waiting`: pull requests waiting at a consumer at once, all instances' together. The
/// server reserves room for them when it loads the consumer, so the bound keeps a typo from
/// reserving gigabytes.
pub const MAX_WAITING: IntRange = IntRange {
    min: 1,
    max: 100_000,
};
/// The `max_waiting` of a pull queue consumer the runtime creates when none is declared: room
/// for 2,000 replicas keeping two requests open each (the server's own default, 512, leaves
/// replicas of a fleet past about 250 with nothing delivered).
pub const DEFAULT_MAX_WAITING: i64 = 4_096;
/// `concurrency`: at least 1 message handled at once by one instance.
pub const CONCURRENCY: IntRange = IntRange {
    min: 1,
    max: u32::MAX as i128,
};

/// [`MAX_DESCRIPTION_LEN`] as a literal, for the `concat!`ed messages (`concat!` takes
/// literals only): the number is written once.
macro_rules! max_description_len {
    () => {
        4096
    };
}

/// The longest description the server accepts, in bytes.
pub const MAX_DESCRIPTION_LEN: usize = max_description_len!();

/// What a stream's or a consumer's description over [`MAX_DESCRIPTION_LEN`] is told.
pub(crate) const DESCRIPTION_TOO_LONG: &str = concat!(
    "a description cannot be longer than ",
    max_description_len!(),
    " bytes"
);

/// Whether a description fits the server's limit.
pub const fn description_fits(description: &str) -> bool {
    description.len() <= MAX_DESCRIPTION_LEN
}
