//! Opening a session of a provisioned consumer: what its handlers share (`Session`), its flow
//! control, and its feed (our pull requests, or a push subscription).

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::consumer::{self, FromConsumer, push};
use tokio_util::sync::CancellationToken;

use super::ack::{Acks, Confirm, Stopped};
use super::dead_letter::DeadLetter;
use super::dispatch::Session;
use super::early::Early;
use super::feed::{Feed, Pusher, consumer_gone};
use super::flow::Flow;
use super::loss::Loss;
use super::outcome::Observer;
use super::pull::{PullPriority, Puller, Watch};
use super::pump::Exit;
use super::replay::Replay;
use super::resume::Record;
use super::settled::LastSettled;
use crate::handler::Scope;
use crate::health::Slot;
use crate::outage::Breaker;
use crate::provision::{Advisories, StreamInstance};
use crate::registry::Consumer;
use crate::run::Ensured;
use crate::run::Inner;
use crate::telemetry::{ConsumerMetrics, consumer_label};
use topology_core::model::{AckMode, ConsumerKind, Delivery, Priority};

/// Progress acks are sent every half `ack_wait`, and no more often than this.
const PROGRESS_FLOOR: Duration = Duration::from_millis(100);

/// A push consumer's deletion is polled every pull expiry, and no more often than this.
const PUSH_GONE_POLL_FLOOR: Duration = Duration::from_secs(1);

/// What an ordered replay holds ahead and asks for in one pull request, unless `pull_batch`
/// is set: as async-nats' ordered consumer does.
const REPLAY_BATCH: usize = 500;

