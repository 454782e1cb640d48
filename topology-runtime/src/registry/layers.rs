//! Layers declared in the attribute (`#[queue_consumer(.., layer = billing_layers)]`, and on
//! `#[broadcast]` and `#[endpoint]`): the registration the macros submit, naming the function
//! that builds the handler's `tower` layer, and the traits that turn what it returns into a
//! layer the runtime installs (feature `tower`; without it, the traits have no implementation
//! and the compiler says which feature the key needs).

use std::any::Any;

/// A layer as a registration carries it, whatever its kind (a handler's, a batch handler's, an
/// endpoint's). Not public API.
pub struct AnyLayer(
    #[cfg_attr(not(feature = "tower"), allow(dead_code))] Box<dyn Any + Send + Sync>,
);

/// Registered by the macros for a `layer = f` key: the handler's path and the function that
/// builds its layer. Not public API.
pub struct LayerRegistration {
    /// The handler's path, as in its declaration.
    pub handler: &'static str,
    /// Builds the layer (called once, at `build`).
    pub layer: fn() -> AnyLayer,
}

inventory::collect!(LayerRegistration);

/// The layer declared in `handler`'s attribute, if any.
#[cfg(feature = "tower")]
pub(crate) fn declared<T: Clone + 'static>(handler: &str) -> Option<T> {
    let registration = inventory::iter::<LayerRegistration>
        .into_iter()
        .find(|r| r.handler == handler)?;
    (registration.layer)().0.downcast_ref::<T>().cloned()
}

/// What `layer = f` on a consumer or relay takes: `f()` returns a `tower::Layer` around a
/// handler. Not public API.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a `tower` layer around a handler",
    label = "the function named by `layer` returns this",
    note = "`layer = f` names a function returning a `tower::Layer<nats_topology::layer::HandlerService>` (a timeout, a limit, a `tower::ServiceBuilder` stack), as `RuntimeBuilder::layer` takes; it needs the `tower` feature of nats-topology: `nats-topology = {{ version = \"..\", features = [\"tower\"] }}`"
)]
pub trait IntoHandlerLayer {
    /// The layer, erased.
    fn into_layer(self) -> AnyLayer;
}

/// What `layer = f` on a batch consumer takes: `f()` returns a `tower::Layer` around a batch
/// handler. Not public API.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a `tower` layer around a batch handler",
    label = "the function named by `layer` returns this",
    note = "on a batch consumer, `layer = f` names a function returning a `tower::Layer<nats_topology::layer::BatchService>`, as `RuntimeBuilder::batch_layer` takes; it needs the `tower` feature of nats-topology"
)]
pub trait IntoBatchLayer {
    /// The layer, erased.
    fn into_layer(self) -> AnyLayer;
}

/// What `layer = f` on an endpoint takes: `f()` returns a `tower::Layer` around an endpoint.
/// Not public API.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a `tower` layer around an endpoint",
    label = "the function named by `layer` returns this",
    note = "on an endpoint, `layer = f` names a function returning a `tower::Layer<nats_topology::layer::EndpointService>`, as `RuntimeBuilder::endpoint_layer` takes; it needs the `tower` feature of nats-topology"
)]
pub trait IntoEndpointLayer {
    /// The layer, erased.
    fn into_layer(self) -> AnyLayer;
}

#[cfg(feature = "tower")]
mod with_tower {
    use super::{AnyLayer, IntoBatchLayer, IntoEndpointLayer, IntoHandlerLayer};
    use crate::handler::layer::{BatchService, HandlerService};
    use crate::handler::{BatchInput, BatchOutcomes, Incoming};
    use crate::service::Request;
    use crate::service::layer::EndpointService;
    use crate::stack::{self, BoxError, LayerFn};
    use tower::{Layer, Service};

    impl<L> IntoHandlerLayer for L
    where
        L: Layer<HandlerService> + Send + Sync + 'static,
        L::Service: Service<Incoming, Response = ()> + Send + 'static,
        <L::Service as Service<Incoming>>::Error: Into<BoxError>,
        <L::Service as Service<Incoming>>::Future: Send + 'static,
    {
        fn into_layer(self) -> AnyLayer {
            let layer: LayerFn<Incoming, ()> = stack::erase(self);
            AnyLayer(Box::new(layer))
        }
    }

    impl<L> IntoBatchLayer for L
    where
        L: Layer<BatchService> + Send + Sync + 'static,
        L::Service: Service<BatchInput, Response = BatchOutcomes> + Send + 'static,
        <L::Service as Service<BatchInput>>::Error: Into<BoxError>,
        <L::Service as Service<BatchInput>>::Future: Send + 'static,
    {
        fn into_layer(self) -> AnyLayer {
            let layer: LayerFn<BatchInput, BatchOutcomes> = stack::erase(self);
            AnyLayer(Box::new(layer))
        }
    }

    impl<L> IntoEndpointLayer for L
    where
        L: Layer<EndpointService> + Send + Sync + 'static,
        L::Service: Service<Request, Response = bytes::Bytes> + Send + 'static,
        <L::Service as Service<Request>>::Error: Into<BoxError>,
        <L::Service as Service<Request>>::Future: Send + 'static,
    {
        fn into_layer(self) -> AnyLayer {
            let layer: LayerFn<Request, bytes::Bytes> = stack::erase(self);
            AnyLayer(Box::new(layer))
        }
    }
}
