//! [`Slot`]: one consumer's live state, changed only through its methods (each change logged
//! once, at a fitting level).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::{ConsumerState, ConsumerStatus, Shared};

/// One consumer's live state, shared by its supervisor, its handlers and [`Health`](super::Health). Only the
/// methods here change its state, so that every change is logged once, at a fitting level.
pub(crate) struct Slot {
    /// Wakes the supervisor out of its backoff (a relay's `ensure()`).
    pub(crate) wake: tokio::sync::Notify,
    pub(crate) stream: String,
    /// The consumer's name on the server (the group, or the relay's per-instance name).
    pub(crate) consumer: String,
    handler: String,
    queue: bool,
    /// How long the consumer may be down before that is logged as an error, and how often.
    down_alarm: Duration,
    /// Wakes [`Health`](super::Health) waiters on every change.
    shared: Arc<Shared>,
    state: Mutex<(ConsumerState, Instant)>,
    /// Since when it has not been running, and when that was last reported as an error.
    down: Mutex<(Option<Instant>, Option<Instant>)>,
    pub(crate) handled: AtomicU64,
    pub(crate) failed: AtomicU64,
    pub(crate) retried: AtomicU64,
    pub(crate) dead_lettered: AtomicU64,
    pub(crate) early: AtomicU64,
    pub(crate) ack_floor: AtomicU64,
    pub(crate) restarts: AtomicU64,
    /// Whether the consumer's leader is this connection's server, cut off from its peers
    /// ([`Slot::cut_off`]): it is not running, whatever its session hears.
    cut_off: AtomicBool,
    /// Whether the session stands by (a pinned-client consumer not pinned here): while up,
    /// its state is `standby` rather than `running` ([`Slot::up`]).
    standby: AtomicBool,
    /// Whether an ordered replay is catching up, and how many messages it has left: while
    /// up, its state is `replaying` ([`Slot::replayed`]).
    replaying: AtomicBool,
    behind: AtomicU64,
    /// The permission entry the server refuses that the consumer needs to take messages (its
    /// acks, its pull requests), set by the denial watch ([`Slot::deny`]): while set, its
    /// session asks for nothing, and its state is `denied` rather than up.
    denied: Mutex<Option<String>>,
    /// Why its handlers' dependency seems down, while its breaker is open
    /// ([`Slot::backing_off`]): while set, its state is `backing off` rather than `running`.
    backing_off: Mutex<Option<String>>,
    /// Why the server refuses its pull requests (the consumer's wait list is full), while it
    /// does ([`Slot::crowded`]): while set, its state is `crowded out` rather than up.
    crowded: Mutex<Option<String>>,
}

impl Slot {
    pub(crate) fn new(
        stream: &str,
        consumer: &str,
        handler: &str,
        queue: bool,
        down_alarm: Duration,
        shared: Arc<Shared>,
    ) -> Self {
        Slot {
            wake: tokio::sync::Notify::new(),
            stream: stream.to_owned(),
            consumer: consumer.to_owned(),
            handler: handler.to_owned(),
            queue,
            down_alarm,
            shared,
            state: Mutex::new((ConsumerState::Starting, Instant::now())),
            down: Mutex::new((Some(Instant::now()), None)),
            handled: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            retried: AtomicU64::new(0),
            dead_lettered: AtomicU64::new(0),
            early: AtomicU64::new(0),
            ack_floor: AtomicU64::new(0),
            restarts: AtomicU64::new(0),
            cut_off: AtomicBool::new(false),
            standby: AtomicBool::new(false),
            replaying: AtomicBool::new(false),
            behind: AtomicU64::new(0),
            denied: Mutex::new(None),
            backing_off: Mutex::new(None),
            crowded: Mutex::new(None),
        }
    }

    /// The consumer's breaker opened (`Some(cause)`) or closed (`None`): a running consumer
    /// shows `backing off` while it is open.
    pub(crate) fn backing_off(&self, cause: Option<String>) {
        *self.backing_off.lock().unwrap_or_else(|e| e.into_inner()) = cause;
        if matches!(
            self.state(),
            ConsumerState::Running | ConsumerState::Standby | ConsumerState::BackingOff { .. }
        ) {
            self.up();
        }
    }

    /// The server refuses the session's pull requests because the consumer's wait list is
    /// full (`Some(cause)`), or admitted one again (`None`): a live consumer shows `crowded
    /// out` meanwhile.
    pub(crate) fn crowded(&self, cause: Option<String>) {
        let mut crowded = self.crowded.lock().unwrap_or_else(|e| e.into_inner());
        if crowded.is_none() && cause.is_none() {
            return;
        }
        *crowded = cause;
        drop(crowded);
        if matches!(
            self.state(),
            ConsumerState::Running
                | ConsumerState::Standby
                | ConsumerState::Replaying { .. }
                | ConsumerState::BackingOff { .. }
                | ConsumerState::Crowded { .. }
                | ConsumerState::Provisioning
                | ConsumerState::Stalled { .. }
        ) {
            self.up();
        }
    }

