//! The `tower` service a layer wraps (feature `tower`), for consumers' handlers and endpoints
//! alike: the handler itself, or the stack of the layers under this one ([`Stacked`]); a layer
//! type-erased as the builder keeps it ([`LayerFn`]); and the stack built from a handler and
//! its layers ([`stack`]). `handler::layer` and `service::layer` name the request and the
//! response, and map a layer's error.

use std::error::Error as StdError;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};

use tower::util::BoxService;
use tower::{Layer, Service, ServiceExt};

/// A boxed error, as `tower`'s layers return them.
pub type BoxError = Box<dyn StdError + Send + Sync + 'static>;

/// The future of a [`Stacked`] call.
pub type StackFuture<Res> = Pin<Box<dyn Future<Output = Result<Res, BoxError>> + Send + 'static>>;

/// What a layer wraps: the handler, or the stack of the layers installed under this one. Its
/// readiness is awaited inside its call, so it is always ready.
pub struct Stacked<Req, Res> {
    inner: Inner<Req, Res>,
}

/// The handler, called with the request.
type Leaf<Req, Res> = Arc<dyn Fn(Req) -> StackFuture<Res> + Send + Sync>;

enum Inner<Req, Res> {
    Handler(Leaf<Req, Res>),
    /// The layers under this one, one stack per consumer or endpoint: a rate or concurrency
    /// limit in it counts each of its calls.
    Stack(Arc<tokio::sync::Mutex<BoxService<Req, Res, BoxError>>>),
}

impl<Req, Res> Clone for Stacked<Req, Res> {
    fn clone(&self) -> Self {
        let inner = match &self.inner {
            Inner::Handler(handler) => Inner::Handler(handler.clone()),
            Inner::Stack(stack) => Inner::Stack(stack.clone()),
        };
        Stacked { inner }
    }
}

impl<Req, Res> fmt::Debug for Stacked<Req, Res> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stacked").finish_non_exhaustive()
    }
}

impl<Req: Send + 'static, Res: Send + 'static> Service<Req> for Stacked<Req, Res> {
    type Response = Res;
    type Error = BoxError;
    type Future = StackFuture<Res>;

    fn poll_ready(&mut self, _: &mut TaskContext<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Req) -> Self::Future {
        match &self.inner {
            Inner::Handler(handler) => handler(request),
            Inner::Stack(stack) => {
                let stack = stack.clone();
                Box::pin(async move {
                    let call = {
                        let mut stack = stack.lock().await;
                        stack.ready().await?;
                        stack.call(request)
                    };
                    call.await
                })
            }
        }
    }
}

/// A layer as the builder keeps it: applied once per consumer or endpoint it wraps.
pub(crate) type LayerFn<Req, Res> =
    Arc<dyn Fn(Stacked<Req, Res>) -> BoxService<Req, Res, BoxError> + Send + Sync>;

/// `layer`, type-erased.
pub(crate) fn erase<L, Req, Res>(layer: L) -> LayerFn<Req, Res>
where
    L: Layer<Stacked<Req, Res>> + Send + Sync + 'static,
    L::Service: Service<Req, Response = Res> + Send + 'static,
    <L::Service as Service<Req>>::Error: Into<BoxError>,
    <L::Service as Service<Req>>::Future: Send + 'static,
    Req: 'static,
    Res: 'static,
{
    Arc::new(move |inner| BoxService::new(layer.layer(inner).map_err(Into::into)))
}

/// `handler` behind `layers`, the first the outermost.
pub(crate) fn stack<Req, Res>(
    handler: impl Fn(Req) -> StackFuture<Res> + Send + Sync + 'static,
    layers: &[LayerFn<Req, Res>],
) -> Stacked<Req, Res> {
    let mut service = Stacked {
        inner: Inner::Handler(Arc::new(handler)),
    };
    for layer in layers.iter().rev() {
        service = Stacked {
            inner: Inner::Stack(Arc::new(tokio::sync::Mutex::new(layer(service)))),
        };
    }
    service
}
