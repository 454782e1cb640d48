//! Supervision: one task per consumer that ensures it, consumes, re-ensures it after any loss
//! (with backoff, never giving up), and drains it on shutdown.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::ack::Stopped;
use super::floor::follow_ack_floor;
use super::open::open;
use super::pump::{Exit, finish_in_flight, pump};
use super::relay::{ensure_relay, unanswered_create};
use super::resume::Resume;
use super::settled::LastSettled;
use crate::health::{ConsumerState, Slot};
use crate::outage::Breaker;
use crate::provision::{ApiError, ProvisionError, ProvisionErrorKind, UpdateMode};
use crate::run::Inner;
use crate::run::relay_name;
use topology_core::model::ConsumerKind;

/// Supervises the consumer at `index` until shutdown, or until a failure no retry fixes
/// (sent to `fatal` after its drain).
pub(in crate::run) async fn supervise(
    inner: Arc<Inner>,
    index: usize,
    cancel: CancellationToken,
    fatal: mpsc::UnboundedSender<ProvisionError>,
) {
    let consumer = &inner.ensurer.topology().consumers()[index];
    let slot = inner.health.slots[index].clone();
    let relay = match consumer.decl.kind {
        ConsumerKind::Broadcast(_) => Some(relay_name(&inner.instance, index)),
        ConsumerKind::Queue(_) => None,
    };
    let stream = consumer.decl.stream.name();
    // An ordered replay never reads on from a consumer it has read before: its deliveries
    // since the last one handled may be out of order. Each session after the first begins on
    // a consumer created again after the last message handled (see `replay`).
    let ordered = matches!(consumer.decl.kind, ConsumerKind::Broadcast(r) if r.ordered);
    // Retiring the old consumer of a migration is provisioning: an operator's, when bind-only.
    let migrated_from = consumer
        .decl
        .as_queue()
        .and_then(|q| q.moves_from())
        .filter(|_| !inner.ensurer.provisioner().is_bind_only());
    let policy = inner.ensurer.policy();
    let mut backoff = policy.backoff_until(None);
    // Where a consumer re-created after a loss resumes, and in which stream instance.
    let resume = Resume::new(relay.is_some());
    let mut ensured_once = false;
    // A queue consumer's outage breaker outlives its sessions: a session lost while it is
    // open starts open.
    let breaker = consumer
        .decl
        .as_queue()
        .map(|_| Arc::new(Breaker::new(inner.settings.outage)));
    // A relay's consumer is deleted and created again from the relay's resume point (rather
    // than bound again) after a loss that calls for it, an ordered replay's after every loss
    // (see `Loss::recreates`), and after a create that went unanswered (see `relay`).
    let mut recreate = false;
    // The last ensure was refused by the server's permissions: its error.
    let mut denied: Option<(String, Option<String>)> = None;
    // Handlers outlive the session that started them: a lost consumer is re-ensured at once,
    // while they finish and settle their messages (their acks go to the same durable).
    let mut in_flight = JoinSet::new();
    let stopped = Stopped::default();
    // How a consumer that delivers one message at a time last settled, and what its handlers
    // run: its sessions share it, as they share `in_flight` (see `settled`).
    let settled = match consumer.partition {
        Some(partition) => LastSettled::partition(partition.key),
        None => LastSettled::default(),
    };
    // A failure no retry can fix ends the loop too, through the same drain.
    // Boxed, as the ensure's error below: this task keeps room for it as long as it lives.
    let mut stopped_by: Option<Box<ProvisionError>> = None;
    // The consumer a partitioned group migrates from is gone: nothing is left to read.
    let mut retired = false;
    loop {
        slot.transition(ConsumerState::Provisioning);
        let admitted = tokio::select! {
            admitted = inner.ensurer.admit() => admitted,
            _ = cancel.cancelled() => break,
        };
        // Boxed, as every future below that is awaited only now and then: inline, each would
        // hold its bytes in this task for as long as the consumer lives.
        let ensure = Box::pin(async {
            // Updates happen at start-up only; a re-ensure after a loss creates but never
            // updates, so an old instance cannot revert a newer one's configuration.
            let mode = if ensured_once {
                UpdateMode::CreateOnly {
                    resume: resume.point(),
                }
            } else {
                UpdateMode::Update
            };
            // Boxed: the consumer's info (about 1 KB) then stays in the memory the session
            // opens in, not in this task's for its lifetime.
            match relay.as_deref() {
                Some(name) => ensure_relay(&inner, consumer, name, recreate, &mode).await,
                None => inner.ensurer.ensure(consumer, None, &mode).await,
            }
            .map(Box::new)
            .map_err(Box::new)
        });
        let ensured = tokio::select! {
            r = ensure => r,
            _ = cancel.cancelled() => break,
        };
        drop(admitted);
        let mut at_once = false;
        let failure = match ensured {
            Ok(ensured) => {
                ensured_once = true;
                let (info, instance) = (&ensured.consumer, ensured.stream.clone());
                let (floor, record) = resume.begin(&instance, info);
                if relay.is_none() {
                    slot.ack_floor.store(floor, Ordering::Relaxed);
                }
                let (stream_name, name) = (info.stream_name.clone(), info.name.clone());
                let session_consumer = info.created.to_string();
                let session = tokio::time::Instant::now();
                // The old consumer of a migration: deleted once nobody pulls from it.
                let retire = migrated_from.map(|old| {
                    Box::pin(inner.ensurer.provisioner().retire(
                        &stream_name,
                        old,
                        inner.settings.expires,
                    ))
                });
                // The session is opened in memory of its own, freed once it pumps: what the
                // pump runs in is all that stays for the session's lifetime.
                let opening = Box::pin(open(
                    &inner,
                    (index, consumer),
                    &slot,
                    (ensured, record, &instance, breaker.clone()),
                    &cancel,
                    (&stopped, &settled),
                ));
                let consuming = Box::pin(async {
                    match opening.await {
                        Ok((feed, session, flow)) => {
                            // Running once the server delivers to this instance: a pull
                            // feed's first request reached the consumer, a push feed's
                            // subscription is in place.
                            slot.up();
                            let grace = inner.settings.grace_period;
                            pump(feed, session, flow, (&cancel, grace), &mut in_flight).await
                        }
                        Err(exit) => exit,
                    }
                });
                let exit = tokio::select! {
                    exit = consuming => exit,
                    never = follow_ack_floor(
                        &inner,
                        (&stream_name, &name, &session_consumer),
                        &instance,
                        &resume,
                        &slot,
                    ), if relay.is_none() => match never {},
                    never = async move {
                        match retire {
                            Some(retire) => retire.await,
                            None => std::future::pending().await,
                        }
                    } => match never {},
                };
                match exit {
                    Exit::Drained => break,
                    Exit::Lost(reason) => {
                        Slot::count(&slot.restarts);
                        recreate = relay.is_some() && (ordered || reason.recreates());
                        // A session that ran for a while starts the backoff afresh; one lost
                        // at once keeps backing off.
                        if session.elapsed() >= policy.cap {
                            backoff.reset();
                        }
                        // A relay that ran is re-created at once: every broadcast published
                        // meanwhile waits for it in the stream, but a short gap is a short
                        // delay. Only the first attempt: a relay lost again at once backs off.
                        // So is the consumer a partitioned group migrates from, quietly:
                        // deleted once read to its end, it is found gone and retires.
                        if (relay.is_some() && reason.at_once() || consumer.superseded_by.is_some())
                            && session.elapsed() >= HEALTHY_SESSION
                        {
                            backoff.reset();
                            at_once = true;
                        }
                        reason.to_string()
                    }
                }
            }
            Err(e) if e.kind() == ProvisionErrorKind::PermissionDenied => {
                // The subject the server refused, until the denial watch names its entry.
                let refused = std::error::Error::source(&*e)
                    .and_then(|source| source.downcast_ref::<ApiError>())
                    .and_then(|api| match api {
                        ApiError::Denied { action, subject } => {
                            Some(format!("{} `{subject}`", action.as_str()))
                        }
                        _ => None,
                    });
                denied = Some((e.to_string(), refused));
                e.to_string()
            }
            Err(e) if e.kind() == ProvisionErrorKind::Retired => {
                retired = true;
                break;
            }
            Err(e) if e.is_transient() => {
                recreate |= relay.is_some() && unanswered_create(&e);
                e.to_string()
            }
            Err(e) => {
                stopped_by = Some(e);
                break;
            }
        };
        // An ordered replay resumes after the last message handled: its handler still
        // running finishes first, so that the point is where it ends.
        if ordered {
            tokio::select! {
                _ = async { while in_flight.join_next().await.is_some() {} } => {}
                _ = cancel.cancelled() => break,
            }
        }
        // Without a deadline, a backoff always gives a delay.
        let delay = backoff.fail().unwrap_or(policy.cap);
        match denied.take() {
            // Refused creating or reading the consumer: `denied`, naming the entry to grant
            // (as the denial watch found it), and asked again with the backoff.
            Some((error, refused)) => {
                let permission = inner
                    .health
                    .shared
                    .denials
                    .all()
                    .into_iter()
                    .filter(|d| d.concerns(&slot.stream, consumer.decl.handler))
                    .find_map(|d| d.permission.map(|p| format!("{} `{p}`", d.action.as_str())))
                    .or(refused)
                    .unwrap_or_else(|| "the request named below".to_owned());
                slot.transition(ConsumerState::Denied {
                    permission,
                    cause: format!("{error}; asked again in {delay:?}"),
                });
            }
            None if at_once && consumer.superseded_by.is_some() => {}
            None => slot.transition(ConsumerState::Retrying {
                attempt: backoff.failures(),
                error: failure,
            }),
        }
        if at_once {
            continue;
        }
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            // A relay's ensure(): retry at once.
            _ = slot.wake.notified() => {}
            _ = cancel.cancelled() => break,
        }
    }
    match &stopped_by {
        Some(e) => slot.transition(ConsumerState::Stopped {
            error: Some(e.to_string()),
        }),
        None => slot.transition(ConsumerState::Draining),
    }
    Box::pin(finish_in_flight(
        &mut in_flight,
        inner.settings.grace_period,
        &slot,
    ))
    .await;
    // Handlers stopped by the grace period settled nothing: return their messages now rather
    // than after their ack_wait.
    Box::pin(stopped.return_all(&inner.common.client)).await;
    if let Some(relay) = &relay {
        let deleted = tokio::time::timeout(
            crate::run::CLEANUP_WAIT,
            Box::pin(inner.ensurer.provisioner().delete_consumer(stream, relay)),
        )
        .await;
        let error = match deleted {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(e.to_string()),
            Err(_) => Some(format!("no answer within {:?}", crate::run::CLEANUP_WAIT)),
        };
        if let Some(error) = error {
            tracing::warn!(stream, consumer = %relay, error, "could not delete the relay on shutdown; the server reaps it after its inactivity threshold");
        }
    }
    match stopped_by {
        Some(e) => {
            let _ = fatal.send(*e);
        }
        None if retired && !cancel.is_cancelled() => slot.transition(ConsumerState::Retired),
        None => slot.transition(ConsumerState::Stopped { error: None }),
    }
}

/// A relay session that ran this long was not lost at once: its loss is re-ensured without
/// waiting.
const HEALTHY_SESSION: Duration = Duration::from_secs(1);