    /// Whether the server refuses the session's pull requests for a full wait list.
    pub(crate) fn is_crowded(&self) -> bool {
        self.crowded
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }

    /// A new session starts: what the last one was refused says nothing of it yet.
    pub(crate) fn forget_crowded(&self) {
        *self.crowded.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// The server refused `permission` (an entry of the generated permissions: `publish
    /// $JS.ACK.ORDERS.billing.>`), which the consumer needs to take messages: it stops asking
    /// for more (see the pull session), and shows `denied` until [`Slot::granted`].
    pub(crate) fn deny(&self, permission: String) {
        let mut denied = self.denied.lock().unwrap_or_else(|e| e.into_inner());
        if denied.as_ref() == Some(&permission) {
            return;
        }
        *denied = Some(permission);
        drop(denied);
        if !matches!(
            self.state(),
            ConsumerState::Draining | ConsumerState::Stopped { .. }
        ) {
            self.up();
        }
    }

    /// Whether the server refused `subject` to the runtime's connection (a request the
    /// consumer makes besides taking its messages: it stops making it).
    pub(crate) fn refuses(&self, subject: &str) -> bool {
        self.shared.denials.refuses(subject)
    }

    /// What the consumer needs and the server refuses (see [`Slot::deny`]).
    pub(crate) fn denied(&self) -> Option<String> {
        self.denied
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Whether the server refuses something the consumer needs: [`Slot::denied`] without a
    /// copy of it (asked before every pull request).
    pub(crate) fn is_denied(&self) -> bool {
        self.denied
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }

    /// The refused permission works again: a denied consumer runs.
    pub(crate) fn granted(&self) {
        let was = self.denied.lock().unwrap_or_else(|e| e.into_inner()).take();
        if was.is_some() && matches!(self.state(), ConsumerState::Denied { .. }) {
            self.up();
        }
    }

    /// Records what the consumer's info said of its leader: `Some((silent, why))` when it is
    /// this connection's server and has heard from no majority of its peers for `silent`. A
    /// running (or stalled) consumer is then `stalled` with that cause, even while its idle
    /// heartbeats come (the cut-off leader still sends them; nothing new reaches it), and runs
    /// again once the info no longer says so (led elsewhere, or through another server).
    pub(crate) fn cut_off(&self, cut_off: Option<&(Duration, String)>) {
        let live = matches!(
            self.state(),
            ConsumerState::Running
                | ConsumerState::Standby
                | ConsumerState::Replaying { .. }
                | ConsumerState::Stalled { .. }
        );
        match cut_off {
            Some((silent, why)) => {
                self.cut_off.store(true, Ordering::Relaxed);
                if live {
                    self.transition(ConsumerState::Stalled {
                        silent_for: *silent,
                        cause: format!(
                            "{why}; nothing new reaches this replica through it (the runtime \
                             moves to another listed server: see `jetstream`)"
                        ),
                    });
                }
            }
            None => {
                if self.cut_off.swap(false, Ordering::Relaxed) && live {
                    self.up();
                }
            }
        }
    }

    /// The server delivers to this instance, or holds its requests while it stands by:
    /// `running`, `standby` (see [`Slot::standby`]) or `replaying` (see [`Slot::replayed`]).
    pub(crate) fn up(&self) {
        if let Some(permission) = self.denied() {
            return self.transition(ConsumerState::Denied {
                permission,
                cause: "the server refuses it: this replica takes no message it could not \
                        settle, and asks every heartbeat whether the grant works"
                    .to_owned(),
            });
        }
        let crowded = self
            .crowded
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if let Some(cause) = crowded {
            return self.transition(ConsumerState::Crowded { cause });
        }
        let backing_off = self
            .backing_off
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if let Some(cause) = backing_off {
            return self.transition(ConsumerState::BackingOff { cause });
        }
        self.transition(if self.standby.load(Ordering::Relaxed) {
            ConsumerState::Standby
        } else if self.replaying.load(Ordering::Relaxed) {
            ConsumerState::Replaying {
                behind: self.behind.load(Ordering::Relaxed),
            }
        } else {
            ConsumerState::Running
        });
    }

    /// An ordered replay's session begins with `pending` messages to handle: it is
    /// `replaying` while up, until [`Slot::replayed`] hears that none is left.
    pub(crate) fn replay_from(&self, pending: u64) {
        self.behind.store(pending, Ordering::Relaxed);
        self.replaying.store(pending > 0, Ordering::Relaxed);
    }

    /// An ordered replay handled a message with `pending` left after it: still `replaying`
    /// (with that many behind, read by [`Slot::state`]), or `running` once none is left. A
    /// store per message; the state changes once.
    pub(crate) fn replayed(&self, pending: u64) {
        if !self.replaying.load(Ordering::Relaxed) {
            return;
        }
        self.behind.store(pending, Ordering::Relaxed);
        if pending == 0 {
            self.replaying.store(false, Ordering::Relaxed);
            if matches!(self.state(), ConsumerState::Replaying { .. }) {
                self.up();
            }
        }
    }

    /// Records whether the session stands by (not pinned) or is pinned; a consumer that is
    /// up changes state at once.
    pub(crate) fn standby(&self, standby: bool) {
        let was = self.standby.swap(standby, Ordering::Relaxed);
        if was != standby && self.state().is_up() {
            self.up();
        }
    }

    /// Whether the consumer's leader was last seen here, cut off ([`Slot::cut_off`]).
    pub(crate) fn is_cut_off(&self) -> bool {
        self.cut_off.load(Ordering::Relaxed)
    }

    /// Sets the consumer's state and logs the change once, at a level that fits it: a
    /// consumer that has not been running for the down-alarm delay (a minute by default) is
    /// an error, repeated at most once per that delay.
    pub(crate) fn transition(&self, state: ConsumerState) {
        let previous = self.set(state.clone());
        let consumer = self.consumer.as_str();
        let mut down = self.down.lock().unwrap_or_else(|e| e.into_inner());
        match &state {
            ConsumerState::Running
            | ConsumerState::Standby
            | ConsumerState::Replaying { .. }
            | ConsumerState::BackingOff { .. }
            | ConsumerState::Retired => *down = (None, None),
            ConsumerState::Draining | ConsumerState::Stopped { error: None } => {}
            _ => {
                let since = *down.0.get_or_insert_with(Instant::now);
                let alarm_due = since.elapsed() >= self.down_alarm
                    && down.1.is_none_or(|last| last.elapsed() >= self.down_alarm);
                if alarm_due {
                    down.1 = Some(Instant::now());
                    tracing::error!(
                        stream = %self.stream,
                        consumer,
                        down_for = ?since.elapsed(),
                        state = %state,
                        "consumer has not been running for over {:?}: nothing consumes its messages",
                        self.down_alarm
                    );
                    return;
                }
            }
        }
        drop(down);
        state.log_change(&previous, &self.stream, consumer);
    }

    /// Sets the state; returns the previous one.
    fn set(&self, state: ConsumerState) -> ConsumerState {
        let mut guard = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let previous = std::mem::replace(&mut *guard, (state, Instant::now())).0;
        drop(guard);
        self.shared.changed();
        previous
    }

    /// Waits until the consumer is up (true), or `stop` says its state will not come up, on
    /// the health's change count: no channel of each slot's own, which every consumer pays.
    pub(crate) async fn until_up(&self, stop: impl Fn(&ConsumerState) -> bool) -> bool {
        let mut changes = self.shared.changes.subscribe();
        loop {
            changes.borrow_and_update();
            match self.state() {
                state if state.is_up() => return true,
                state if stop(&state) => return false,
                _ if changes.changed().await.is_err() => return false,
                _ => {}
            }
        }
    }

    /// The state now; a replay's `behind` as of its last message handled.
    pub(crate) fn state(&self) -> ConsumerState {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .0
            .clone();
        if let ConsumerState::Replaying { behind } = &mut state {
            *behind = self.behind.load(Ordering::Relaxed);
        }
        state
    }

    /// Whether the runtime this consumer belongs to was started (`run_until` called).
    pub(crate) fn runtime_started(&self) -> bool {
        self.shared.started()
    }

    pub(crate) fn count(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn status(&self) -> ConsumerStatus {
        ConsumerStatus {
            stream: self.stream.clone(),
            consumer: self.consumer.clone(),
            handler: self.handler.clone(),
            queue: self.queue,
            state: self.state(),
            handled: self.handled.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            retried: self.retried.load(Ordering::Relaxed),
            dead_lettered: self.dead_lettered.load(Ordering::Relaxed),
            early: self.early.load(Ordering::Relaxed),
            ack_floor: self.ack_floor.load(Ordering::Relaxed),
            restarts: self.restarts.load(Ordering::Relaxed),
            denied: self
                .shared
                .denials
                .all()
                .into_iter()
                .find(|d| d.concerns(&self.stream, &self.handler))
                .map(|d| d.to_string()),
        }
    }
}

#[cfg(test)]
mod tests;
