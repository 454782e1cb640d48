use super::*;

#[test]
fn window_doubles_then_caps() {
    let policy = RetryPolicy {
        base: Duration::from_millis(100),
        cap: Duration::from_secs(1),
        ..RetryPolicy::default()
    };
    assert_eq!(policy.window(0), Duration::from_millis(100));
    assert_eq!(policy.window(1), Duration::from_millis(200));
    assert_eq!(policy.window(3), Duration::from_millis(800));
    assert_eq!(policy.window(4), Duration::from_secs(1));
    assert_eq!(policy.window(u32::MAX), Duration::from_secs(1));
}

#[test]
fn delays_stay_inside_the_window_and_spread() {
    let policy = RetryPolicy::default();
    let delays: Vec<_> = (0..200).map(|_| policy.delay(2)).collect();
    assert!(delays.iter().all(|d| *d <= policy.window(2)));
    let distinct: std::collections::HashSet<_> = delays.iter().collect();
    assert!(distinct.len() > 150, "full jitter must spread delays");
}

#[test]
fn a_backoff_stops_at_its_attempt_limit_and_starts_afresh_on_reset() {
    let policy = RetryPolicy::default();
    let mut backoff = policy.backoff_until(None).max_attempts(3);
    assert!(backoff.fail().is_some());
    assert!(backoff.fail().is_some());
    assert_eq!(
        backoff.fail(),
        None,
        "the third failure is the last attempt"
    );
    backoff.reset();
    assert_eq!(backoff.failures(), 0);
    assert!(backoff.fail().is_some_and(|d| d <= policy.window(0)));
}

#[test]
fn a_backoff_never_waits_past_its_deadline() {
    let mut none_left = RetryPolicy::no_retry().backoff();
    assert_eq!(none_left.fail(), None);
    let mut unbounded = RetryPolicy::default().backoff_until(None);
    assert!((0..100).all(|_| unbounded.fail().is_some()));
}

#[tokio::test]
async fn run_retries_transient_failures_only_and_counts_attempts() {
    let policy = RetryPolicy {
        base: Duration::from_millis(1),
        ..RetryPolicy::default()
    };
    let mut calls = 0;
    let outcome = policy
        .run(
            || {
                calls += 1;
                let n = calls;
                async move { if n < 4 { Err(n) } else { Ok(n) } }
            },
            |_| true,
        )
        .await;
    assert_eq!(outcome, Ok((4, 4)));

    let fatal = policy.run(|| async { Err::<(), _>("no") }, |_| false).await;
    assert_eq!(
        fatal,
        Err(Failed {
            error: "no",
            attempts: 1,
            gave_up: GaveUp::Final
        })
    );

    let exhausted = policy
        .backoff()
        .max_attempts(5)
        .run(|| async { Err::<(), _>("busy") }, |_| true)
        .await;
    assert_eq!(
        exhausted,
        Err(Failed {
            error: "busy",
            attempts: 5,
            gave_up: GaveUp::Exhausted
        })
    );
}

#[test]
fn redelivery_follows_the_declared_backoff_then_repeats_its_last_step() {
    let backoff = [Duration::from_secs(1), Duration::from_secs(10)];
    let policy = RetryPolicy::default();
    assert_eq!(policy.after(&backoff, 1), Duration::from_secs(1));
    assert_eq!(policy.after(&backoff, 2), Duration::from_secs(10));
    assert_eq!(policy.after(&backoff, 9), Duration::from_secs(10));
}

#[test]
fn without_a_backoff_redelivery_waits_within_the_policy_window() {
    let policy = RetryPolicy {
        base: Duration::from_millis(100),
        cap: Duration::from_secs(30),
        ..RetryPolicy::default()
    };
    for delivered in [1, 2, 5, 40, u64::MAX] {
        let attempt = u32::try_from(delivered - 1).unwrap_or(u32::MAX);
        assert!(policy.after(&[], delivered) <= policy.window(attempt));
    }
}
