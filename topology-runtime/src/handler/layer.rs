//! `tower` layers around a consumer's handler (feature `tower`): what a layer wraps
//! ([`HandlerService`]), the handler's error as a layer sees it ([`Failed`]), and how a
//! layer's error settles the message ([`settle_error`]). `RuntimeBuilder::layer` installs
//! them; a handler without a layer is called as before, with nothing in between.

use std::error::Error as StdError;
use std::fmt;
use std::sync::Arc;

use tower::Service;

use super::{BatchInput, BatchOutcomes, HandlerError, Incoming, SharedBatchHandler, SharedHandler};
use crate::stack::{self, LayerFn};
pub use crate::stack::{BoxError, StackFuture, Stacked};

/// What a consumer layer wraps: the handler, or the stack of the layers installed under this
/// one. Its request is the [`Incoming`] message (its payload, not yet decoded, and its
/// [`Context`](super::Context): subject, headers, delivery count, stream sequence), its
/// response the handler's `Ok(())`, its error the handler's error as a boxed [`Failed`] (or an
/// inner layer's error).
pub type HandlerService = Stacked<Incoming, ()>;

/// A handler's error, as a `std::error::Error` for `tower`'s layers (whose errors are boxed);
/// the runtime unwraps it again, so it settles as the handler meant (permanent, unavailable).
#[derive(Debug)]
pub struct Failed(pub HandlerError);

impl fmt::Display for Failed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl StdError for Failed {}

/// A layer as the builder keeps it.
pub(crate) type HandlerLayer = LayerFn<Incoming, ()>;

/// `handler` behind `layers`, the first the outermost; `handler` itself without any.
pub(crate) fn layered(handler: SharedHandler, layers: &[HandlerLayer]) -> SharedHandler {
    if layers.is_empty() {
        return handler;
    }
    let service = stack::stack(
        move |incoming| {
            let handling = handler(incoming);
            Box::pin(async move { handling.await.map_err(|e| Failed(e).into()) })
        },
        layers,
    );
    Arc::new(move |incoming| {
        let handling = service.clone().call(incoming);
        Box::pin(async move { handling.await.map_err(settle_error) })
    })
}

/// What a batch layer wraps: the batch handler, or the stack of the batch layers installed
/// under this one. Its request is the [`BatchInput`] (the messages of one batch, not yet
/// decoded), its response each message's outcome; a batch handler's own failures are in
/// those outcomes, so its errors are the layers' alone.
pub type BatchService = Stacked<BatchInput, BatchOutcomes>;

/// A batch layer as the builder keeps it.
pub(crate) type BatchLayer = LayerFn<BatchInput, BatchOutcomes>;

/// `handler` behind `layers`, the first the outermost; `handler` itself without any. A
/// layer's error fails every message of the batch, as [`settle_error`] says.
pub(crate) fn batch_layered(
    handler: SharedBatchHandler,
    layers: &[BatchLayer],
) -> SharedBatchHandler {
    if layers.is_empty() {
        return handler;
    }
    let service = stack::stack(
        move |input| {
            let handling = handler(input);
            Box::pin(async move { Ok(handling.await) })
        },
        layers,
    );
    Arc::new(move |input: BatchInput| {
        let len = input.incoming().len();
        let handling = service.clone().call(input);
        Box::pin(async move {
            handling.await.unwrap_or_else(|error| {
                let error = settle_error(error);
                let text = error.to_string();
                let mut first = Some(error);
                (0..len)
                    .map(|_| {
                        Err(first
                            .take()
                            .unwrap_or_else(|| HandlerError::new(text.clone())))
                    })
                    .collect()
            })
        })
    })
}

/// How a layer's error settles the message: the handler's own error as the handler meant it;
/// a `tower::timeout` that elapsed, and a `tower::load_shed` refusal, as transient errors (the
/// message is redelivered after the consumer's backoff); anything else as a transient error
/// with the layer's message.
pub fn settle_error(error: BoxError) -> HandlerError {
    let error = match error.downcast::<Failed>() {
        Ok(failed) => return failed.0,
        Err(error) => error,
    };
    if error.is::<tower::timeout::error::Elapsed>() {
        HandlerError::new(format!(
            "a timeout layer stopped the handler ({error}): the message is redelivered"
        ))
    } else if error.is::<tower::load_shed::error::Overloaded>() {
        HandlerError::new(format!(
            "a load-shed layer refused the message ({error}): it is redelivered"
        ))
    } else {
        HandlerError::new(error)
    }
}
