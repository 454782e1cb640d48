//! `tower` layers around an endpoint's handler (feature `tower`): what a layer wraps
//! ([`EndpointService`]), the handler's error as a layer sees it ([`Refused`]), and how a
//! layer's error is answered ([`answer_error`]). `RuntimeBuilder::endpoint_layer` installs
//! them; an endpoint without a layer is called as before, with nothing in between.

use std::error::Error as StdError;
use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use tower::Service;

use super::{ReplyFuture, Request, ServiceError};
use crate::stack::{self, BoxError, LayerFn, Stacked};

/// An endpoint's handler as the runtime holds it.
type Shared = Arc<dyn Fn(Request) -> ReplyFuture + Send + Sync + 'static>;

/// What an endpoint layer wraps: the handler, or the stack of the layers installed under this
/// one. Its request is the [`Request`] (payload, not yet decoded, and its
/// [`RequestContext`](super::RequestContext)), its response the reply's body, its error the
/// handler's [`ServiceError`] as a boxed [`Refused`] (or an inner layer's error).
pub type EndpointService = Stacked<Request, Bytes>;

/// An endpoint's error, as a `std::error::Error` for `tower`'s layers; answered as the
/// handler meant it.
#[derive(Debug)]
pub struct Refused(pub ServiceError);

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.0.code(), self.0.description())
    }
}

impl StdError for Refused {}

/// A layer as the builder keeps it.
pub(crate) type EndpointLayer = LayerFn<Request, Bytes>;

/// `handler` behind `layers`, the first the outermost; `handler` itself without any.
pub(crate) fn layered(handler: Shared, layers: &[EndpointLayer]) -> Shared {
    if layers.is_empty() {
        return handler;
    }
    let service = stack::stack(
        move |request| {
            let handling = handler(request);
            Box::pin(async move { handling.await.map_err(|e| Refused(e).into()) })
        },
        layers,
    );
    Arc::new(move |request| {
        let handling = service.clone().call(request);
        Box::pin(async move { handling.await.map_err(answer_error) })
    })
}

/// How a layer's error is answered: the handler's own error as it is; a `tower::timeout` that
/// elapsed as a 504; a `tower::load_shed` refusal as a 503 (the caller may try again, another
/// replica may answer); anything else as a 500 with the layer's message.
pub fn answer_error(error: BoxError) -> ServiceError {
    let error = match error.downcast::<Refused>() {
        Ok(refused) => return refused.0,
        Err(error) => error,
    };
    if error.is::<tower::timeout::error::Elapsed>() {
        ServiceError::new(
            504,
            format!("timeout: a layer stopped the handler ({error})"),
        )
    } else if error.is::<tower::load_shed::error::Overloaded>() {
        ServiceError::new(
            503,
            format!("overloaded: a layer refused the request ({error})"),
        )
    } else {
        ServiceError::internal(format!("a layer failed the request: {error}"))
    }
}
