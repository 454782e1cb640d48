use std::collections::HashSet;

use futures::{FutureExt, StreamExt};

use super::fleet::{Census, FLEET_PREFIX};
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
        Fleet::new("$JS.API"),
    )
}

#[tokio::test]
async fn the_watch_runs_only_while_a_retry_waits() {
    // A client that never connects: the watch starts and stops all the same.
    let watch = unconnected_watch().await;
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
    let sleeping = tokio::spawn(watch.next_election("ORDERS"));
    tokio::task::yield_now().await;
    let started = Instant::now();
    let hour = Duration::from_secs(3600);
    let mut stream_create = Box::pin(watch.stalled("ORDERS", false, started, hour));
    let mut consumer_create = Box::pin(watch.stalled("ORDERS", true, started, hour));

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

/// The API prefix of a JetStream the test plays: it answers the probes it chooses.
const FAKE_API: &str = "$JS.FAKE.API";

/// A watch on its own connection (one replica), probing [`FAKE_API`].
async fn replica(server: &nats_topology_testkit::NatsServer) -> LeaderWatch {
    let client = async_nats::connect(server.url()).await.expect("connect");
    let api = crate::jsapi::JetStreamApi::Prefix(FAKE_API.to_owned());
    LeaderWatch::new(
        api.context(client, Duration::from_secs(5)),
        Advisories::None,
        Fleet::new(FAKE_API),
    )
}

/// The replicas whose `waiting` notes `notes` carries, until there are `replicas` of them.
async fn all_waiting(notes: &mut async_nats::Subscriber, replicas: usize) {
    let mut senders = HashSet::new();
    tokio::time::timeout(Duration::from_secs(20), async {
        while senders.len() < replicas {
            let note = notes.next().await.expect("subscribed");
            senders.insert(note.payload);
        }
    })
    .await
    .expect("every replica says its probes go unanswered");
}

/// The connection a request came from: its reply inbox without the last token.
fn requester(message: &async_nats::Message) -> String {
    let reply = message.reply.as_ref().expect("a request").as_str();
    reply
        .rsplit_once('.')
        .map_or(reply, |(inbox, _)| inbox)
        .to_owned()
}

/// A stand-in for the meta leader of the fake API: its connection, the probes it receives
/// and the fleet's `waiting` notes. A round trip after subscribing: the server has
/// registered both subscriptions before any replica probes (a flush only writes).
async fn fake_leader(
    server: &nats_topology_testkit::NatsServer,
) -> (
    async_nats::Client,
    async_nats::Subscriber,
    async_nats::Subscriber,
) {
    let leader = async_nats::connect(server.url()).await.expect("connect");
    let probes = leader.subscribe(format!("{FAKE_API}.INFO")).await.unwrap();
    let notes = leader
        .subscribe(format!("{FLEET_PREFIX}.WAITING.{FAKE_API}"))
        .await
        .unwrap();
    let _ = leader.request("_FAKE_LEADER.ROUND_TRIP", "".into()).await;
    (leader, probes, notes)
}

#[tokio::test]
async fn one_answered_probe_wakes_the_whole_fleet() {
    const REPLICAS: usize = 8;
    let server = nats_topology_testkit::NatsServer::start()
        .await
        .expect("nats-server starts");
    let (leader, probes, mut notes) = fake_leader(&server).await;
    let mut watches = Vec::new();
    let mut woken = Vec::new();
    for _ in 0..REPLICAS {
        let watch = replica(&server).await;
        woken.push(tokio::spawn(watch.next_election("ORDERS")));
        watches.push(watch);
    }
    all_waiting(&mut notes, REPLICAS).await;

    // A new leader from now on: the probes sent to the old one were lost with it (answering
    // them late would be a slow leader, not an election). It answers the probes of one
    // replica only: the others learn it from that replica.
    drop(probes);
    let mut probes = leader.subscribe(format!("{FAKE_API}.INFO")).await.unwrap();
    let mut answered = None;
    let answering = tokio::spawn(async move {
        while let Some(probe) = probes.next().await {
            let from = requester(&probe);
            if answered.get_or_insert_with(|| from.clone()) == &from {
                let _ = leader.publish(probe.reply.unwrap(), "{}".into()).await;
            }
        }
    });
    for woken in woken {
        tokio::time::timeout(Duration::from_secs(10), woken)
            .await
            .expect("woken by one replica's answered probe")
            .unwrap();
    }
    answering.abort();
}

#[tokio::test]
async fn the_more_replicas_wait_the_less_each_probes() {
    // 60 replicas: each probes every 60 x FLEET_INTERVAL (3 s, from 1.5 s with its jitter),
    // where one alone backs off to PROBES.max (1 s) at most.
    const REPLICAS: usize = 60;
    let server = nats_topology_testkit::NatsServer::start()
        .await
        .expect("nats-server starts");
    let (_leader, mut probes, mut notes) = fake_leader(&server).await;
    // Each probe, with when it arrived.
    let (arrived, mut arrivals) = tokio::sync::mpsc::unbounded_channel();
    let recording = tokio::spawn(async move {
        while let Some(probe) = probes.next().await {
            let _ = arrived.send((requester(&probe), Instant::now()));
        }
    });
    // Connected first, then all start waiting at once, as a fleet does when its leader goes:
    // a replica that starts waiting after the others told the fleet does not hear them, and
    // probes on its own schedule.
    let mut watches = Vec::new();
    for _ in 0..REPLICAS {
        watches.push(replica(&server).await);
    }
    let waiting: Vec<_> = watches
        .iter()
        .map(|watch| watch.next_election("ORDERS"))
        .collect();
    all_waiting(&mut notes, REPLICAS).await;
    let heard = Instant::now();

    // Each replica's probes once it has heard the others: the first may still be on its
    // own schedule; the gap between the second and the third is the fleet's.
    let mut seen: HashMap<String, Vec<Instant>> = HashMap::new();
    tokio::time::timeout(Duration::from_secs(30), async {
        while seen.len() < REPLICAS || seen.values().any(|at| at.len() < 3) {
            let (from, at) = arrivals.recv().await.expect("recording");
            if at > heard {
                seen.entry(from).or_default().push(at);
            }
        }
    })
    .await
    .expect("every replica probes three more times");
    recording.abort();
    let shortest = seen
        .values()
        .map(|at| at[2] - at[1])
        .min()
        .expect("replicas");
    assert!(
        shortest >= Duration::from_millis(1400),
        "a fleet of {REPLICAS} probes at most every 1.5 s each; shortest gap {shortest:?}"
    );
    drop(waiting);
}

#[tokio::test]
async fn an_attempt_past_its_grace_gets_a_probe_of_its_own() {
    let server = nats_topology_testkit::NatsServer::start()
        .await
        .expect("nats-server starts");
    let leader = async_nats::connect(server.url()).await.expect("connect");
    let mut probes = leader.subscribe(format!("{FAKE_API}.INFO")).await.unwrap();
    leader.flush().await.unwrap();
    // The API answers every probe; the test hears when each came.
    let (arrived, mut arrivals) = tokio::sync::mpsc::unbounded_channel();
    let answering = {
        let leader = leader.clone();
        tokio::spawn(async move {
            while let Some(probe) = probes.next().await {
                let _ = arrived.send(Instant::now());
                let _ = leader.publish(probe.reply.unwrap(), "{}".into()).await;
            }
        })
    };
    let watch = replica(&server).await;
    let waiting = watch.next_election("ORDERS");
    // Subscribed before it probes: a hundred other replicas say they wait, and this one
    // then probes every 2.5 to 5 s.
    let mut last = arrivals.recv().await.expect("a first probe");
    for sender in 1..=100u64 {
        let subject = format!("{FLEET_PREFIX}.WAITING.{FAKE_API}");
        leader
            .publish(subject, sender.to_string().into())
            .await
            .unwrap();
    }
    leader.flush().await.unwrap();
    let just_probed = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let at = arrivals.recv().await.expect("answering");
            let gap = at - std::mem::replace(&mut last, at);
            if gap >= Duration::from_secs(2) {
                return at;
            }
        }
    })
    .await
    .expect("the watch probes on the fleet's schedule");

    // Its next probe is 2.5 s away at least; an attempt unanswered past its grace asks for
    // one now, and is given up as lost once it is answered.
    let started = Instant::now();
    let grace = Duration::from_millis(50);
    tokio::time::timeout(
        Duration::from_secs(1),
        watch.stalled("ORDERS", false, started, grace),
    )
    .await
    .expect("given up within a second, not at the next scheduled probe");
    assert!(started - just_probed < Duration::from_millis(500));
    drop(waiting);
    answering.abort();
}

