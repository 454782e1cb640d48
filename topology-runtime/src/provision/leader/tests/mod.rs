use std::collections::HashSet;

use futures::{FutureExt, StreamExt};

use super::fleet::{Census, FLEET_TOKEN};
use super::*;

#[test]
fn advisory_subjects_name_the_election() {
    let now = Instant::now();
    let from = |subject: &str| Election::from_subject(subject, now);
    assert_eq!(
        from("$JS.EVENT.ADVISORY.DOMAIN.LEADER_ELECTED"),
        Some(Election::Meta { lost_before: now })
    );
    assert_eq!(
        from("$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED.ORDERS"),
        Some(Election::Stream("ORDERS".into()))
    );
    assert_eq!(
        from("$JS.EVENT.ADVISORY.CONSUMER.LEADER_ELECTED.ORDERS.billing"),
        Some(Election::Consumer {
            stream: "ORDERS".into(),
            consumer: "billing".into()
        })
    );
    assert_eq!(from("$JS.EVENT.ADVISORY.STREAM.QUORUM_LOST.ORDERS"), None);
    assert_eq!(from("orders.created"), None);
    assert!(Election::Meta { lost_before: now }.concerns("ORDERS"));
    let billing = Election::Consumer {
        stream: "ORDERS".into(),
        consumer: "billing".into(),
    };
    assert!(billing.concerns("ORDERS"));
    assert!(!Election::Stream("OTHER".into()).concerns("ORDERS"));
}

/// A watch on a client that never connects (its probes never leave), on `$JS.API`.
async fn unconnected_watch() -> LeaderWatch {
    let client = async_nats::ConnectOptions::new()
        .retry_on_initial_connect()
        .connect("nats://127.0.0.1:1")
        .await
        .unwrap();
    LeaderWatch::new(
        jetstream::new(client),
        Advisories::All,
        Fleet::new("_INBOX", "$JS.API"),
        LeaderTimings::default(),
    )
}

