//! Serving one declared service: its micro protocol instance (`micro.rs` answers `$SRV.PING`,
//! `$SRV.INFO` and `$SRV.STATS` with what the endpoints answered), a queue subscription and a
//! dispatch task per endpoint, and the link proven through the instance's own
//! `$SRV.PING.<name>.<id>`; an endpoint whose subscription the server refused subscribes again
//! every heartbeat until it is accepted (`refused.rs`). Started again with backoff when a
//! session is lost; on shutdown, every endpoint drains and answers what it received before
//! the instance stops.

use std::collections::HashMap;
use std::sync::Arc;
use tokio::time::Instant;

use async_nats::Subscriber;
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::answer::EndpointShared;
use super::endpoint::{EndpointExit, EndpointTask};
use super::micro::{Described, EndpointStats, Instance};
use super::probe::Prober;
use super::refused::{self, Refusable};
use crate::codec::CodecId;
use crate::health::{ServeSlot, ServingState};
use crate::outage::Breaker;
use crate::run::Inner;
use crate::service::RequestScope;
use crate::telemetry::EndpointMetrics;
use topology_core::service::ServiceDecl;

/// Serves the service at `index` of the topology until shutdown.
pub(in crate::run) async fn serve_service(
    inner: Arc<Inner>,
    index: usize,
    cancel: CancellationToken,
) {
    let topology = inner.ensurer.topology();
    let decl = topology.services()[index];
    // Its endpoints, by index in the topology (and in health).
    let members: Vec<usize> = topology
        .endpoints()
        .iter()
        .enumerate()
        .filter(|(_, e)| *e.decl.service == decl)
        .map(|(i, _)| i)
        .collect();
    let slots: Vec<Arc<ServeSlot>> = members
        .iter()
        .map(|i| inner.health.endpoints[*i].clone())
        .collect();
    let set = |state: ServingState| {
        for slot in &slots {
            slot.transition(state.clone());
        }
    };
    let policy = *inner.ensurer.policy();
    let mut backoff = policy.backoff_until(None);
    loop {
        set(ServingState::Subscribing);
        // Not cancelled midway: subscribing only queues commands on the client, and a
        // started micro instance must be stopped (dropping it leaves its `$SRV` task running).
        let started = start(&inner, &decl, &members).await;
        let failure = match started {
            Ok((service, _)) if cancel.is_cancelled() => {
                service.stop();
                break;
            }
            Ok((service, endpoints)) => {
                let began = Instant::now();
                match run(&inner, &decl, service, endpoints, &slots, &cancel).await {
                    None => break,
                    Some(lost) => {
                        if began.elapsed() >= policy.cap {
                            backoff.reset();
                        }
                        lost
                    }
                }
            }
            Err(e) => e,
        };
        let delay = backoff.fail().unwrap_or(policy.cap);
        set(ServingState::Retrying {
            attempt: backoff.failures(),
            error: format!("{failure}; starting it again in {delay:?}"),
        });
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = cancel.cancelled() => break,
        }
    }
    set(ServingState::Stopped { error: None });
}

/// A subscribed endpoint: its index in the topology and its subscription.
type Subscribed = (usize, Subscriber);

/// Subscribes the endpoints, then starts the micro protocol instance that reports them.
async fn start(
    inner: &Inner,
    decl: &ServiceDecl,
    members: &[usize],
) -> Result<(Instance, Vec<Subscribed>), String> {
    let mut endpoints = Vec::with_capacity(members.len());
    let mut stats = Vec::with_capacity(members.len());
    for &index in members {
        let endpoint = &inner.ensurer.topology().endpoints()[index].decl;
        // Counted from here: what this instance answers.
        stats.push(Arc::new(EndpointStats::new(
            inner.health.endpoints[index].clone(),
            endpoint.name,
            endpoint.subject,
            endpoint.queue_group(),
            endpoint.metadata,
        )));
        // Dropped on an error below: unsubscribed.
        let subscriber = inner
            .common
            .client
            .queue_subscribe(endpoint.subject, endpoint.queue_group().to_owned())
            .await
            .map_err(|e| {
                format!(
                    "could not subscribe endpoint `{}` of service `{}` to `{}` (queue group \
                     `{}`): {e}",
                    endpoint.name,
                    decl.name,
                    endpoint.subject,
                    endpoint.queue_group()
                )
            })?;
        endpoints.push((index, subscriber));
    }
    let described = Described {
        name: decl.name,
        version: decl.version,
        description: decl.description,
        metadata: decl.metadata,
    };
    let instance = Instance::start(&inner.common.client, &described, stats)
        .await
        .map_err(|e| {
            format!(
                "could not start service `{}` {} (subscribing to `$SRV.*`): {e}",
                decl.name, decl.version
            )
        })?;
    Ok((instance, endpoints))
}

