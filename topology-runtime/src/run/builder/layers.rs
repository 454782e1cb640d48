//! `tower` layers around handlers and endpoints (feature `tower`): what the builder keeps
//! ([`Layers`]), the builder's methods that install them, and how they are applied to the
//! topology at `build`. Without a layer nothing is applied: a handler is called as before.

#[cfg(feature = "tower")]
use crate::handler::layer::{
    self as handler_layer, BatchLayer, BatchService, HandlerLayer, HandlerService,
};
use crate::registry::Topology;
#[cfg(feature = "tower")]
use crate::registry::declared_layer;
#[cfg(feature = "tower")]
use crate::service::layer::{self as endpoint_layer, EndpointLayer, EndpointService};
#[cfg(feature = "tower")]
use crate::stack::{self, BoxError};
use crate::validate::Problem;

/// The layers installed on the builder: each with the consumer or endpoint it is for (`None`:
/// every one), in the order given.
#[derive(Default)]
pub(super) struct Layers {
    #[cfg(feature = "tower")]
    handlers: Vec<(Option<String>, HandlerLayer)>,
    #[cfg(feature = "tower")]
    batches: Vec<(Option<String>, BatchLayer)>,
    #[cfg(feature = "tower")]
    endpoints: Vec<(Option<String>, EndpointLayer)>,
}

impl Layers {
    /// Without the `tower` feature there are none.
    #[cfg(not(feature = "tower"))]
    pub(super) fn apply(&self, _: &mut Topology) -> Vec<Problem> {
        Vec::new()
    }

    /// Wraps each handler in the layers for it (those for every one outermost, then its own;
    /// in each, the first given outermost); a problem for each name that matches no consumer
    /// or endpoint, or a batch consumer (wrapping nothing then).
    #[cfg(feature = "tower")]
    pub(super) fn apply(&self, topology: &mut Topology) -> Vec<Problem> {
        let problems = self.unknown_names(topology);
        if !problems.is_empty() {
            return problems;
        }
        // The layer declared in the attribute (`layer = f`) is innermost: the declaration's own.
        topology.wrap_consumer_handlers(
            |decl, handler| {
                let mut layers = in_order(&self.handlers, consumer_name(decl));
                layers.extend(declared_layer::<HandlerLayer>(decl.handler));
                handler_layer::layered(handler, &layers)
            },
            |decl, handler| {
                let mut layers = in_order(&self.batches, consumer_name(decl));
                layers.extend(declared_layer::<BatchLayer>(decl.handler));
                handler_layer::batch_layered(handler, &layers)
            },
        );
        topology.wrap_endpoint_handlers(|decl, handler| {
            let mut layers = in_order(&self.endpoints, decl.name);
            layers.extend(declared_layer::<EndpointLayer>(decl.handler));
            endpoint_layer::layered(handler, &layers)
        });
        Vec::new()
    }

    #[cfg(feature = "tower")]
    fn unknown_names(&self, topology: &Topology) -> Vec<Problem> {
        let mut problems = Vec::new();
        let kinds = [
            (named(&self.handlers), false, "layer_for", "batch_layer_for"),
            (named(&self.batches), true, "batch_layer_for", "layer_for"),
        ];
        for (names, batch, method, other) in kinds {
            for name in names {
                let found = topology
                    .consumers()
                    .iter()
                    .find(|c| consumer_name(&c.decl) == name);
                let message = match found {
                    None => {
                        let names: Vec<&str> = topology
                            .consumers()
                            .iter()
                            .map(|c| consumer_name(&c.decl))
                            .collect();
                        format!(
                            "{name:?} names no consumer (a queue consumer by its `group`, a relay by its handler's name; declared: {names:?}): correct the name, or remove `{method}({name:?}, ..)`"
                        )
                    }
                    Some(c) if c.batch.is_some() != batch => format!(
                        "{name:?} is {} consumer: its handler takes {}; write `{other}({name:?}, ..)`",
                        if batch { "not a batch" } else { "a batch" },
                        if batch {
                            "one message at a time (`Incoming`)"
                        } else {
                            "a batch at a time (`BatchInput`)"
                        },
                    ),
                    Some(_) => continue,
                };
                problems.push(Problem {
                    location: format!("runtime builder `{method}`"),
                    message,
                });
            }
        }
        for name in self
            .endpoints
            .iter()
            .filter_map(|(name, _)| name.as_deref())
        {
            if !topology.endpoints().iter().any(|e| e.decl.name == name) {
                let names: Vec<&str> = topology.endpoints().iter().map(|e| e.decl.name).collect();
                problems.push(Problem {
                    location: "runtime builder `endpoint_layer_for`".to_owned(),
                    message: format!(
                        "{name:?} names no endpoint (declared: {names:?}): correct the name, or remove `endpoint_layer_for({name:?}, ..)`"
                    ),
                });
            }
        }
        problems
    }
}