#[tokio::test]
async fn a_probe_gone_silent_tells_the_fleet_before_it_times_out() {
    let server = nats_topology_testkit::NatsServer::start()
        .await
        .expect("nats-server starts");
    // A leader that never answers: each probe waits out its whole timeout (1 s).
    let (_leader, mut probes, mut notes) = fake_leader(&server).await;
    let watch = replica(&server).await;
    let waiting = watch.next_election("ORDERS");
    let first = tokio::time::timeout(Duration::from_secs(5), probes.next())
        .await
        .expect("a first probe")
        .expect("subscribed");
    let first_at = Instant::now();
    drop(first);
    tokio::time::timeout(Duration::from_secs(5), notes.next())
        .await
        .expect("a waiting note")
        .expect("subscribed");
    let after = first_at.elapsed();
    assert!(
        after < PROBE_TIMEOUT,
        "the note comes while the first probe is still unanswered, {after:?} after it \
         (its timeout: {PROBE_TIMEOUT:?})"
    );
    drop(waiting);
}

#[tokio::test]
async fn a_silent_probe_answered_late_is_a_slow_leader_not_an_election() {
    let server = nats_topology_testkit::NatsServer::start()
        .await
        .expect("nats-server starts");
    let (leader, mut probes, mut notes) = fake_leader(&server).await;
    // Answers every probe, each 300 ms late: past its silence, within its timeout.
    let answering = tokio::spawn(async move {
        while let Some(probe) = probes.next().await {
            let leader = leader.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(300)).await;
                let _ = leader.publish(probe.reply.unwrap(), "{}".into()).await;
            });
        }
    });
    let watch = replica(&server).await;
    let mut waiting = Box::pin(watch.next_election("ORDERS"));
    // It told the fleet (its first probe went silent) ...
    tokio::time::timeout(Duration::from_secs(5), notes.next())
        .await
        .expect("a waiting note")
        .expect("subscribed");
    // ... and then heard every answer late: no election, so the retry sleeps on.
    let quiet = tokio::time::timeout(Duration::from_secs(2), &mut waiting).await;
    assert!(
        quiet.is_err(),
        "late answers from the same leader wake no retry"
    );
    assert!(!resolved(&mut waiting).await);
    let state = watch.inner.state.lock().unwrap();
    assert!(
        state.last_answered.is_some() && state.last_rtt >= Duration::from_millis(300),
        "the probes were answered, late"
    );
    drop(state);
    answering.abort();
}
