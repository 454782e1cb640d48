//! Flow control, decided in one place: how many messages a consumer starts at once, holds,
//! and asks the server for.
//!
//! At most `concurrency` handlers run. Beyond them a feed holds messages fetched ahead, so
//! that a handler that finishes finds its next message here rather than a round trip away:
//!
//! - at the defaults (no `pull_batch`), what the handlers finish within the *horizon*
//!   ([`RuntimeBuilder::pull_ahead`](crate::RuntimeBuilder::pull_ahead), 10 ms by default),
//!   at most the concurrency. Fast handlers keep a round trip's worth of work in hand; slow
//!   ones hold nothing they cannot start at once, so no message waits on a busy instance while
//!   another is idle. A message fetched ahead waits about the horizon before it starts.
//! - with `pull_batch` set larger than the concurrency, up to one batch, fixed.
//!
//! Requests ask for what the room allows, at most a batch each, and (while one is open) only
//! once half a batch can be asked for: not a request per finished handler. Messages waiting
//! to start get progress acks, and a drain returns them (see `pump`).

use std::time::Duration;

use tokio::time::Instant;

/// One consumer's flow control.
pub(super) struct Flow {
    concurrency: usize,
    /// The most one request asks for.
    batch: usize,
    ahead: Ahead,
}

/// How many messages are held beyond the running handlers.
enum Ahead {
    /// Up to this many, whatever the handlers' pace (`pull_batch` set).
    Fixed(usize),
    /// What the handlers finished in the last horizon, at most `cap`.
    Paced { cap: usize, pace: Pace },
}

impl Flow {
    /// The flow of a consumer running `concurrency` handlers. `pull_batch`: the batch set on
    /// the runtime, if any; `horizon`: how far ahead the defaults fetch (zero: nothing ahead).
    pub(super) fn new(concurrency: usize, pull_batch: Option<usize>, horizon: Duration) -> Self {
        let concurrency = concurrency.max(1);
        match pull_batch {
            Some(batch) => Flow {
                concurrency,
                batch: batch.max(1),
                ahead: Ahead::Fixed(batch.saturating_sub(concurrency)),
            },
            None => Flow {
                concurrency,
                batch: concurrency,
                ahead: if horizon.is_zero() {
                    Ahead::Fixed(0)
                } else {
                    Ahead::Paced {
                        cap: concurrency,
                        pace: Pace::new(horizon),
                    }
                },
            },
        }
    }

    /// Whether another handler may start while `started` run.
    pub(super) fn may_start(&self, started: usize) -> bool {
        started < self.concurrency
    }

    /// The most one request asks for (a session's first request asks for this).
    pub(super) fn batch(&self) -> usize {
        self.batch
    }

    /// How many more messages to ask for, while `held` are running or waiting and `asked`
    /// are asked for and not delivered yet: none until half a batch can be asked for (unless
    /// nothing is asked for), never more than a batch in one request.
    pub(super) fn want(&self, held: usize, asked: usize) -> usize {
        let room = self.capacity().saturating_sub(held + asked);
        let want = room.min(self.batch);
        if want == 0 || (asked > 0 && want < self.batch.div_ceil(2)) {
            return 0;
        }
        want
    }

    /// A handler finished (settled or not): the pace the defaults fetch ahead by.
    pub(super) fn finished(&mut self) {
        if let Ahead::Paced { pace, .. } = &mut self.ahead {
            pace.finished(Instant::now());
        }
    }

    /// How many messages may be running or waiting to start.
    fn capacity(&self) -> usize {
        let ahead = match &self.ahead {
            Ahead::Fixed(n) => *n,
            Ahead::Paced { cap, pace } => pace.per_horizon(Instant::now()).min(*cap),
        };
        self.concurrency + ahead
    }
}

/// How many handlers finish per horizon: counted over the current window of one horizon and
/// the one before it (the larger of the two, so that a pause of a moment does not empty
/// what is held).
struct Pace {
    horizon: Duration,
    since: Instant,
    now: usize,
    before: usize,
}

