//! Flow control, decided in one place: how many messages a consumer starts at once, holds,
//! and asks the server for.
//!
//! At most `concurrency` handlers run. Beyond them a feed holds messages fetched ahead, so
//! that a handler that finishes finds its next message here rather than a round trip away:
//!
//! - at the defaults (no `pull_batch`), as many as wait no longer than the *horizon*
//!   ([`RuntimeBuilder::pull_ahead`](crate::RuntimeBuilder::pull_ahead), 10 ms by default)
//!   for a free handler, at the handlers' measured pace: `horizon x concurrency / mean
//!   handler time`, at most [`AHEAD_CAP`] (or the concurrency, if larger). Fast handlers keep
//!   a round trip's worth of work in hand; slow ones hold nothing they cannot start at once,
//!   so no message waits on a busy instance while another is idle. Nothing is held ahead
//!   before a handler has finished.
//! - with `pull_batch` set larger than the concurrency, up to one batch, fixed.
//!
//! Requests ask for what the room allows, at most a batch each, and (while one is open) only
//! once half of what may be held can be asked for: not a request per finished handler.
//! Messages waiting to start get progress acks, and a drain returns them (see `pump`).

use std::time::Duration;

/// At the defaults, the most messages held ahead (and asked for in one request) when the
/// concurrency is lower: async-nats' own default batch, so that a consumer whose handlers
/// finish at once asks the server as rarely as a raw `messages()` loop does.
pub(in crate::run) const AHEAD_CAP: usize = 200;

/// One consumer's flow control.
pub(in crate::run) struct Flow {
    concurrency: usize,
    /// The most one request asks for.
    batch: usize,
    ahead: Ahead,
    /// At most this many held and started, whatever the rest says (a consumer backing off:
    /// none, or one probe; see `breaker`).
    limit: Option<usize>,
}

/// How many messages are held beyond the running handlers.
enum Ahead {
    /// Up to this many, whatever the handlers' pace (`pull_batch` set).
    Fixed(usize),
    /// What the handlers' pace starts within the horizon, at most `cap`.
    Paced { cap: usize, pace: Pace },
}

impl Flow {
    /// The flow of a consumer running `concurrency` handlers. `pull_batch`: the batch set on
    /// the runtime, if any; `horizon`: how long a message fetched ahead may wait for a free
    /// handler at the defaults (zero: nothing ahead).
    pub(in crate::run) fn new(
        concurrency: usize,
        pull_batch: Option<usize>,
        horizon: Duration,
    ) -> Self {
        let concurrency = concurrency.max(1);
        match pull_batch {
            Some(batch) => Flow {
                concurrency,
                batch: batch.max(1),
                ahead: Ahead::Fixed(batch.saturating_sub(concurrency)),
                limit: None,
            },
            None if horizon.is_zero() => Flow {
                concurrency,
                batch: concurrency,
                ahead: Ahead::Fixed(0),
                limit: None,
            },
            None => {
                let cap = concurrency.max(AHEAD_CAP);
                Flow {
                    concurrency,
                    batch: cap,
                    ahead: Ahead::Paced {
                        cap,
                        pace: Pace::new(horizon),
                    },
                    limit: None,
                }
            }
        }
    }

    /// Whether another handler may start while `started` run.
    pub(in crate::run) fn may_start(&self, started: usize) -> bool {
        started < self.concurrency.min(self.limit.unwrap_or(usize::MAX))
    }

    /// Holds and starts at most `limit` (`None`: no limit beyond the flow's own).
    pub(in crate::run) fn limit(&mut self, limit: Option<usize>) {
        self.limit = limit;
    }

    /// How many more messages to ask for, while `held` are running or waiting and `asked`
    /// are asked for and not delivered yet: never more than a batch in one request, and while
    /// a request is open, none until half of what may be held (at most a batch) can be asked
    /// for. A session's first request asks for `want(0, 0)`.
    pub(in crate::run) fn want(&self, held: usize, asked: usize) -> usize {
        let capacity = self.capacity();
        let want = capacity.saturating_sub(held + asked).min(self.batch);
        let half = capacity.min(self.batch).div_ceil(2);
        if want == 0 || (asked > 0 && want < half) {
            return 0;
        }
        want
    }

    /// A handler finished (settled or not) after running `took`; `None` when it is not known
    /// (a handler of an earlier session).
    pub(in crate::run) fn finished(&mut self, took: Option<Duration>) {
        if let (Ahead::Paced { pace, .. }, Some(took)) = (&mut self.ahead, took) {
            pace.finished(took);
        }
    }

