use super::*;

#[test]
fn advisory_subjects_name_the_election() {
    assert_eq!(
        Election::from_subject("$JS.EVENT.ADVISORY.DOMAIN.LEADER_ELECTED"),
        Some(Election::Meta)
    );
    assert_eq!(
        Election::from_subject("$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED.ORDERS"),
        Some(Election::Stream("ORDERS".into()))
    );
    assert_eq!(
        Election::from_subject("$JS.EVENT.ADVISORY.CONSUMER.LEADER_ELECTED.ORDERS.billing"),
        Some(Election::Stream("ORDERS".into()))
    );
    assert_eq!(
        Election::from_subject("$JS.EVENT.ADVISORY.STREAM.QUORUM_LOST.ORDERS"),
        None
    );
    assert_eq!(Election::from_subject("orders.created"), None);
    assert!(Election::Meta.concerns("ORDERS"));
    assert!(!Election::Stream("OTHER".into()).concerns("ORDERS"));
}

#[tokio::test]
async fn the_watch_runs_only_while_a_retry_waits() {
    // A client that never connects: the watch starts and stops all the same.
    let client = async_nats::ConnectOptions::new()
        .retry_on_initial_connect()
        .connect("nats://127.0.0.1:1")
        .await
        .unwrap();
    let watch = LeaderWatch::new(jetstream::new(client), Advisories::All);
    assert!(!watch.is_watching());
    let first = watch.next_election("ORDERS");
    let second = watch.next_election("OTHER");
    assert!(watch.is_watching());
    drop(first);
    assert!(watch.is_watching());
    drop(second);
    assert!(watch.is_watching(), "it lingers");
    let again = watch.next_election("ORDERS");
    drop(again);
    assert_eq!(
        watch.inner.state.lock().unwrap().starts,
        1,
        "one watch throughout"
    );
    stopped(&watch).await;

    let waiting = tokio::spawn(watch.next_election("ORDERS"));
    tokio::task::yield_now().await;
    let _ = watch.inner.elections.send(Election::Stream("OTHER".into()));
    let _ = watch
        .inner
        .elections
        .send(Election::Stream("ORDERS".into()));
    tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("woken by its stream's election")
        .unwrap();
    stopped(&watch).await;
    assert_eq!(watch.inner.state.lock().unwrap().starts, 2);
}

/// Waits (at most 5 s) until the watch has stopped.
async fn stopped(watch: &LeaderWatch) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while watch.is_watching() {
        assert!(
            Instant::now() < deadline,
            "the watch stops after its linger"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[test]
fn in_a_domain_only_that_domains_advisories_count() {
    let edge = Advisories::Domain("edge".to_owned());
    assert!(edge.accepts(br#"{"type":"x","stream":"S","domain":"edge"}"#));
    assert!(!edge.accepts(br#"{"type":"x","stream":"S","domain":"hub"}"#));
    assert!(
        !edge.accepts(br#"{"type":"x","stream":"S"}"#),
        "a server without a domain"
    );
    assert!(!edge.accepts(b"not json"));
    assert!(Advisories::All.accepts(br#"{"domain":"hub"}"#));
    assert!(!Advisories::None.accepts(br#"{"domain":"edge"}"#));
}
