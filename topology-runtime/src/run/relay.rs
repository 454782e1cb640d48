//! Broadcast relays: a [`Relay`] handle per `#[broadcast]` handler, whose `ensure()` a
//! service calls when a local session subscribes, and the relays' per-instance names.

use std::sync::Arc;

use super::Runtime;
use crate::health::{ConsumerState, Slot};
use topology_core::model::ConsumerKind;

impl Runtime {
    /// The broadcast relay handled by `handler` (its function name, or its full path when
    /// several relays share a name), as a cheap handle that stays valid while
    /// [`Runtime::run_until`] runs; `None` when no relay, or more than one, matches.
    ///
    /// For a relay declared with `#[broadcast]`, prefer the typed handle the macro generates
    /// beside the function, `relay_status::relay(&runtime)`: a misspelt name is then a compile
    /// error rather than a `None` at run time. This lookup by name is for dynamic use.
    ///
    /// ```no_run
    /// # async fn f(runtime: nats_topology::Runtime) {
    /// let relay = runtime.relay("relay_status").expect("a #[broadcast] fn relay_status");
    /// tokio::spawn(runtime.run_until(tokio::signal::ctrl_c()));
    /// // When a local session subscribes:
    /// relay.ensure().await.expect("the runtime is running");
    /// # }
    /// ```
    pub fn relay(&self, handler: &str) -> Option<Relay> {
        let suffix = format!("::{handler}");
        let mut found = self
            .topology()
            .consumers()
            .iter()
            .zip(self.inner.health.slots.iter())
            .filter(|(c, _)| matches!(c.decl.kind, ConsumerKind::Broadcast(_)))
            .filter(|(c, _)| c.decl.handler == handler || c.decl.handler.ends_with(&suffix));
        let (_, slot) = found.next()?;
        if found.next().is_some() {
            return None;
        }
        Some(Relay { slot: slot.clone() })
    }

    /// The relay of the `#[broadcast]` handler whose full path is `handler`: what the handle
    /// the macro generates (`relay_status::relay(&runtime)`) calls. Not public API.
    ///
    /// # Panics
    ///
    /// If this runtime's topology does not include that handler: possible only when the
    /// runtime was given a hand-built [`Topology`](crate::Topology) without it.
    #[doc(hidden)]
    #[track_caller]
    pub fn __relay_of(&self, handler: &str) -> Relay {
        let found = self
            .topology()
            .consumers()
            .iter()
            .zip(self.inner.health.slots.iter())
            .find(|(c, _)| {
                matches!(c.decl.kind, ConsumerKind::Broadcast(_)) && c.decl.handler == handler
            });
        match found {
            Some((_, slot)) => Relay { slot: slot.clone() },
            None => panic!(
                "the runtime does not run the `#[broadcast]` or `#[kv_watch]` handler `{handler}`: it was built with \
                 `Runtime::builder(..).topology(..)` from a topology without it; add it to that \
                 topology, or build without `.topology(..)` to run every registered handler"
            ),
        }
    }
}

/// The name of this instance's relay for the consumer at `index`: unique per instance, so
/// that every instance receives every message.
pub(crate) fn relay_name(instance: &str, index: usize) -> String {
    format!("relay_{instance}_{index}")
}

/// A handle on one broadcast relay; see [`Runtime::relay`].
#[derive(Clone)]
pub struct Relay {
    slot: Arc<Slot>,
}

/// Why [`Relay::ensure`] failed.
#[derive(Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the relay `{consumer}` on stream `{stream}` is not supervised: the runtime is not running (start it with `run_until`)"
)]
pub struct RelayError {
    stream: String,
    consumer: String,
}

impl Relay {
    /// Makes sure the relay runs. While it runs this returns at once, with no round trip.
    /// Otherwise its supervisor is woken to re-create it now (skipping any backoff) and this
    /// waits until it runs; concurrent callers share that one re-creation. Fails at once if
    /// the runtime was never started (`run_until` not called), has stopped or is draining.
    ///
    /// An ordered replay (`#[broadcast(ordered)]`) runs once it has caught up: while it is
    /// `replaying`, this waits for the read model it builds to be complete.
    pub async fn ensure(&self) -> Result<(), RelayError> {
        if !self.slot.runtime_started() {
            return Err(self.not_running());
        }
        if self.slot.state().is_up() {
            return Ok(());
        }
        // One wake-up per call: waking on every state change would cut every backoff short
        // and spin against a stream that is not there yet.
        self.slot.wake.notify_one();
        let ended = |state: &ConsumerState| {
            matches!(
                state,
                ConsumerState::Draining | ConsumerState::Stopped { .. }
            )
        };
        if self.slot.until_up(ended).await {
            Ok(())
        } else {
            Err(self.not_running())
        }
    }

    /// Whether the relay is running now.
    pub fn is_running(&self) -> bool {
        self.slot.state().is_up()
    }

    /// The relay's consumer name on the server (unique per instance).
    pub fn consumer(&self) -> String {
        self.slot.consumer.clone()
    }

    fn not_running(&self) -> RelayError {
        RelayError {
            stream: self.slot.stream.clone(),
            consumer: self.consumer(),
        }
    }
}

debug_as_display!(RelayError);