/// Opens a session of a provisioned consumer: its feed, what its handlers share, and its flow
/// control, for `pump` to run until shutdown or loss; why not, when the consumer is lost
/// before.
pub(super) async fn open(
    inner: &Arc<Inner>,
    // The consumer, and its index in the topology.
    (index, consumer): (usize, &Consumer),
    slot: &Arc<Slot>,
    // The consumer as ensured, where its session records what it handled (to resume after it
    // when re-created), the stream instance it reads, and a queue consumer's outage breaker.
    (ensured, record, instance, breaker): (
        Box<Ensured>,
        Record,
        &StreamInstance,
        Option<Arc<Breaker>>,
    ),
    cancel: &CancellationToken,
    // Where stopped handlers leave their messages, and how the consumer's sessions last
    // settled (used if it delivers one message at a time).
    (stopped, settled): (&Stopped, &LastSettled),
) -> Result<(Feed, Arc<Session>, Flow), Exit> {
    let info = ensured.consumer;
    let settings = &inner.settings;
    let js = inner.ensurer.provisioner().jetstream().clone();
    let queue = consumer.decl.as_queue();
    let relay = match consumer.decl.kind {
        ConsumerKind::Broadcast(relay) => Some(relay),
        ConsumerKind::Queue(_) => None,
    };
    let max_deliver = u64::try_from(info.config.max_deliver)
        .ok()
        .filter(|n| *n > 0);
    // A partition reads its next message ahead (see `early`), unless turned off.
    let early = consumer
        .partition
        .and_then(|partition| partition.key)
        .filter(|_| settings.partitions_early && info.config.max_ack_pending == 1)
        .filter(|_| queue.is_some_and(|q| q.delivery != Delivery::Push))
        .and_then(|key| {
            let filter = consumer.decl.subjects.first()?;
            let capacity = inner.shares.capacity(index)?;
            let api = inner.ensurer.provisioner().jetstream_api().prefix();
            Early::new((&js, &api), (&info.stream_name, filter), key, capacity)
        })
        .map(Box::new);
    let session = Arc::new(Session {
        handler: consumer.handler.clone(),
        scope: Arc::new(Scope {
            stream: info.stream_name.clone(),
            consumer: info.name.clone(),
            stream_epoch: crate::handler::stream_epoch(&instance.created),
            common: inner.common.clone(),
        }),
        max_deliver,
        // The declared backoff (never sent to the server: there it would replace ack_wait).
        backoff: queue.map(|q| q.backoff.to_vec()).unwrap_or_default(),
        redelivery: settings.redelivery,
        dead_letter: queue.and_then(|q| q.dead_letter).map(|subject| DeadLetter {
            subject,
            retry: settings.dead_letter,
            attempts: settings.dead_letter_attempts,
        }),
        stopped: stopped.clone(),
        observer: Observer {
            slot: slot.clone(),
            metrics: ConsumerMetrics::new(&info.stream_name, consumer_label(&consumer.decl)),
            record,
        },
        acks: Acks {
            // Relays have no setting: their consumer dies with the instance (see `AckMode`).
            confirm: (queue.map(|q| q.ack.unwrap_or(settings.ack)) == Some(AckMode::Confirmed))
                .then(|| {
                    Box::new(Confirm {
                        client: inner.common.client.clone(),
                        attempt: inner.ensurer.policy().request_timeout,
                    })
                }),
            ack_wait: info.config.ack_wait,
            progress_every: (info.config.ack_wait / 2).max(PROGRESS_FLOOR),
            none: info.config.ack_policy == consumer::AckPolicy::None,
            last: (info.config.max_ack_pending == 1).then(|| settled.clone()),
        },
        in_order: relay.is_some_and(|r| r.in_order()),
        replay: relay
            .filter(|r| r.ordered)
            .map(|_| Replay::new(info.delivered.consumer_sequence)),
        breaker,
        early,
    });
    if session.replay.is_some() {
        slot.replay_from(info.num_pending);
    }
    let concurrency = consumer.decl.effective_concurrency().max(1) as usize;
    // An ordered replay reads a consumer of its own, which no other instance could take
    // messages from, and takes no acks: it holds a batch ahead whatever its handler's pace.
    let replay_batch = session.replay.as_ref().map(|_| REPLAY_BATCH);
    let pull_batch = settings.pull_batch.or(replay_batch);
    let flow = Flow::new(concurrency, pull_batch, settings.pull_ahead);
    let push = queue.is_some_and(|q| q.delivery == Delivery::Push);
    let feed = if push {
        let handle = match push::Config::try_from_consumer_config(info.config.clone()) {
            Ok(config) => consumer::Consumer::new(config, info, js.clone()),
            Err(e) => {
                return Err(Exit::Lost(Loss::Client(format!(
                    "not a push consumer: {e}"
                ))));
            }
        };
        // A queue subscription on the deliver subject, in the consumer's deliver group.
        let messages = match Box::pin(handle.messages()).await {
            Ok(m) => m,
            Err(e) => {
                return Err(Exit::Lost(Loss::Client(format!(
                    "could not subscribe: {e}"
                ))));
            }
        };
        let every = settings.expires.max(PUSH_GONE_POLL_FLOOR);
        let gone = consumer_gone(js, session.scope.clone(), every, cancel.clone());
        Feed::Push(Box::new(Pusher::new(messages, gone)))
    } else {
        let first = flow.want(0, 0);
        // With confirmed acks, a message is confirmed only before its ack_wait could have run
        // out counted from when its pull request was sent: a request that expires within half
        // of it leaves a message at least that half.
        let expires = match session.acks.confirm {
            Some(_) => settings.expires.min(session.acks.ack_wait / 2),
            None => settings.expires,
        };
        let declared = queue.and_then(|q| q.priority);
        // A pinned session keeps its pin by asking again within `pinned_ttl`: its requests
        // expire within half of it.
        let expires = match declared {
            Some(Priority::PinnedClient { ttl }) => expires.min(ttl / 2),
            _ => expires,
        };
        let spill_over = queue.is_some_and(|q| inner.spill_over.iter().any(|g| g == q.group));
        let priority = PullPriority::of(declared.as_ref(), spill_over);
        let api = inner.ensurer.provisioner().jetstream_api();
        // Only a consumer with more than one replica elects a leader while it runs: one with
        // a single replica spends no subscription (nor its bytes) on elections.
        let replicated = info.config.num_replicas > 1
            || info
                .cluster
                .as_ref()
                .is_some_and(|c| !c.replicas.is_empty());
        let watch = Watch {
            slot: slot.clone(),
            only_reader: relay.is_some(),
            stalls: session.observer.metrics.stalls.clone(),
            advisories: if replicated {
                Advisories::of(api)
            } else {
                Advisories::None
            },
            last: session.acks.last.clone(),
        };
        match Box::pin(Puller::start(
            inner.common.clone(),
            (&api.prefix(), &info),
            (first, expires),
            settings,
            (watch, priority, consumer.partition.is_some()),
        ))
        .await
        {
            Ok(puller) => Feed::Pull(puller),
            Err(loss) => return Err(Exit::Lost(loss)),
        }
    };
    Ok((feed, session, flow))
}
