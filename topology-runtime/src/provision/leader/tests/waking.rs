//! Retries woken by a [`Wake`]: an event ends a backoff sleep, a stalled attempt is made
//! again, a cap bounds the waits.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use tokio::time::Instant;

use super::super::waking::{Wake, run_waking};
use crate::retry::RetryPolicy;

/// Events on demand: `next_event` resolves when `fire` is called after it.
struct Manual {
    notify: std::sync::Arc<tokio::sync::Notify>,
    grace: Duration,
}

impl Wake for Manual {
    fn next_event(&self) -> Pin<Box<dyn Future<Output = ()> + Send + 'static>> {
        let notify = self.notify.clone();
        Box::pin(async move { notify.notified().await })
    }
    fn spread(&self) -> Duration {
        Duration::from_millis(1)
    }
    fn in_flight_grace(&self) -> Duration {
        self.grace
    }
}

#[tokio::test]
async fn an_event_abandons_an_unanswered_attempt_after_its_grace_and_ends_a_backoff_sleep() {
    let notify = std::sync::Arc::new(tokio::sync::Notify::new());
    let wake = Manual {
        notify: notify.clone(),
        grace: Duration::from_millis(20),
    };
    let firing = {
        let notify = notify.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(5)).await;
                notify.notify_waiters();
            }
        })
    };
    // Backoff windows of an hour: only events can make this finish.
    let slow = RetryPolicy {
        base: Duration::from_secs(3600),
        cap: Duration::from_secs(3600),
        deadline: Duration::from_secs(7200),
        ..RetryPolicy::default()
    };
    let mut calls = 0;
    let outcome = tokio::time::timeout(
        Duration::from_secs(10),
        run_waking(
            slow.backoff(),
            || {
                calls += 1;
                let n = calls;
                async move {
                    match n {
                        // Never answered: abandoned after the grace and an event.
                        1 => std::future::pending().await,
                        // A transient failure: the hour-long sleep ends at an event.
                        2 => Err("no leader"),
                        _ => Ok(n),
                    }
                }
            },
            |_| true,
            &wake,
        ),
    )
    .await
    .expect("woken, not left to the backoff");
    firing.abort();
    assert_eq!(outcome, Ok((3, 3)));
}

/// A source for which every attempt stalls exactly at the end of its grace, with or without
/// an event having come (`elections`).
struct Stalls {
    grace: Duration,
    spread: Duration,
    elections: bool,
}

impl Wake for Stalls {
    fn next_event(&self) -> Pin<Box<dyn Future<Output = ()> + Send + 'static>> {
        Box::pin(std::future::pending())
    }
    fn spread(&self) -> Duration {
        self.spread
    }
    fn in_flight_grace(&self) -> Duration {
        self.grace
    }
    fn stalled(
        &self,
        started: Instant,
        grace: Duration,
    ) -> Pin<Box<dyn Future<Output = ()> + Send + 'static>> {
        Box::pin(tokio::time::sleep_until(started + grace))
    }
    fn event_seen_since(&self, _since: Instant) -> bool {
        self.elections
    }
}

/// Runs attempts that are never answered until the fourth, which succeeds; returns when each
/// attempt started, in ms after the first.
async fn starts_of_unanswered_attempts(wake: &Stalls) -> Vec<u128> {
    let origin = Instant::now();
    let starts = std::sync::Mutex::new(Vec::new());
    let outcome = run_waking(
        RetryPolicy::default().backoff(),
        || {
            let mut starts = starts.lock().unwrap();
            starts.push(origin.elapsed().as_millis());
            let n = starts.len();
            async move {
                if n < 4 {
                    std::future::pending::<Result<usize, ()>>().await
                } else {
                    Ok(n)
                }
            }
        },
        |_| true,
        wake,
    )
    .await;
    assert_eq!(outcome, Ok((4, 4)));
    starts.into_inner().unwrap()
}

#[tokio::test(start_paused = true)]
async fn an_attempt_unanswered_without_an_event_is_made_again_at_once_with_a_longer_grace() {
    // A spread of an hour: applied, it would show.
    let wake = Stalls {
        grace: Duration::from_millis(100),
        spread: Duration::from_secs(3600),
        elections: false,
    };
    assert_eq!(
        starts_of_unanswered_attempts(&wake).await,
        [0, 100, 300, 700]
    );
}

#[tokio::test(start_paused = true)]
async fn an_attempt_lost_to_an_election_keeps_its_grace_and_waits_out_the_spread() {
    let wake = Stalls {
        grace: Duration::from_millis(100),
        spread: Duration::from_millis(50),
        elections: true,
    };
    let starts = starts_of_unanswered_attempts(&wake).await;
    // Each attempt: its grace (100 ms, not doubled), then a spread in [0, 50] ms.
    for pair in starts.windows(2) {
        let gap = pair[1] - pair[0];
        assert!((100..=150).contains(&gap), "{starts:?}");
    }
}

/// No events; waits after a failure bounded by `cap`.
struct Capped {
    cap: Duration,
}

impl Wake for Capped {
    fn next_event(&self) -> Pin<Box<dyn Future<Output = ()> + Send + 'static>> {
        Box::pin(std::future::pending())
    }
    fn spread(&self) -> Duration {
        Duration::ZERO
    }
    fn in_flight_grace(&self) -> Duration {
        Duration::from_secs(3600)
    }
    fn backoff_cap(&self) -> Option<Duration> {
        Some(self.cap)
    }
}

#[tokio::test(start_paused = true)]
async fn a_backoff_cap_bounds_each_wait_after_a_failure() {
    // Windows of an hour; the cap makes each wait at most 10 ms.
    let slow = RetryPolicy {
        base: Duration::from_secs(3600),
        cap: Duration::from_secs(3600),
        deadline: Duration::from_secs(7200),
        ..RetryPolicy::default()
    };
    let origin = Instant::now();
    let mut calls = 0;
    let outcome = run_waking(
        slow.backoff(),
        || {
            calls += 1;
            let n = calls;
            async move { if n < 4 { Err("no peer") } else { Ok(n) } }
        },
        |_| true,
        &Capped {
            cap: Duration::from_millis(10),
        },
    )
    .await;
    assert_eq!(outcome, Ok((4, 4)));
    assert!(
        origin.elapsed() <= Duration::from_millis(30),
        "{:?}",
        origin.elapsed()
    );
}
