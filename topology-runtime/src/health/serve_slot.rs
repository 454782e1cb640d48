//! [`ServeSlot`], one endpoint's or core subscription's live state that its supervisor and
//! dispatch change, with its tally of what was served: health, the metrics and `$SRV.STATS`
//! all read that one record.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::service::endpoint;
use async_nats::service::error::Error as ProtocolError;

use super::Shared;
use super::serving::{EndpointStatus, ServingState, SubscriptionStatus};
use crate::telemetry::{EndpointMetrics, SubscriptionMetrics};

/// Who a [`ServeSlot`] is.
pub(crate) enum Served {
    Endpoint {
        service: String,
        endpoint: String,
        queue_group: String,
    },
    Subscription {
        queue_group: Option<String>,
    },
}

/// One endpoint's or subscription's live state, shared by its supervisor, its dispatch and
/// [`Health`](super::Health). Only [`ServeSlot::transition`] changes the state, logging each
/// change once.
pub(crate) struct ServeSlot {
    pub(crate) served: Served,
    pub(crate) subject: String,
    pub(crate) handler: String,
    shared: Arc<Shared>,
    state: Mutex<ServingState>,
    /// The permission entry the server refuses for its subscription, set by the denial watch
    /// ([`ServeSlot::deny`]): while set, it shows `denied` where it would run.
    denied: Mutex<Option<String>>,
    /// Why its handlers' dependency seems down, while the endpoint's breaker is open
    /// ([`ServeSlot::backing_off`]): it shows `backing off` where it would run.
    backing_off: Mutex<Option<String>>,
    tally: Tally,
}

/// What a denied endpoint or subscription does meanwhile.
const DENIED_CAUSE: &str = "the server refuses the subscription: nothing reaches this instance \
                            through it; it subscribes again every heartbeat, and runs once the \
                            server accepts";

/// What an endpoint or subscription served, since the runtime was built: one record per
/// request or message, written by one call ([`ServeSlot::answered`], [`ServeSlot::handled`])
/// that also updates the metrics. Health's counters and `$SRV.STATS` read it, so the three
/// cannot disagree. Atomics, with no lock taken per request (one per error answer, for the
/// last error).
#[derive(Default)]
struct Tally {
    /// Requests answered (endpoints), messages handled (subscriptions). Written last, so that
    /// a reader that sees a request sees its time and its error too.
    done: AtomicU64,
    /// Requests answered with an error, messages whose handler failed. Written after the
    /// last error, so that a reader that sees the error count sees that error.
    failed: AtomicU64,
    /// From receiving each request to its answer, summed (endpoints).
    processing_nanos: AtomicU64,
    /// The last error answered (endpoints).
    last_error: Mutex<Option<ProtocolError>>,
}

impl ServeSlot {
    pub(crate) fn new(served: Served, subject: &str, handler: &str, shared: Arc<Shared>) -> Self {
        ServeSlot {
            served,
            subject: subject.to_owned(),
            handler: handler.to_owned(),
            shared,
            state: Mutex::new(ServingState::Starting),
            denied: Mutex::new(None),
            backing_off: Mutex::new(None),
            tally: Tally::default(),
        }
    }

    /// Its queue group (`None`: a subscription every instance makes).
    pub(crate) fn queue_group(&self) -> Option<&str> {
        match &self.served {
            Served::Endpoint { queue_group, .. } => Some(queue_group),
            Served::Subscription { queue_group } => queue_group.as_deref(),
        }
    }

    /// The server refused its subscription, which `permission` (an entry of the generated
    /// permissions, as [`Permission::describe`](crate::export::Permission::describe) writes
    /// it) grants: it shows `denied` instead of `running` until [`ServeSlot::granted`].
    pub(crate) fn deny(&self, permission: String) {
        let mut denied = self.denied.lock().unwrap_or_else(|e| e.into_inner());
        if denied.as_ref() == Some(&permission) {
            return;
        }
        *denied = Some(permission);
        drop(denied);
        if matches!(self.state(), ServingState::Running) {
            self.transition(ServingState::Running);
        }
    }

    /// The endpoint's breaker opened (`Some(cause)`) or closed (`None`).
    pub(crate) fn backing_off(&self, cause: Option<String>) {
        *self.backing_off.lock().unwrap_or_else(|e| e.into_inner()) = cause;
        if matches!(
            self.state(),
            ServingState::Running | ServingState::BackingOff { .. }
        ) {
            self.transition(ServingState::Running);
        }
    }

