//! Serving one core subscription (`SubscriptionDecl`): `queue_subscribe` in its group, or
//! `subscribe` on every instance; at most its concurrency of handlers at once in this task
//! (the loop in `bounded.rs`); a handler's error or panic counted and logged (nothing is
//! answered). Proven on the server by a probe subject of its own; subscribed again every
//! heartbeat while the server refuses it (`refused.rs`). On shutdown it drains the
//! subscription (no new messages) and handles what it received within the grace period.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use async_nats::{Message, Subscriber};
use futures::FutureExt;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::bounded::{self, Bounds, Ended, Stopping};
use super::probe::Prober;
use super::refused::{self, Refusable};
use crate::handler::panic_message;
use crate::health::{ServeSlot, ServingState};
use crate::registry::Subscription;
use crate::run::Inner;
use crate::service::{Request, RequestContext, RequestScope};
use crate::telemetry::{self, SubscriptionMetrics};
use topology_core::service::Fanout;

/// Serves the subscription at `index` of the topology until shutdown.
pub(in crate::run) async fn serve_subscription(
    inner: Arc<Inner>,
    index: usize,
    cancel: CancellationToken,
) {
    let declared = &inner.ensurer.topology().subscriptions()[index];
    let slot = inner.health.subscriptions[index].clone();
    let policy = *inner.ensurer.policy();
    let mut backoff = policy.backoff_until(None);
    loop {
        slot.transition(ServingState::Subscribing);
        let subscribed = tokio::select! {
            subscribed = subscribe(&inner, declared) => subscribed,
            _ = cancel.cancelled() => break,
        };
        let failure = match subscribed {
            Ok((subscriber, mut prober)) => {
                let began = tokio::time::Instant::now();
                let (to_dispatch, accepted) = mpsc::unbounded_channel();
                let refusable = [Refusable {
                    slot: slot.clone(),
                    subject: declared.decl.subject.to_owned(),
                    queue: match declared.decl.fanout {
                        Fanout::Group(group) => Some(group.to_owned()),
                        Fanout::EachInstance => None,
                    },
                    to_dispatch,
                }];
                let probe = prober.subject();
                let dispatch = dispatch(&inner, declared, (subscriber, accepted), &slot, &cancel);
                let drained = tokio::select! {
                    drained = dispatch => drained,
                    never = prober.keep_proving(|state| slot.transition_live(state)) => match never {},
                    never = refused::subscribe_again_when_granted(
                        &inner.common.client,
                        &refusable,
                        probe,
                        inner.settings.heartbeat,
                    ) => match never {},
                };
                if drained {
                    break;
                }
                if began.elapsed() >= policy.cap {
                    backoff.reset();
                }
                format!(
                    "the subscription to `{}` ended unasked (the connection was closed)",
                    declared.decl.subject
                )
            }
            Err(e) => e,
        };
        let delay = backoff.fail().unwrap_or(policy.cap);
        slot.transition(ServingState::Retrying {
            attempt: backoff.failures(),
            error: format!("{failure}; subscribing again in {delay:?}"),
        });
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = cancel.cancelled() => break,
        }
    }
    slot.transition(ServingState::Stopped { error: None });
}

/// Subscribes, then sets up the probe (subscribed after, so that its proof covers both).
async fn subscribe(inner: &Inner, declared: &Subscription) -> Result<(Subscriber, Prober), String> {
    let decl = &declared.decl;
    let subscribed = match decl.fanout {
        Fanout::Group(group) => {
            inner
                .common
                .client
                .queue_subscribe(decl.subject, group.to_owned())
                .await
        }
        Fanout::EachInstance => inner.common.client.subscribe(decl.subject).await,
    };
    let subscriber = subscribed.map_err(|e| {
        format!(
            "could not subscribe `{}` to `{}`: {e}",
            decl.handler, decl.subject
        )
    })?;
    let prober = Prober::with_echo(&inner.common.client, &inner.settings)
        .await
        .map_err(|e| format!("could not subscribe the probe of `{}`: {e}", decl.subject))?;
    Ok((subscriber, prober))
}

/// Handles messages until shutdown (`true`, after the drain) or until the subscription ends
/// unasked (`false`, after the running handlers finished); a subscription from `accepted`
/// replaces a refused one.
async fn dispatch(
    inner: &Inner,
    declared: &Subscription,
    (mut subscriber, mut accepted): (Subscriber, mpsc::UnboundedReceiver<Subscriber>),
    slot: &ServeSlot,
    cancel: &CancellationToken,
) -> bool {
    let decl = &declared.decl;
    let scope = Arc::new(RequestScope::new(
        "",
        decl.handler,
        inner.common.state.clone(),
        inner.common.client.clone(),
        inner.ensurer.provisioner().jetstream().clone(),
    ));
    let metrics = SubscriptionMetrics::new(decl.subject);
    let bounds = Bounds {
        concurrency: decl.effective_concurrency().max(1) as usize,
        grace: inner.settings.grace_period,
    };
    let grace = bounds.grace;
    let scope = &scope;
    let ended = bounded::dispatch(
        &mut subscriber,
        &mut accepted,
        bounds,
        cancel,
        |message| handle(message, declared, scope),
        |ok| slot.handled(&metrics, ok),
        |stopping| match stopping {
            Stopping::Unsubscribing => slot.transition(ServingState::Draining),
            // No new messages; what was received is still handed out, then the stream ends.
            Stopping::Unsubscribed(Ok(())) => {}
            Stopping::Unsubscribed(Err(e)) => {
                tracing::warn!(subject = decl.subject, error = %e, "could not unsubscribe");
            }
        },
    )
    .await;
    match ended {
        Ended::Closed => false,
        Ended::Drained => true,
        Ended::OutOfTime { running } => {
            tracing::warn!(
                subject = decl.subject,
                handler = decl.handler,
                running,
                ?grace,
                "the grace period ran out: stopping the handlers still running"
            );
            true
        }
    }
}

/// Runs the handler on one message; whether it succeeded.
async fn handle(message: Message, declared: &Subscription, scope: &Arc<RequestScope>) -> bool {
    let decl = &declared.decl;
    let span = tracing::info_span!(
        "message",
        handler = decl.handler,
        subject = %message.subject,
    );
    telemetry::continue_trace(&span, message.headers.as_ref());
    let request = Request::new(
        message.payload.clone(),
        RequestContext::new(&message, scope.clone()),
    );
    let called = std::panic::catch_unwind(AssertUnwindSafe(|| (declared.handler)(request)));
    let handled = match called {
        Ok(future) => {
            AssertUnwindSafe(future)
                .catch_unwind()
                .instrument(span.clone())
                .await
        }
        Err(panic) => Err(panic),
    };
    let _entered = span.enter();
    match handled {
        Ok(Ok(())) => true,
        Ok(Err(error)) => {
            tracing::warn!(error = %error, "the subscription handler failed");
            false
        }
        Err(panic) => {
            tracing::error!(panic = %panic_message(&panic), "the subscription handler panicked");
            false
        }
    }
}
