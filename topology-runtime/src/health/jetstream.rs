//! Whether JetStream answers through the server the runtime's connection is on
//! ([`JetStreamStatus`]), as the runtime's reach watch records it.

use std::fmt;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// Whether JetStream answers through the server the runtime's connection is on, as last
/// asked (a `$JS.API.INFO` request every heartbeat), and what the runtime did about it.
///
/// A server cut off from the rest of its cluster by a partition keeps its clients, and
/// cannot reach the JetStream leaders on the other side; the runtime then moves its
/// connection to another listed server (see
/// [`RuntimeBuilder::move_server_after`](crate::RuntimeBuilder::move_server_after)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JetStreamStatus {
    /// The server the connection is on (its name, and the address it reports).
    pub server: String,
    /// Whether the last request was answered (true before the first one).
    pub reachable: bool,
    /// How long it has gone unanswered (zero while it answers).
    pub unreachable_for: Duration,
    /// Why the last request failed, while it does.
    pub error: Option<String>,
    /// What the runtime does about it, while it is unreachable.
    pub action: Option<String>,
    /// How many times the runtime moved its connection to another server for want of
    /// JetStream.
    pub moves: u64,
}

impl JetStreamStatus {
    /// Whether it says something else than `before` (not only a longer silence).
    pub(crate) fn changed_from(&self, before: &JetStreamStatus) -> bool {
        (
            &self.server,
            self.reachable,
            &self.error,
            &self.action,
            self.moves,
        ) != (
            &before.server,
            before.reachable,
            &before.error,
            &before.action,
            before.moves,
        )
    }
}

impl fmt::Display for JetStreamStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.reachable {
            write!(f, "jetstream answers through {}", self.server)?;
        } else {
            write!(
                f,
                "jetstream unreachable through {} for {:.1?}",
                self.server, self.unreachable_for
            )?;
            if let Some(error) = &self.error {
                write!(f, " ({error})")?;
            }
            if let Some(action) = &self.action {
                write!(f, ": {action}")?;
            }
        }
        if self.moves > 0 {
            write!(f, "; moved to another server {} times", self.moves)?;
        }
        Ok(())
    }
}

/// The reach watch's record (in [`Shared`](super::Shared)).
#[derive(Default)]
pub(crate) struct Reach {
    state: Mutex<ReachState>,
    /// Wakes the reach watch when a cut-off server is reported.
    pub(crate) wake: tokio::sync::Notify,
}

#[derive(Default)]
struct ReachState {
    server: String,
    unreachable_since: Option<Instant>,
    error: Option<String>,
    action: Option<String>,
    moves: u64,
    /// A JetStream group this server leads and that hears nothing from its peers: the
    /// server, and what says so.
    cut_off: Option<(String, String)>,
}

impl Reach {
    /// JetStream answered through `server`.
    pub(crate) fn answered(&self, server: String) {
        let mut state = self.lock();
        state.server = server;
        state.unreachable_since = None;
        state.error = None;
        state.action = None;
    }

    /// It did not answer through `server`; returns for how long it has not.
    pub(crate) fn unanswered(&self, server: String, error: String) -> Duration {
        let mut state = self.lock();
        if state.server != server {
            // Another server: its silence starts now.
            state.unreachable_since = None;
        }
        state.server = server;
        state.error = Some(error);
        state
            .unreachable_since
            .get_or_insert_with(Instant::now)
            .elapsed()
    }

    /// What the runtime does about it.
    pub(crate) fn act(&self, action: impl Into<String>) {
        self.lock().action = Some(action.into());
    }

    /// The connection moved to another server.
    pub(crate) fn moved(&self) {
        let mut state = self.lock();
        state.moves += 1;
        state.unreachable_since = None;
        state.cut_off = None;
    }

    /// Records whether `server` leads a JetStream group that hears nothing from its peers
    /// (`Some`, with what says so), as a consumer's info read through it said.
    pub(crate) fn leads_cut_off(&self, server: &str, cut_off: Option<String>) {
        let mut state = self.lock();
        match cut_off {
            Some(why) => {
                state.cut_off = Some((server.to_owned(), why));
                self.wake.notify_one();
            }
            None if state.cut_off.as_ref().is_some_and(|(s, _)| s == server) => {
                state.cut_off = None
            }
            None => {}
        }
    }

    /// Why `server` is cut off from its cluster, if a consumer's info said so.
    pub(crate) fn cut_off(&self, server: &str) -> Option<String> {
        let state = self.lock();
        state
            .cut_off
            .as_ref()
            .filter(|(s, _)| s == server)
            .map(|(_, why)| why.clone())
    }

    /// Whether JetStream answered the last time it was asked (see [`Reach::status`]).
    pub(crate) fn is_reachable(&self) -> bool {
        self.lock().unreachable_since.is_none()
    }

    pub(crate) fn status(&self) -> JetStreamStatus {
        let state = self.lock();
        JetStreamStatus {
            server: state.server.clone(),
            reachable: state.unreachable_since.is_none(),
            unreachable_for: state
                .unreachable_since
                .map_or(Duration::ZERO, |since| since.elapsed()),
            error: state.error.clone(),
            action: state.unreachable_since.and(state.action.clone()),
            moves: state.moves,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ReachState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}