/// Runs a started service until shutdown (`None`, after its drain) or until an endpoint's
/// subscription ends unasked (`Some(why)`, after answering what the others received).
async fn run(
    inner: &Inner,
    decl: &ServiceDecl,
    service: Instance,
    endpoints: Vec<Subscribed>,
    slots: &[Arc<ServeSlot>],
    cancel: &CancellationToken,
) -> Option<String> {
    let topology = inner.ensurer.topology();
    let jetstream = inner.ensurer.provisioner().jetstream().clone();
    let stop = CancellationToken::new();
    let unsubscribed = Arc::new(Semaphore::new(0));
    let mut tasks = JoinSet::new();
    let mut names = HashMap::new();
    let mut refusable = Vec::with_capacity(endpoints.len());
    for (index, subscriber) in endpoints {
        let declared = &topology.endpoints()[index];
        let (to_dispatch, accepted) = mpsc::unbounded_channel();
        refusable.push(Refusable {
            slot: inner.health.endpoints[index].clone(),
            subject: declared.decl.subject.to_owned(),
            queue: Some(declared.decl.queue_group().to_owned()),
            to_dispatch,
        });
        let task = EndpointTask {
            subscriber,
            accepted,
            shared: EndpointShared {
                handler: declared.handler.clone(),
                scope: Arc::new(RequestScope::new(
                    decl.name,
                    declared.decl.name,
                    inner.common.state.clone(),
                    inner.common.client.clone(),
                    jetstream.clone(),
                )),
                timeout: declared.decl.timeout,
                content_type: match declared.decl.codec {
                    CodecId::Json | CodecId::Raw => None,
                    codec => Some(codec.content_type()),
                },
                breaker: (inner.settings.outage.failures > 0).then(|| {
                    (
                        Arc::new(Breaker::new(inner.settings.outage)),
                        inner.health.endpoints[index].clone(),
                    )
                }),
            },
            slot: inner.health.endpoints[index].clone(),
            metrics: EndpointMetrics::new(decl.name, declared.decl.name),
            concurrency: declared.decl.effective_concurrency().max(1) as usize,
            grace: inner.settings.grace_period,
            unsubscribed: unsubscribed.clone(),
        };
        let handle = tasks.spawn(task.run(stop.clone()));
        names.insert(handle.id(), declared.decl.name);
    }
    let mut prober = Prober::answered_by_others(
        &inner.common.client,
        format!("$SRV.PING.{}.{}", decl.name, service.id()),
        &inner.settings,
    );
    let probe = prober.subject();
    let lost = tokio::select! {
        _ = cancel.cancelled() => None,
        Some(ended) = tasks.join_next_with_id() => Some(match ended {
            Ok((id, _)) => format!(
                "endpoint `{}` of service `{}` stopped receiving: its subscription ended (the \
                 connection was closed)",
                names.get(&id).copied().unwrap_or_default(),
                decl.name
            ),
            Err(e) => format!(
                "the dispatch of endpoint `{}` of service `{}` ended abnormally: {e}",
                names.get(&e.id()).copied().unwrap_or_default(),
                decl.name
            ),
        }),
        never = prober.keep_proving(|state| {
            for slot in slots {
                slot.transition_live(state.clone());
            }
        }) => match never {},
        never = refused::subscribe_again_when_granted(
            &inner.common.client,
            &refusable,
            probe,
            inner.settings.heartbeat,
        ) => match never {},
    };
    stop.cancel();
    // Draining once the server routes nothing new here: every endpoint unsubscribed, and a
    // round trip after that proves the server processed it (the other instances of the queue
    // groups take the new requests from then on).
    let count = u32::try_from(names.len()).unwrap_or(u32::MAX);
    let proven = tokio::time::timeout(crate::run::CLEANUP_WAIT, async {
        let _ = unsubscribed.acquire_many(count).await;
        prober.round_trip().await
    })
    .await;
    if !matches!(proven, Ok(Ok(_))) {
        tracing::warn!(
            service = decl.name,
            "could not prove that the endpoints are unsubscribed on the server; draining anyway"
        );
    }
    for slot in slots {
        slot.transition(ServingState::Draining);
    }
    while let Some(joined) = tasks.join_next_with_id().await {
        match joined {
            Ok((_, EndpointExit::Drained)) => {}
            Ok((id, EndpointExit::Closed)) => tracing::debug!(
                service = decl.name,
                endpoint = names.get(&id).copied().unwrap_or_default(),
                "the endpoint's subscription had ended"
            ),
            Err(e) => tracing::error!(
                service = decl.name,
                endpoint = names.get(&e.id()).copied().unwrap_or_default(),
                error = %e,
                "an endpoint's dispatch ended abnormally while draining"
            ),
        }
    }
    // Answers `$SRV.*` no more.
    service.stop();
    lost
}
