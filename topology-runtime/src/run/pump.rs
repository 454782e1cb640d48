//! Flow control: how many messages a consumer holds and starts at once. At most
//! `concurrency` handlers run; a pull feed asks for no more than there is room for; handlers
//! run inline at a concurrency of one (no task per message), else as tasks.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, AckKind};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::dispatch::{Settle, dispatch};
use super::feed::Feed;
use crate::health::{ConsumerState, Slot};

/// Why consuming stopped.
pub(super) enum Exit {
    /// Shutdown: drained.
    Drained,
    /// The consumer, its stream or the connection was lost: ensure again and resume.
    Lost(String),
}

/// A drain's grace period ran out while a handler ran inline.
struct Overdue;

/// Reads messages and dispatches them, at most `concurrency` at once, until shutdown or loss.
/// Handlers started here go into `in_flight`, which outlives this session.
pub(super) async fn pump(
    mut feed: Feed,
    settle: Arc<Settle>,
    concurrency: usize,
    cancel: &CancellationToken,
    in_flight: &mut JoinSet<()>,
    grace: Duration,
) -> Exit {
    let capacity = feed.capacity(concurrency);
    // Received and not started yet: normally one message, started at once; more only when a
    // pull batch larger than the concurrency is set.
    let mut waiting: VecDeque<jetstream::Message> = VecDeque::new();
    let exit = 'session: loop {
        while in_flight.try_join_next().is_some() {}
        while in_flight.len() < concurrency
            && let Some(message) = waiting.pop_front()
        {
            let started = if concurrency == 1 {
                run_inline(message, &settle, cancel, grace).await
            } else {
                in_flight.spawn(dispatch(message, settle.clone()));
                Ok(())
            };
            if let Err(Overdue) = started {
                break 'session Exit::Drained;
            }
        }
        let room = capacity.saturating_sub(in_flight.len() + waiting.len());
        let readable = feed.asks() || in_flight.len() < concurrency;
        let next = tokio::select! {
            biased;
            _ = cancel.cancelled() => break Exit::Drained,
            // A handler finished: there is room for more.
            Some(_) = in_flight.join_next(), if !in_flight.is_empty() => continue,
            next = feed.next(room), if readable => next,
        };
        match next {
            // Started at the top of the loop, as soon as there is room.
            Ok(message) => waiting.push_back(message),
            Err(reason) => break Exit::Lost(reason),
        }
    };
    if matches!(exit, Exit::Drained) {
        settle.slot.transition(ConsumerState::Draining);
    }
    // Hand back what was received but not started, so that another instance takes it at once.
    waiting.extend(feed.close().await);
    for message in waiting {
        if let Err(e) = message.ack_with(AckKind::Nak(None)).await {
            tracing::warn!(error = %e, "could not return an unstarted message");
        }
    }
    exit
}

/// Runs one handler inline; [`Overdue`] when a drain's grace period ran out first (the handler
/// is dropped; its message is recorded as abandoned and returned by the drain).
async fn run_inline(
    message: jetstream::Message,
    settle: &Arc<Settle>,
    cancel: &CancellationToken,
    grace: Duration,
) -> Result<(), Overdue> {
    let overdue = async {
        cancel.cancelled().await;
        // Visible at once, even while this handler keeps the consumer busy.
        settle.slot.transition(ConsumerState::Draining);
        tokio::time::sleep(grace).await;
    };
    tokio::select! {
        _ = dispatch(message, settle.clone()) => Ok(()),
        _ = overdue => {
            warn_overdue(&settle.slot, 1, grace);
            Err(Overdue)
        }
    }
}

/// Waits (within the grace period) for the handlers still running; the ones still running
/// after it are stopped (their messages are recorded as abandoned, see `dispatch`).
pub(super) async fn finish_in_flight(in_flight: &mut JoinSet<()>, grace: Duration, slot: &Slot) {
    let finished = tokio::time::timeout(grace, async {
        while in_flight.join_next().await.is_some() {}
    })
    .await;
    if finished.is_err() {
        warn_overdue(slot, in_flight.len(), grace);
        in_flight.abort_all();
        while in_flight.join_next().await.is_some() {}
    }
}

fn warn_overdue(slot: &Slot, still_running: usize, grace: Duration) {
    tracing::warn!(
        stream = %slot.stream,
        consumer = %slot.consumer,
        still_running,
        ?grace,
        "handlers still running after the grace period; stopping them and returning their messages"
    );
}
