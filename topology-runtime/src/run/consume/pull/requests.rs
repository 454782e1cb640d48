//! A pull session's requests: the ones open (what each may still deliver, when it expires,
//! when it was sent), and the ones it stopped counting while the server may still serve them.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

/// One pull request, as sent.
pub(super) struct PullRequest {
    /// Messages it may still deliver.
    remaining: usize,
    /// When the server ends it.
    pub(super) expires_at: Instant,
    /// When it was sent: what it delivers was delivered after this.
    sent_at: Instant,
}

/// The requests of one session, oldest first (the server serves and expires them in that
/// order).
pub(super) struct Requests {
    open: VecDeque<PullRequest>,
    /// Requests forgotten while the server may still serve one (see [`Requests::forget`]):
    /// the oldest one's send time, and until when one of them may still deliver.
    stray: Option<(Instant, Instant)>,
    /// How long a forgotten request may still deliver.
    stray_for: Duration,
    /// When the session started (its first request was sent no earlier).
    started: Instant,
}

impl Requests {
    /// The requests of a session whose requests expire after `expires` (a forgotten one may
    /// deliver for that long, and `slack` more).
    pub(super) fn new(expires: Duration, slack: Duration) -> Self {
        Requests {
            open: VecDeque::new(),
            stray: None,
            stray_for: expires + slack,
            started: Instant::now(),
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.open.is_empty()
    }

    /// How many messages the open requests may still deliver.
    pub(super) fn asked(&self) -> usize {
        self.open.iter().map(|r| r.remaining).sum()
    }

    /// When the oldest open request expires.
    pub(super) fn oldest_expiry(&self) -> Option<Instant> {
        self.open.front().map(|r| r.expires_at)
    }

    /// Records a request for `want` messages, sent now, expiring after `expires`.
    pub(super) fn sent(&mut self, want: usize, expires: Duration) {
        let now = Instant::now();
        self.open.push_back(PullRequest {
            remaining: want,
            expires_at: now + expires,
            sent_at: now,
        });
    }

    /// A message arrived (`now`): the oldest open request delivered it. Returns no later
    /// than when the server delivered it: when that request was sent, or a stray one.
    pub(super) fn delivered(&mut self, now: Instant) -> Instant {
        let stray = self
            .stray
            .filter(|(_, until)| *until > now)
            .map(|(oldest, _)| oldest);
        let open = self.open.front().map(|r| r.sent_at);
        let after = match (open, stray) {
            (Some(open), Some(stray)) => open.min(stray),
            (Some(sent), None) | (None, Some(sent)) => sent,
            // Nothing open nor stray: only a request of this session can have delivered it.
            (None, None) => self.started,
        };
        if let Some(front) = self.open.front_mut() {
            front.remaining -= 1;
            if front.remaining == 0 {
                self.open.pop_front();
            }
        }
        after
    }

    /// The oldest open request ended without delivering the rest of its batch.
    pub(super) fn oldest_ended(&mut self) {
        self.open.pop_front();
    }

    /// The newest request was refused.
    pub(super) fn newest_refused(&mut self) {
        self.open.pop_back();
    }

    /// Stops counting the open requests that `lost` picks (taken with an old leader, lost
    /// with a connection, overdue), so that new ones are sent. The server may still serve one
    /// (a request on its way to a new leader, or held in a stalled link): until its expiry
    /// could have passed, what arrives is taken as delivered no earlier than the oldest of
    /// them was sent.
    pub(super) fn forget(&mut self, lost: impl Fn(&PullRequest) -> bool) {
        let now = Instant::now();
        let until = now + self.stray_for;
        let mut kept = VecDeque::with_capacity(self.open.len());
        for request in self.open.drain(..) {
            if !lost(&request) {
                kept.push_back(request);
                continue;
            }
            self.stray = Some(match self.stray {
                Some((oldest, was)) if was > now => (oldest.min(request.sent_at), was.max(until)),
                _ => (request.sent_at, until),
            });
        }
        self.open = kept;
    }
}