impl Pace {
    fn new(horizon: Duration) -> Self {
        Pace {
            horizon,
            since: Instant::now(),
            now: 0,
            before: 0,
        }
    }

    fn roll(&mut self, at: Instant) {
        let elapsed = at.saturating_duration_since(self.since);
        if elapsed < self.horizon {
            return;
        }
        // A window with nothing finished in between says the pace is what the last one saw.
        self.before = if elapsed < self.horizon * 2 {
            self.now
        } else {
            0
        };
        self.now = 0;
        self.since = at;
    }

    fn finished(&mut self, at: Instant) {
        self.roll(at);
        self.now += 1;
    }

    fn per_horizon(&self, at: Instant) -> usize {
        let elapsed = at.saturating_duration_since(self.since);
        if elapsed >= self.horizon * 2 {
            0
        } else if elapsed >= self.horizon {
            self.now
        } else {
            self.now.max(self.before)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_set_batch_holds_one_batch_and_asks_in_halves() {
        let flow = Flow::new(4, Some(7), 10 * MS);
        assert_eq!(flow.want(0, 0), 7, "nothing held: one batch");
        assert_eq!(flow.want(4, 3), 0, "one batch held and asked for");
        assert_eq!(
            flow.want(2, 2),
            0,
            "room for 3 while one is open: less than half"
        );
        assert_eq!(flow.want(1, 2), 4, "room for 4: half a batch");
        assert_eq!(flow.want(3, 0), 4, "nothing asked for: ask at once");
        assert!(flow.may_start(3) && !flow.may_start(4));
    }

    #[test]
    fn a_batch_below_the_concurrency_holds_the_concurrency_in_batches() {
        let flow = Flow::new(8, Some(2), 10 * MS);
        assert_eq!(flow.capacity(), 8);
        assert_eq!(flow.want(0, 0), 2);
        assert_eq!(flow.want(0, 6), 2);
        assert_eq!(flow.want(0, 8), 0);
    }

    #[test]
    fn at_the_defaults_nothing_is_held_ahead_before_handlers_finish() {
        let flow = Flow::new(64, None, 10 * MS);
        assert_eq!(flow.want(0, 0), 64);
        assert_eq!(flow.capacity(), 64, "no pace measured: only what can start");
        let flow = Flow::new(64, None, Duration::ZERO);
        assert_eq!(flow.capacity(), 64, "a zero horizon never holds ahead");
    }

    #[test]
    fn the_pace_is_what_finished_within_the_horizon() {
        let start = Instant::now();
        let mut pace = Pace::new(10 * MS);
        pace.since = start;
        for i in 0..30 {
            pace.finished(start + MS * i / 10);
        }
        assert_eq!(pace.per_horizon(start + 5 * MS), 30);
        // The next window: the last one's count holds until this one has seen more.
        pace.finished(start + 11 * MS);
        assert_eq!(pace.per_horizon(start + 12 * MS), 30);
        // A whole window with nothing finished: the pace fell.
        assert_eq!(pace.per_horizon(start + 25 * MS), 1);
        assert_eq!(pace.per_horizon(start + 40 * MS), 0);
        pace.finished(start + 40 * MS);
        assert_eq!(
            pace.per_horizon(start + 41 * MS),
            1,
            "an idle gap forgets the old pace"
        );
    }

    #[test]
    fn fast_handlers_are_held_ahead_up_to_the_concurrency() {
        let mut flow = Flow::new(4, None, Duration::from_secs(3600));
        for _ in 0..3 {
            flow.finished();
        }
        assert_eq!(flow.capacity(), 4 + 3, "three finished within the horizon");
        for _ in 0..10 {
            flow.finished();
        }
        assert_eq!(
            flow.capacity(),
            4 + 4,
            "never more ahead than the concurrency"
        );
        assert_eq!(flow.want(4, 0), 4);
    }
}