    /// How many messages may be running or waiting to start.
    fn capacity(&self) -> usize {
        let ahead = match &self.ahead {
            Ahead::Fixed(n) => *n,
            Ahead::Paced { cap, pace } => pace.ahead(self.concurrency).min(*cap),
        };
        (self.concurrency + ahead).min(self.limit.unwrap_or(usize::MAX))
    }
}

/// The handlers' mean running time (a moving average), and from it how many messages start
/// within the horizon.
struct Pace {
    horizon: Duration,
    /// In seconds; `None` until a handler finished.
    mean: Option<f64>,
}

impl Pace {
    /// The weight of the newest handler's time in the mean.
    const WEIGHT: f64 = 1.0 / 8.0;

    fn new(horizon: Duration) -> Self {
        Pace {
            horizon,
            mean: None,
        }
    }

    fn finished(&mut self, took: Duration) {
        // In seconds: a `u128` of nanoseconds to a float is a library call on every message.
        let took = took.as_secs_f64();
        self.mean = Some(match self.mean {
            Some(mean) => mean + (took - mean) * Self::WEIGHT,
            None => took,
        });
    }

    /// How many messages `concurrency` handlers start within the horizon, beyond those
    /// running (a handler frees every `mean / concurrency` on average).
    /// A float-to-integer cast saturates: a mean of zero gives `usize::MAX`.
    fn ahead(&self, concurrency: usize) -> usize {
        self.mean.map_or(0, |mean| {
            (self.horizon.as_secs_f64() * concurrency as f64 / mean) as usize
        })
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
    fn at_the_defaults_nothing_is_held_ahead_before_a_handler_finished() {
        let flow = Flow::new(64, None, 10 * MS);
        assert_eq!(flow.want(0, 0), 64, "a first request: what can start");
        assert_eq!(flow.capacity(), 64);
        let flow = Flow::new(1, None, 10 * MS);
        assert_eq!(flow.want(0, 0), 1);
        let mut flow = Flow::new(64, None, Duration::ZERO);
        flow.finished(Some(Duration::ZERO));
        assert_eq!(flow.capacity(), 64, "a zero horizon never holds ahead");
    }

    #[test]
    fn slow_handlers_hold_nothing_ahead() {
        let mut flow = Flow::new(2, None, 10 * MS);
        for _ in 0..10 {
            flow.finished(Some(Duration::from_secs(3)));
        }
        assert_eq!(
            flow.capacity(),
            2,
            "a free handler every 1.5 s: nothing within 10 ms"
        );
        assert_eq!(flow.want(2, 0), 0);
        assert_eq!(flow.want(1, 0), 1, "one free handler: one message");
    }

    #[test]
    fn fast_handlers_hold_what_starts_within_the_horizon() {
        let mut flow = Flow::new(64, None, 10 * MS);
        flow.finished(Some(10 * MS));
        assert_eq!(flow.capacity(), 64 + 64, "64 start every 10 ms");
        let mut flow = Flow::new(4, None, 10 * MS);
        flow.finished(Some(20 * MS));
        assert_eq!(
            flow.capacity(),
            4 + 2,
            "a free handler every 5 ms: 2 within 10 ms"
        );
        for _ in 0..5 {
            flow.finished(Some(Duration::ZERO));
        }
        flow.finished(None);
        assert_eq!(flow.capacity(), 4 + 3, "faster: more ahead");
        for _ in 0..100 {
            flow.finished(Some(Duration::ZERO));
        }
        assert_eq!(
            flow.capacity(),
            4 + AHEAD_CAP,
            "never more ahead than the cap"
        );
        assert_eq!(flow.want(4, 0), AHEAD_CAP);
        let half = AHEAD_CAP / 2;
        assert_eq!(
            flow.want(4, half + 1),
            0,
            "less than half while one is open"
        );
        assert_eq!(flow.want(4, half), half);
    }

    #[test]
    fn the_pace_follows_the_handlers() {
        let mut pace = Pace::new(10 * MS);
        assert_eq!(pace.ahead(8), 0);
        pace.finished(80 * MS);
        assert_eq!(pace.ahead(8), 1);
        for _ in 0..50 {
            pace.finished(MS);
        }
        let ahead = pace.ahead(8);
        assert!(
            (70..=80).contains(&ahead),
            "about 80 start within 10 ms: {ahead}"
        );
    }
}