#[tokio::test]
async fn the_watch_runs_only_while_a_retry_waits() {
    // A client that never connects: the watch starts and stops all the same.
    let watch = unconnected_watch().await;
    assert!(!watch.is_watching());
    let first = watch.next_election("ORDERS", None);
    let second = watch.next_election("OTHER", None);
    assert!(watch.is_watching());
    drop(first);
    assert!(watch.is_watching());
    drop(second);
    assert!(watch.is_watching(), "it lingers");
    let again = watch.next_election("ORDERS", None);
    drop(again);
    assert_eq!(
        watch.inner.state.lock().unwrap().starts,
        1,
        "one watch throughout"
    );
    stopped(&watch).await;

    let waiting = tokio::spawn(watch.next_election("ORDERS", None));
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

#[tokio::test]
async fn the_watch_listens_to_the_elections_of_what_its_retries_wait_on_only() {
    let watch = unconnected_watch().await;
    let watched = |watch: &LeaderWatch| -> Vec<String> {
        let state = watch.inner.state.lock().unwrap();
        state.watched.keys().cloned().collect()
    };
    assert_eq!(
        Advisories::All.always(),
        ["$JS.EVENT.ADVISORY.DOMAIN.LEADER_ELECTED"],
        "the meta leader's, whatever waits"
    );
    let stream_create = watch.next_election("ORDERS", None);
    assert_eq!(
        watched(&watch),
        ["$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED.ORDERS"]
    );
    let started = Instant::now();
    let consumer_create = watch.stalled("ORDERS", Some("billing"), started, Duration::ZERO);
    assert_eq!(
        watched(&watch),
        [
            "$JS.EVENT.ADVISORY.CONSUMER.LEADER_ELECTED.ORDERS.billing",
            "$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED.ORDERS",
        ],
        "a retry for a consumer adds its consumer's elections"
    );
    drop(consumer_create);
    assert_eq!(
        watched(&watch),
        ["$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED.ORDERS"],
        "what no retry waits on any more is let go (its stream's retry still waits)"
    );
    drop(stream_create);
    stopped(&watch).await;
    assert!(watched(&watch).is_empty(), "the next watch starts afresh");
    let edge = Advisories::Domain("edge".into());
    assert_eq!(edge.always(), Advisories::All.always());
    assert_eq!(
        edge.of_retry("ORDERS", Some("billing")),
        Advisories::All.of_retry("ORDERS", Some("billing")),
        "advisories keep their subjects in a domain"
    );
    assert!(Advisories::None.always().is_empty());
    assert!(
        Advisories::None
            .of_retry("ORDERS", Some("billing"))
            .is_empty()
    );
}

#[tokio::test]
async fn a_retry_that_starts_waiting_while_the_watch_runs_hears_its_consumers_election() {
    let server = nats_topology_testkit::NatsServer::start()
        .await
        .expect("nats-server starts");
    let client = async_nats::connect(server.url()).await.expect("connect");
    let watch = LeaderWatch::new(
        jetstream::new(client),
        Advisories::All,
        Fleet::new("_INBOX", "$JS.API"),
        LeaderTimings::default(),
    );
    // Another stream's retry started the watch; this one joins it.
    let other = watch.next_election("OTHER", None);
    assert!(watch.is_watching());
    let mut waiting = Box::pin(watch.next_election("ORDERS", Some("billing")));
    let announcer = async_nats::connect(server.url()).await.expect("connect");
    let announced = tokio::time::timeout(Duration::from_secs(10), async {
        // Until the watch has subscribed (the task does it once told): announced again.
        while !resolved(&mut waiting).await {
            announcer
                .publish(
                    "$JS.EVENT.ADVISORY.CONSUMER.LEADER_ELECTED.ORDERS.billing",
                    "{}".into(),
                )
                .await
                .unwrap();
            announcer.flush().await.unwrap();
            // Paces the announcements; the wait is on the retry being woken.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(
        announced.is_ok(),
        "woken by its consumer's election, subscribed to after the watch started"
    );
    let state = watch.inner.state.lock().unwrap();
    assert!(
        state
            .last_consumer
            .contains_key(&("ORDERS".to_owned(), "billing".to_owned()))
    );
    drop(state);
    drop(other);
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

#[test]
fn a_replica_alone_probes_faster_as_it_starts_and_a_fleet_at_its_size() {
    let ms = Duration::from_millis;
    assert_eq!(PROBES.interval(0, None), ms(50));
    assert_eq!(PROBES.interval(3, None), ms(400));
    assert_eq!(PROBES.interval(10, None), PROBES.max);
    for n in 0..8 {
        let interval = PROBES.interval(n, None);
        assert_eq!(PROBES.delay_drawn(n, None, 0.0), interval / 2);
        assert_eq!(PROBES.delay_drawn(n, None, 1.0), interval);
        let delay = PROBES.delay_drawn(n, None, rand::random());
        assert!(
            delay >= interval / 2 && delay <= interval,
            "{delay:?} of {interval:?}"
        );
    }
    // One draw keeps its place in the interval as the fleet's interval grows.
    let (small, large) = (Some(ms(400)), Some(ms(4000)));
    assert_eq!(PROBES.delay_drawn(0, small, 0.5), ms(300));
    assert_eq!(PROBES.delay_drawn(0, large, 0.5), ms(3000));

    let mut census = Census::default();
    assert_eq!(census.interval(), None, "no note heard: probing alone");
    census.heard(7, true, true);
    assert_eq!(
        census.interval(),
        Some(FLEET_INTERVAL),
        "its own note: a fleet of one"
    );
    for sender in 0..7 {
        census.heard(sender, false, true);
    }
    census.heard(3, false, true);
    assert_eq!(
        census.interval(),
        Some(FLEET_INTERVAL * 8),
        "eight replicas, each once"
    );
    assert_eq!(PROBES.interval(0, census.interval()), FLEET_INTERVAL * 8);
    for sender in 100..1000 {
        census.heard(sender, false, true);
    }
    assert_eq!(census.interval(), Some(FLEET_MAX));
    assert!(!census.worth_telling(), "enough heard: no note of its own");
}

/// Whether `attempt` has resolved, once everything ready has run.
async fn resolved(attempt: &mut std::pin::Pin<Box<impl Future<Output = ()>>>) -> bool {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    attempt.now_or_never().is_some()
}

#[tokio::test]
async fn an_election_wakes_every_retry_of_its_stream_but_gives_up_only_what_it_loses() {
    let watch = unconnected_watch().await;
    let inner = Arc::downgrade(&watch.inner);
    let announce = |election| announce(&inner, &watch.inner.elections, election);
    let consumer = |name: &str| Election::Consumer {
        stream: "ORDERS".into(),
        consumer: name.into(),
    };
    // The watch runs (a retry sleeps) when the attempts start.
    let sleeping = tokio::spawn(watch.next_election("ORDERS", None));
    tokio::task::yield_now().await;
    let started = Instant::now();
    let hour = Duration::from_secs(3600);
    let mut stream_create = Box::pin(watch.stalled("ORDERS", None, started, hour));
    let mut consumer_create = Box::pin(watch.stalled("ORDERS", Some("billing"), started, hour));

    announce(consumer("billing"));
    tokio::time::timeout(Duration::from_secs(5), sleeping)
        .await
        .expect("a consumer's leader wakes a sleeping retry of its stream")
        .unwrap();
    assert!(
        !resolved(&mut consumer_create).await,
        "a consumer's leader loses no request in flight"
    );
    // A meta leader missing only before the requests were sent loses neither.
    announce(Election::Meta {
        lost_before: started,
    });
    assert!(
        !resolved(&mut stream_create).await,
        "sent to the new meta leader"
    );
    announce(Election::Stream("ORDERS".into()));
    assert!(
        !resolved(&mut stream_create).await,
        "the stream's new leader answers its creates"
    );
    assert!(
        resolved(&mut consumer_create).await,
        "the stream leader's election may lose a consumer's request"
    );
    announce(Election::Meta {
        lost_before: Instant::now(),
    });
    assert!(
        resolved(&mut stream_create).await,
        "sent while no meta leader answered"
    );
}

mod fleet;
mod waking;
