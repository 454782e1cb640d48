//! The fleet channel and the probe, against a stand-in meta leader on a real server.

use super::*;

/// The API prefix of a JetStream the test plays: it answers the probes it chooses.
const FAKE_API: &str = "$JS.FAKE.API";

/// The inbox prefix the replicas' connections use (async-nats' default): one service.
const INBOX: &str = "_INBOX";

/// Where the replicas of [`INBOX`]'s service say that they wait on [`FAKE_API`].
fn waiting_notes() -> String {
    format!("{INBOX}.{FLEET_TOKEN}.WAITING.{FAKE_API}")
}

/// A watch on its own connection (one replica), probing [`FAKE_API`].
async fn replica(server: &nats_topology_testkit::NatsServer) -> LeaderWatch {
    let client = async_nats::connect(server.url()).await.expect("connect");
    let api = crate::jsapi::JetStreamApi::Prefix(FAKE_API.to_owned());
    LeaderWatch::new(
        api.context(client, Duration::from_secs(5)),
        Advisories::None,
        Fleet::new(INBOX, FAKE_API),
        LeaderTimings::default(),
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
    let notes = leader.subscribe(waiting_notes()).await.unwrap();
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
        woken.push(tokio::spawn(watch.next_election("ORDERS", None)));
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
        .map(|watch| watch.next_election("ORDERS", None))
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
    let waiting = watch.next_election("ORDERS", None);
    // Subscribed before it probes: a hundred other replicas say they wait, and this one
    // then probes every 2.5 to 5 s.
    let mut last = arrivals.recv().await.expect("a first probe");
    for sender in 1..=100u64 {
        leader
            .publish(waiting_notes(), sender.to_string().into())
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
        watch.stalled("ORDERS", None, started, grace),
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
    let waiting = watch.next_election("ORDERS", None);
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
        after < LeaderTimings::default().probe_timeout,
        "the note comes while the first probe is still unanswered, {after:?} after it \
         (its timeout: {:?})",
        LeaderTimings::default().probe_timeout
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
    let mut waiting = Box::pin(watch.next_election("ORDERS", None));
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
