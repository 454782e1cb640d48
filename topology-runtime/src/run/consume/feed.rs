//! Where a consumer's messages come from: a pull consumer through our own pull requests
//! (see `pull`), or a push consumer's queue subscription.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, consumer::push};
use futures::{FutureExt, StreamExt};
use tokio_util::sync::CancellationToken;

pub(in crate::run) use super::ack::Fetched;
use super::flow::Flow;
use super::loss::Loss;
use super::pull::Puller;
use crate::handler::Scope;

/// Where a consumer's messages come from.
pub(in crate::run) enum Feed {
    Pull(Box<Puller>),
    Push(Box<Pusher>),
}

impl Feed {
    /// Whether the server sends only what was asked for: a pull feed may be read while every
    /// handler is busy (it asks for no more than `flow` wants); a push feed may not.
    pub(in crate::run) fn asks(&self) -> bool {
        matches!(self, Feed::Pull(_))
    }

    /// Whether it feeds a partition's session (see `pull`).
    pub(in crate::run) fn is_partition(&self) -> bool {
        matches!(self, Feed::Pull(puller) if puller.is_partition())
    }

    /// Whether a partition's session checks its next delivery with the server first (see
    /// `pull::fence`): nothing runs before its delivery meanwhile.
    pub(in crate::run) fn is_suspect(&self) -> bool {
        matches!(self, Feed::Pull(puller) if puller.is_suspect())
    }

    /// The next message, or why the consumer is lost. `held`: how many messages this instance
    /// is running or holding; a pull feed asks the server for what `flow` wants on top of
    /// them. Cancel-safe.
    pub(in crate::run) async fn next(&mut self, flow: &Flow, held: usize) -> Result<Fetched, Loss> {
        match self {
            Feed::Pull(puller) => puller.next(flow, held).await,
            Feed::Push(pusher) => pusher
                .next()
                .await
                .map(|message| Fetched::new(message, tokio::time::Instant::now())),
        }
    }

    /// The next message if it is at hand and nothing needs doing first (a pull request to
    /// send): what [`Feed::next`] would return at once, without building a future. `None`:
    /// call [`Feed::next`].
    pub(in crate::run) fn ready(
        &mut self,
        flow: &Flow,
        held: usize,
    ) -> Option<Result<Fetched, Loss>> {
        match self {
            Feed::Pull(puller) => puller.ready(flow, held),
            Feed::Push(pusher) => pusher
                .ready()
                .map(|next| next.map(|message| Fetched::new(message, tokio::time::Instant::now()))),
        }
    }

    /// Stops receiving; returns what was received but not handed out (to be returned to the
    /// server).
    pub(in crate::run) async fn close(self) -> Vec<jetstream::Message> {
        match self {
            Feed::Pull(puller) => puller
                .close()
                .await
                .into_iter()
                .map(|f| f.message)
                .collect(),
            Feed::Push(pusher) => pusher.close(),
        }
    }
}

/// A push consumer's queue subscription, and a poll that notices the consumer's deletion
/// (a push subscription never reports it).
pub(in crate::run) struct Pusher {
    messages: push::Messages,
    gone: Pin<Box<dyn Future<Output = Loss> + Send>>,
}

impl Pusher {
    pub(in crate::run) fn new(
        messages: push::Messages,
        gone: impl Future<Output = Loss> + Send + 'static,
    ) -> Self {
        Pusher {
            messages,
            gone: Box::pin(gone),
        }
    }

    async fn next(&mut self) -> Result<jetstream::Message, Loss> {
        loop {
            let next = tokio::select! {
                biased;
                next = self.messages.next() => next,
                reason = &mut self.gone => return Err(reason),
            };
            if let Some(read) = Self::read(next) {
                return read;
            }
        }
    }

    /// The next message if one has arrived (see [`Feed::ready`]).
    fn ready(&mut self) -> Option<Result<jetstream::Message, Loss>> {
        loop {
            if let Some(read) = Self::read(self.messages.next().now_or_never()?) {
                return Some(read);
            }
        }
    }

    /// What the subscription gave: a message, the consumer lost, or nothing to report
    /// (`None`: read on).
    fn read(
        next: Option<Result<jetstream::Message, push::MessagesError>>,
    ) -> Option<Result<jetstream::Message, Loss>> {
        match next {
            Some(Ok(message)) => Some(Ok(message)),
            Some(Err(e)) => match e.kind() {
                push::MessagesErrorKind::ConsumerDeleted
                | push::MessagesErrorKind::PullBasedConsumer => {
                    Some(Err(Loss::PushFailed(e.to_string())))
                }
                // Grouped members see spurious missed heartbeats; deletion is polled.
                _ => None,
            },
            None => Some(Err(Loss::SubscriptionEnded("push"))),
        }
    }

    fn close(mut self) -> Vec<jetstream::Message> {
        let mut unstarted = Vec::new();
        while let Some(Some(next)) = self.messages.next().now_or_never() {
            if let Ok(message) = next {
                unstarted.push(message);
            }
        }
        unstarted
    }
}

/// Resolves when the consumer is gone from the server (checked `every`; push consumers never
/// report it).
pub(in crate::run) async fn consumer_gone(
    js: jetstream::Context,
    scope: Arc<Scope>,
    every: Duration,
    cancel: CancellationToken,
) -> Loss {
    let mut every = tokio::time::interval(every);
    every.tick().await;
    loop {
        tokio::select! {
            _ = every.tick() => {}
            _ = cancel.cancelled() => return std::future::pending().await,
        }
        if let Ok(stream) = js.get_stream_no_info(&scope.stream).await
            && let Err(e) = stream.consumer_info(&scope.consumer).await
            && matches!(
                e.kind(),
                jetstream::context::ConsumerInfoErrorKind::NotFound
                    | jetstream::context::ConsumerInfoErrorKind::StreamNotFound
            )
        {
            return Loss::Gone(format!("it disappeared from the server: {e}"));
        }
    }
}
