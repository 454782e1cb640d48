//! [`Waiter`]: one retry waiting for a leader, counted while it waits; the first starts the
//! watch, and each adds its stream's and consumer's advisories to what the watch listens to.

use std::sync::Arc;

use tokio::time::Instant;

use super::{Inner, probe};

/// Counts one waiting retry; the first starts the watch (which stops by itself once none
/// has waited for [`LeaderTimings::linger`](super::LeaderTimings::linger)). Each adds the advisories of its stream and
/// consumer to what the watch listens to while it waits.
pub(super) struct Waiter {
    inner: Arc<Inner>,
    subjects: Vec<String>,
}

impl Waiter {
    pub(super) fn enter(inner: Arc<Inner>, stream: &str, consumer: Option<&str>) -> Waiter {
        let subjects = inner.advisories.of_retry(stream, consumer);
        {
            let mut state = inner.state.lock().unwrap();
            state.waiters += 1;
            state.idle_since = None;
            let mut added = false;
            for subject in &subjects {
                let waiting = state.watched.entry(subject.clone()).or_default();
                *waiting += 1;
                added |= *waiting == 1;
            }
            if !state.running {
                state.running = true;
                state.starts += 1;
                tokio::spawn(probe::watch(
                    inner.js.clone(),
                    inner.timings.probe_timeout,
                    inner.advisories.clone(),
                    inner.fleet.clone(),
                    inner.elections.clone(),
                    inner.asks.clone(),
                    Arc::downgrade(&inner),
                ));
            } else if added {
                inner.asks.rescope.notify_one();
            }
        }
        Waiter { inner, subjects }
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        let mut state = self.inner.state.lock().unwrap();
        state.waiters -= 1;
        if state.waiters == 0 {
            state.idle_since = Some(Instant::now());
        }
        let mut removed = false;
        for subject in &self.subjects {
            if let Some(waiting) = state.watched.get_mut(subject) {
                *waiting -= 1;
                if *waiting == 0 {
                    state.watched.remove(subject);
                    removed = true;
                }
            }
        }
        if removed && state.running {
            self.inner.asks.rescope.notify_one();
        }
    }
}