/// The names `layers` are given for.
#[cfg(feature = "tower")]
fn named<T>(layers: &[(Option<String>, T)]) -> Vec<String> {
    layers.iter().filter_map(|(name, _)| name.clone()).collect()
}

/// The name `layer_for` matches: a queue consumer's group, a relay's handler's name.
#[cfg(feature = "tower")]
fn consumer_name(decl: &topology_core::model::ConsumerDecl) -> &'static str {
    match decl.as_queue() {
        Some(queue) => queue.group,
        None => decl.handler.rsplit("::").next().unwrap_or(decl.handler),
    }
}

/// The layers that apply to `name`, outermost first: those for every one, then its own.
#[cfg(feature = "tower")]
fn in_order<T: Clone>(layers: &[(Option<String>, T)], name: &str) -> Vec<T> {
    let every = layers.iter().filter(|(n, _)| n.is_none());
    let own = layers.iter().filter(|(n, _)| n.as_deref() == Some(name));
    every.chain(own).map(|(_, layer)| layer.clone()).collect()
}

#[cfg(feature = "tower")]
impl super::RuntimeBuilder {
    /// Wraps every consumer's handler (queue consumers and relays; batch handlers, called once
    /// per batch, take [`batch_layer`](Self::batch_layer)) in a `tower` layer: a timeout, a concurrency or rate limit, load
    /// shedding, tracing, or a stack of them (`tower::ServiceBuilder`). One stack per
    /// consumer, shared by its messages, so a limit counts them all. Layers given first are
    /// outermost; those given by [`layer_for`](Self::layer_for) are inside these.
    ///
    /// The request a layer sees is the [`Incoming`](crate::handler::Incoming) message (its context:
    /// subject, headers, delivery count, stream sequence; its payload is decoded inside); its
    /// response the handler's `Ok(())`. A layer's error settles the message as
    /// [`settle_error`](crate::handler::layer::settle_error) says: the handler's own error as
    /// the handler meant it, an elapsed timeout or a shed message as a transient error
    /// (redelivered after the backoff). A consumer without a layer is called as before.
    ///
    /// ```no_run
    /// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use tower::ServiceBuilder;
    ///
    /// let client = nats_topology::async_nats::connect("nats://127.0.0.1:4222").await?;
    /// let runtime = nats_topology::Runtime::builder(client)
    ///     // Every handler: stopped after 10 s (the message is redelivered).
    ///     .layer(tower::timeout::TimeoutLayer::new(Duration::from_secs(10)))
    ///     // The `billing` group: at most 50 calls a second to the payment API.
    ///     .layer_for("billing", ServiceBuilder::new().rate_limit(50, Duration::from_secs(1)))
    ///     .build()?;
    /// # drop(runtime); Ok(()) }
    /// ```
    pub fn layer<L>(mut self, layer: L) -> Self
    where
        L: tower::Layer<HandlerService> + Send + Sync + 'static,
        L::Service: tower::Service<crate::handler::Incoming, Response = ()> + Send + 'static,
        <L::Service as tower::Service<crate::handler::Incoming>>::Error: Into<BoxError>,
        <L::Service as tower::Service<crate::handler::Incoming>>::Future: Send + 'static,
    {
        let layer = stack::erase(layer);
        self.layers.handlers.push((None, layer));
        self
    }