    /// The permission its refused subscription needs (see [`ServeSlot::deny`]).
    pub(crate) fn denied(&self) -> Option<String> {
        self.denied
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Its subscription is no longer known to be refused (subscribed again on a new
    /// connection, or accepted since): a `denied` one is `subscribing` until the next round
    /// trip proves it.
    pub(crate) fn granted(&self) {
        let was = self.denied.lock().unwrap_or_else(|e| e.into_inner()).take();
        if was.is_some() && matches!(self.state(), ServingState::Denied { .. }) {
            self.transition(ServingState::Subscribing);
        }
    }

    pub(crate) fn state(&self) -> ServingState {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Sets the state (`denied` instead of `running` while its subscription is refused); logs a
    /// change of kind once (warnings for what makes it not ready).
    pub(crate) fn transition(&self, state: ServingState) {
        let backing_off = || {
            self.backing_off
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone()
        };
        let state = match (state, self.denied()) {
            (ServingState::Running, Some(permission)) => ServingState::Denied {
                permission,
                cause: DENIED_CAUSE.to_owned(),
            },
            (ServingState::Running, None) => match backing_off() {
                Some(cause) => ServingState::BackingOff { cause },
                None => ServingState::Running,
            },
            (state, _) => state,
        };
        let previous = {
            let mut guard = self.state.lock().unwrap_or_else(|e| e.into_inner());
            if *guard == state {
                return;
            }
            std::mem::replace(&mut *guard, state.clone())
        };
        self.shared.changed();
        if std::mem::discriminant(&previous) == std::mem::discriminant(&state) {
            return;
        }
        let (subject, handler) = (self.subject.as_str(), self.handler.as_str());
        match &state {
            // Before the first connection: a start, not a loss (the connection's own problem,
            // if any, is named by the reach watch).
            ServingState::Disconnected if previous == ServingState::Starting => {
                tracing::info!(subject, handler, "waiting for the connection")
            }
            ServingState::Stalled { .. }
            | ServingState::Disconnected
            | ServingState::Denied { .. }
            | ServingState::Retrying { .. } => {
                tracing::warn!(subject, handler, state = %state, "not receiving")
            }
            ServingState::Stopped { error: Some(error) } => {
                tracing::error!(subject, handler, error, "stopped")
            }
            _ => tracing::info!(subject, handler, state = %state, "serving state"),
        }
    }

    /// Sets the state unless it is `Draining` or `Stopped` (what the link probe reports must
    /// not undo a drain).
    pub(crate) fn transition_live(&self, state: ServingState) {
        if !matches!(
            self.state(),
            ServingState::Draining | ServingState::Stopped { .. }
        ) {
            self.transition(state);
        }
    }

    /// Records one answered request of an endpoint, `took` after it was received, with the
    /// error it was answered with, if any: in the tally and in the endpoint's metrics.
    pub(crate) fn answered(
        &self,
        metrics: &mut EndpointMetrics,
        took: Duration,
        error: Option<ProtocolError>,
    ) {
        // The code came from a `u16` (`ServiceError::code`).
        metrics.answered(
            error
                .as_ref()
                .map(|e| u16::try_from(e.code).unwrap_or(u16::MAX)),
            took,
        );
        let tally = &self.tally;
        let nanos = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        tally.processing_nanos.fetch_add(nanos, Ordering::Relaxed);
        if let Some(error) = error {
            *tally.last_error.lock().unwrap_or_else(|e| e.into_inner()) = Some(error);
            tally.failed.fetch_add(1, Ordering::Release);
        }
        tally.done.fetch_add(1, Ordering::Release);
    }

    /// Records one message of a core subscription, whether its handler succeeded: in the
    /// tally and in the subscription's metrics.
    pub(crate) fn handled(&self, metrics: &SubscriptionMetrics, ok: bool) {
        metrics.handled(ok);
        if !ok {
            self.tally.failed.fetch_add(1, Ordering::Release);
        }
        self.tally.done.fetch_add(1, Ordering::Release);
    }

    /// The endpoint's counts as the micro protocol reports them (`$SRV.STATS`), since
    /// `earlier`, an earlier reading of this slot (`Default::default()`: since the runtime was
    /// built). The name, subject and queue group are left for the reader to fill in.
    pub(crate) fn stats_since(&self, earlier: &endpoint::Stats) -> endpoint::Stats {
        let tally = &self.tally;
        let since = |now: u64, then: usize| now.saturating_sub(then.try_into().unwrap_or(u64::MAX));
        let requests = since(tally.done.load(Ordering::Acquire), earlier.requests);
        let processing_time = Duration::from_nanos(tally.processing_nanos.load(Ordering::Relaxed))
            .saturating_sub(earlier.processing_time);
        let errors = since(tally.failed.load(Ordering::Acquire), earlier.errors);
        let average_processing_time = match requests {
            0 => Duration::ZERO,
            n => Duration::from_nanos(
                u64::try_from(processing_time.as_nanos() / u128::from(n)).unwrap_or(u64::MAX),
            ),
        };
        // An error since `earlier` is the last one; none since, none to report.
        let last_error = match errors {
            0 => None,
            _ => tally
                .last_error
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        };
        endpoint::Stats {
            requests: usize::try_from(requests).unwrap_or(usize::MAX),
            errors: usize::try_from(errors).unwrap_or(usize::MAX),
            processing_time,
            average_processing_time,
            last_error,
            ..Default::default()
        }
    }

    /// The endpoint's snapshot (`None` for a subscription's slot).
    pub(crate) fn endpoint_status(&self) -> Option<EndpointStatus> {
        let Served::Endpoint {
            service,
            endpoint,
            queue_group,
        } = &self.served
        else {
            return None;
        };
        Some(EndpointStatus {
            service: service.clone(),
            endpoint: endpoint.clone(),
            subject: self.subject.clone(),
            queue_group: queue_group.clone(),
            handler: self.handler.clone(),
            state: self.state(),
            requests: self.tally.done.load(Ordering::Acquire),
            errors: self.tally.failed.load(Ordering::Acquire),
        })
    }

    /// The subscription's snapshot (`None` for an endpoint's slot).
    pub(crate) fn subscription_status(&self) -> Option<SubscriptionStatus> {
        let Served::Subscription { queue_group } = &self.served else {
            return None;
        };
        let done = self.tally.done.load(Ordering::Acquire);
        let failed = self.tally.failed.load(Ordering::Acquire);
        Some(SubscriptionStatus {
            subject: self.subject.clone(),
            queue_group: queue_group.clone(),
            handler: self.handler.clone(),
            state: self.state(),
            handled: done.saturating_sub(failed),
            failed,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot() -> ServeSlot {
        let shared = Arc::new(Shared::new(Vec::<String>::new()));
        let served = Served::Subscription { queue_group: None };
        ServeSlot::new(served, "cache.invalidate", "app::invalidate", shared)
    }

    #[test]
    fn the_probe_does_not_undo_a_drain() {
        let slot = slot();
        slot.transition_live(ServingState::Running);
        assert_eq!(slot.state(), ServingState::Running);
        slot.transition(ServingState::Draining);
        slot.transition_live(ServingState::Running);
        assert_eq!(slot.state(), ServingState::Draining);
        slot.transition(ServingState::Stopped { error: None });
        slot.transition_live(ServingState::Disconnected);
        assert_eq!(slot.state(), ServingState::Stopped { error: None });
    }

    #[test]
    fn a_refused_subscription_shows_denied_until_granted() {
        let slot = slot();
        slot.transition_live(ServingState::Running);
        slot.deny("subscribe `cache.invalidate`".to_owned());
        assert!(
            matches!(&slot.state(), ServingState::Denied { permission, .. } if permission == "subscribe `cache.invalidate`"),
            "{}",
            slot.state()
        );
        // The probe proves the connection, not the refused subscription.
        slot.transition_live(ServingState::Running);
        assert!(matches!(slot.state(), ServingState::Denied { .. }));
        // A stalled link or a lost connection says more than the denial.
        slot.transition_live(ServingState::Disconnected);
        assert_eq!(slot.state(), ServingState::Disconnected);
        slot.transition_live(ServingState::Running);
        assert!(matches!(slot.state(), ServingState::Denied { .. }));
        slot.granted();
        assert_eq!(slot.state(), ServingState::Subscribing, "until proven");
        slot.transition_live(ServingState::Running);
        assert_eq!(slot.state(), ServingState::Running);
        // Denied while draining: the drain goes on.
        slot.transition(ServingState::Draining);
        slot.deny("subscribe `cache.invalidate`".to_owned());
        assert_eq!(slot.state(), ServingState::Draining);
    }

    #[test]
    fn a_subscription_counts_handled_and_failed_apart() {
        let slot = slot();
        let metrics = SubscriptionMetrics::new("cache.invalidate");
        slot.handled(&metrics, true);
        slot.handled(&metrics, false);
        slot.handled(&metrics, true);
        let status = slot.subscription_status().expect("a subscription");
        assert_eq!((status.handled, status.failed), (2, 1));
        assert!(slot.endpoint_status().is_none());
        assert_eq!(
            status.to_string(),
            "subscription cache.invalidate (each instance, app::invalidate): starting; handled 2, failed 1"
        );
    }
}
