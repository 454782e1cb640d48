//! The metrics of served endpoints and core subscriptions, registered once per endpoint or
//! subscription session and updated by its dispatch loop alone (so the per-code error counters
//! need no lock).

use std::time::Duration;

use metrics::{Counter, Histogram};

use super::metrics::{describe, names};

/// One endpoint's metrics.
pub(crate) struct EndpointMetrics {
    service: String,
    endpoint: String,
    requests: Counter,
    duration: Histogram,
    /// The error counters registered so far, by code (a handful at most).
    errors: Vec<(u16, Counter)>,
}

impl EndpointMetrics {
    pub(crate) fn new(service: &str, endpoint: &str) -> Self {
        describe();
        let labels = [
            ("service", service.to_owned()),
            ("endpoint", endpoint.to_owned()),
        ];
        EndpointMetrics {
            service: service.to_owned(),
            endpoint: endpoint.to_owned(),
            requests: metrics::counter!(names::REQUESTS, &labels),
            duration: metrics::histogram!(names::REQUEST_DURATION, &labels),
            errors: Vec::new(),
        }
    }

    /// Records one answered request: its error code, if any, and how long it took.
    pub(crate) fn answered(&mut self, error: Option<u16>, took: Duration) {
        self.requests.increment(1);
        self.duration.record(took);
        if let Some(code) = error {
            let at = match self.errors.iter().position(|(c, _)| *c == code) {
                Some(at) => at,
                None => {
                    let counter = metrics::counter!(
                        names::REQUEST_ERRORS,
                        "service" => self.service.clone(),
                        "endpoint" => self.endpoint.clone(),
                        "code" => code.to_string()
                    );
                    self.errors.push((code, counter));
                    self.errors.len() - 1
                }
            };
            self.errors[at].1.increment(1);
        }
    }
}

/// One core subscription's metrics.
pub(crate) struct SubscriptionMetrics {
    handled: Counter,
    failed: Counter,
}

impl SubscriptionMetrics {
    pub(crate) fn new(subject: &str) -> Self {
        describe();
        let labels = [("subject", subject.to_owned())];
        SubscriptionMetrics {
            handled: metrics::counter!(names::SUBSCRIPTION_HANDLED, &labels),
            failed: metrics::counter!(names::SUBSCRIPTION_FAILED, &labels),
        }
    }

    pub(crate) fn handled(&self, ok: bool) {
        if ok {
            self.handled.increment(1);
        } else {
            self.failed.increment(1);
        }
    }
}