    /// [`layer`](Self::layer) for one consumer: a queue consumer by its `group`, a relay by
    /// its handler's name. A name that matches no consumer (or a batch consumer) makes
    /// [`build`](Self::build) fail, naming the consumers declared.
    pub fn layer_for<L>(mut self, name: impl Into<String>, layer: L) -> Self
    where
        L: tower::Layer<HandlerService> + Send + Sync + 'static,
        L::Service: tower::Service<crate::handler::Incoming, Response = ()> + Send + 'static,
        <L::Service as tower::Service<crate::handler::Incoming>>::Error: Into<BoxError>,
        <L::Service as tower::Service<crate::handler::Incoming>>::Future: Send + 'static,
    {
        let layer = stack::erase(layer);
        self.layers.handlers.push((Some(name.into()), layer));
        self
    }

    /// Wraps every batch consumer's handler (`batch = N`) in a `tower` layer, as
    /// [`layer`](Self::layer) does a consumer's: its request is the
    /// [`BatchInput`](crate::handler::BatchInput) (the messages of one batch), its response
    /// each message's outcome. A layer's error fails every message of the batch, as
    /// [`settle_error`](crate::handler::layer::settle_error) says.
    pub fn batch_layer<L>(mut self, layer: L) -> Self
    where
        L: tower::Layer<BatchService> + Send + Sync + 'static,
        L::Service: tower::Service<crate::handler::BatchInput, Response = crate::handler::BatchOutcomes>
            + Send
            + 'static,
        <L::Service as tower::Service<crate::handler::BatchInput>>::Error: Into<BoxError>,
        <L::Service as tower::Service<crate::handler::BatchInput>>::Future: Send + 'static,
    {
        self.layers.batches.push((None, stack::erase(layer)));
        self
    }

    /// [`batch_layer`](Self::batch_layer) for the batch consumer of `group`. A name that
    /// matches no batch consumer makes [`build`](Self::build) fail.
    pub fn batch_layer_for<L>(mut self, group: impl Into<String>, layer: L) -> Self
    where
        L: tower::Layer<BatchService> + Send + Sync + 'static,
        L::Service: tower::Service<crate::handler::BatchInput, Response = crate::handler::BatchOutcomes>
            + Send
            + 'static,
        <L::Service as tower::Service<crate::handler::BatchInput>>::Error: Into<BoxError>,
        <L::Service as tower::Service<crate::handler::BatchInput>>::Future: Send + 'static,
    {
        self.layers
            .batches
            .push((Some(group.into()), stack::erase(layer)));
        self
    }

    /// Wraps every endpoint's handler in a `tower` layer, as [`layer`](Self::layer) does a
    /// consumer's: its request is the [`Request`](crate::service::Request), its response the reply's
    /// body. A layer's error is answered as
    /// [`answer_error`](crate::service::layer::answer_error) says: the handler's own error as
    /// it is, an elapsed timeout as a 504, a shed request as a 503, anything else as a 500.
    pub fn endpoint_layer<L>(mut self, layer: L) -> Self
    where
        L: tower::Layer<EndpointService> + Send + Sync + 'static,
        L::Service:
            tower::Service<crate::service::Request, Response = bytes::Bytes> + Send + 'static,
        <L::Service as tower::Service<crate::service::Request>>::Error: Into<BoxError>,
        <L::Service as tower::Service<crate::service::Request>>::Future: Send + 'static,
    {
        let layer = stack::erase(layer);
        self.layers.endpoints.push((None, layer));
        self
    }

    /// [`endpoint_layer`](Self::endpoint_layer) for the endpoint named `name` (its name in
    /// `$SRV.INFO`: the handler's name unless declared). A name that matches no endpoint makes
    /// [`build`](Self::build) fail, naming the endpoints declared.
    pub fn endpoint_layer_for<L>(mut self, name: impl Into<String>, layer: L) -> Self
    where
        L: tower::Layer<EndpointService> + Send + Sync + 'static,
        L::Service:
            tower::Service<crate::service::Request, Response = bytes::Bytes> + Send + 'static,
        <L::Service as tower::Service<crate::service::Request>>::Error: Into<BoxError>,
        <L::Service as tower::Service<crate::service::Request>>::Future: Send + 'static,
    {
        let layer = stack::erase(layer);
        self.layers.endpoints.push((Some(name.into()), layer));
        self
    }
}
