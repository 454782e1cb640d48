//! Health endpoints over HTTP (feature `http`, axum): `/livez`, `/readyz` and, when a
//! Prometheus render function is given, `/metrics`.
//!
//! - `GET /livez`: 200 while the runtime's supervisors are alive: no consumer (endpoint, core
//!   subscription) is `stopped`
//!   (a supervisor ends only after a failure no retry fixes, a panic awaiting its restart, or
//!   the end of a drain). Starting, provisioning, retrying and draining consumers are alive:
//!   a broker that is down is a readiness problem, and restarting the process would not fix it.
//!   503 otherwise.
//! - `GET /readyz`: 200 when [`Health::ready`] (every consumer, endpoint and core
//!   subscription runs, and every stream no consumer reads is there), 503 otherwise; both with
//!   a JSON body listing every consumer's, endpoint's and subscription's state and counters
//!   (see [`readiness`]).
//! - `GET /metrics`: the text a render function returns (for example
//!   `metrics_exporter_prometheus::PrometheusHandle::render`), as
//!   `text/plain; version=0.0.4`.
//!
//! ```no_run
//! # async fn f() -> Result<(), Box<dyn std::error::Error>> {
//! use nats_topology::Runtime;
//! use nats_topology::http::{Endpoints, RuntimeHttp};
//!
//! let client = nats_topology::connect_from_env().await?;
//! let runtime = Runtime::builder(client).build()?;
//!
//! // Served on an address of their own, beside the runtime...
//! let served = runtime.serve_health("0.0.0.0:8080".parse()?).await?;
//! println!("health endpoints on http://{}", served.local_addr());
//!
//! // ...or mounted on the application's own router,
//! let app: axum::Router = runtime.mount_health(
//!     axum::Router::new().route("/", axum::routing::get(|| async { "hello" })),
//! );
//! # drop(app);
//! // ...or with `/metrics` too (a `metrics_exporter_prometheus::PrometheusHandle`'s render).
//! # let render = || String::new();
//! let with_metrics = Endpoints::new(runtime.health()).metrics(render).router::<()>();
//! # drop(with_metrics);
//!
//! runtime.run_until_signal().await?;
//! # Ok(()) }
//! ```

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};

use crate::{ConsumerState, Health, Runtime};
use topology_runtime::ServingState;

/// A function that renders the metrics in Prometheus's text format.
pub type RenderMetrics = Arc<dyn Fn() -> String + Send + Sync>;

/// The health endpoints of one runtime: build them from its [`Health`], then
/// [`Endpoints::router`] or [`Endpoints::serve`].
#[derive(Clone)]
pub struct Endpoints {
    health: Health,
    metrics: Option<RenderMetrics>,
}

impl std::fmt::Debug for Endpoints {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoints")
            .field("health", &self.health)
            .field("metrics", &self.metrics.is_some())
            .finish()
    }
}

impl Endpoints {
    /// `/livez` and `/readyz` on `health`.
    pub fn new(health: Health) -> Self {
        Endpoints {
            health,
            metrics: None,
        }
    }

    /// Adds `/metrics`, answering what `render` returns, e.g.
    /// `move || prometheus_handle.render()`.
    pub fn metrics(mut self, render: impl Fn() -> String + Send + Sync + 'static) -> Self {
        self.metrics = Some(Arc::new(render));
        self
    }

    /// The routes, to merge into an application's router (they need no state).
    pub fn router<S: Clone + Send + Sync + 'static>(&self) -> Router<S> {
        let (live, ready) = (self.health.clone(), self.health.clone());
        let mut router = Router::new()
            .route("/livez", get(move || std::future::ready(livez(&live))))
            .route("/readyz", get(move || std::future::ready(readyz(&ready))));
        if let Some(render) = self.metrics.clone() {
            router = router.route(
                "/metrics",
                get(move || {
                    let body = render();
                    std::future::ready(
                        ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], body)
                            .into_response(),
                    )
                }),
            );
        }
        router
    }

    /// Serves the routes on `addr` (port 0 picks a free port) until the returned
    /// [`Served`] is dropped or [`Served::shutdown`].
    pub async fn serve(&self, addr: SocketAddr) -> std::io::Result<Served> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let local_addr = listener.local_addr()?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let router: Router = self.router();
        let task = tokio::spawn(async move {
            let served = axum::serve(listener, router)
                .with_graceful_shutdown(async move {
                    let _ = stopped.await;
                })
                .await;
            if let Err(e) = served {
                report_stopped(&e);
            }
        });
        Ok(Served {
            local_addr,
            stop: Some(stop),
            task: Some(task),
        })
    }
}

/// The library logs through `tracing` in the runtime; the facade has no logger, so the one
/// failure of a server task that nobody awaits goes to standard error.
fn report_stopped(e: &std::io::Error) {
    eprintln!("nats-topology health endpoints stopped: {e}");
}

/// The health endpoints being served: see [`Endpoints::serve`]. Dropping it stops them.
#[derive(Debug)]
pub struct Served {
    local_addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Served {
    /// The address they are served on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Stops serving and waits for open requests to be answered.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// The health endpoints of a [`Runtime`], in one call (`use nats_topology::http::RuntimeHttp`).
/// [`Endpoints`] adds `/metrics`.
pub trait RuntimeHttp {
    /// `router` with `/livez` and `/readyz` on this runtime's [`Health`] mounted.
    fn mount_health<S: Clone + Send + Sync + 'static>(&self, router: Router<S>) -> Router<S>;

    /// Serves `/livez` and `/readyz` on `addr` until the returned [`Served`] is dropped.
    fn serve_health(
        &self,
        addr: SocketAddr,
    ) -> impl std::future::Future<Output = std::io::Result<Served>> + Send;
}

impl RuntimeHttp for Runtime {
    fn mount_health<S: Clone + Send + Sync + 'static>(&self, router: Router<S>) -> Router<S> {
        router.merge(Endpoints::new(self.health()).router())
    }

    fn serve_health(
        &self,
        addr: SocketAddr,
    ) -> impl std::future::Future<Output = std::io::Result<Served>> + Send {
        let endpoints = Endpoints::new(self.health());
        async move { endpoints.serve(addr).await }
    }
}

/// Whether every supervisor is alive: no consumer, endpoint or core subscription is stopped.
pub fn live(health: &Health) -> bool {
    health
        .consumers()
        .iter()
        .all(|c| !matches!(c.state, ConsumerState::Stopped { .. }))
        && health
            .endpoints()
            .iter()
            .map(|e| &e.state)
            .chain(health.subscriptions().iter().map(|s| &s.state))
            .all(|state| !matches!(state, ServingState::Stopped { .. }))
}

/// A served endpoint's or subscription's state as JSON fields: `state`, and `error`,
/// `attempt` and `silent_for_ms` when they apply.
fn serving_state(state: &ServingState, value: &mut Value) {
    let (name, error, attempt) = match state {
        ServingState::Starting => ("starting", None, None),
        ServingState::Subscribing => ("subscribing", None, None),
        ServingState::Running => ("running", None, None),
        ServingState::Stalled { cause, .. } => ("stalled", Some(cause.clone()), None),
        ServingState::Disconnected => ("disconnected", None, None),
        ServingState::Denied { permission, cause } => {
            ("denied", Some(format!("grant {permission}: {cause}")), None)
        }
        ServingState::BackingOff { cause } => ("backing_off", Some(cause.clone()), None),
        ServingState::Retrying { attempt, error } => {
            ("retrying", Some(error.clone()), Some(*attempt))
        }
        ServingState::Draining => ("draining", None, None),
        ServingState::Stopped { error } => ("stopped", error.clone(), None),
    };
    value["state"] = json!(name);
    if let Some(error) = error {
        value["error"] = json!(error);
    }
    if let Some(attempt) = attempt {
        value["attempt"] = json!(attempt);
    }
    if let ServingState::Stalled { silent_for, .. } = state {
        value["silent_for_ms"] = json!(silent_for.as_millis() as u64);
    }
}

/// The JSON body of `/readyz` (and `/livez`):
///
/// ```json
/// {"ready": false, "live": true,
///  "consumers": [{"stream": "ORDERS", "consumer": "billing", "handler": "billing::on_order",
///                 "kind": "queue", "state": "retrying", "error": "...", "attempt": 3,
///                 "handled": 10, "failed": 0, "retried": 0, "dead_lettered": 0, "early": 0,
///                 "ack_floor": 10, "restarts": 0}],
///  "endpoints": [{"service": "members", "endpoint": "get", "subject": "members.get",
///                 "queue_group": "q", "handler": "members::get", "state": "running",
///                 "requests": 12, "errors": 1}],
///  "subscriptions": [{"subject": "cache.invalidate", "queue_group": null,
///                     "handler": "cache::invalidate", "state": "stalled", "error": "...",
///                     "silent_for_ms": 1200, "handled": 3, "failed": 0}],
///  "streams": [{"stream": "AUDIT", "ensured": true}],
///  "bind_only": false,
///  "denials": [{"action": "publish", "subject": "$JS.API.CONSUMER.MSG.NEXT.ORDERS.billing",
///               "permission": "$JS.API.CONSUMER.MSG.NEXT.ORDERS.billing",
///               "needed_by": ["consumer `billing::on_order` of stream `ORDERS`: pulls its messages"],
///               "count": 1}],
///  "jetstream": {"server": "n1 (10.0.0.1:4222)", "reachable": true, "unreachable_for_ms": 0,
///                "error": null, "action": null, "moves": 0}}
/// ```
///
/// A consumer's `state` is one of `starting`, `provisioning`, `running`, `standby` (a
/// pinned-client queue consumer another replica is pinned for: ready), `replaying` (an
/// ordered replay catching up, with `behind`: the messages it has left; not ready), `stalled`,
/// `backing_off`, `crowded` (its pull requests refused: the consumer's wait list, `max_waiting`,
/// is full), `denied`, `retrying`, `draining`, `stopped`, `retired` (the consumer a partitioned
/// group migrated from, read to its end and deleted: ready); an endpoint's or subscription's one of `starting`,
/// `subscribing`, `running`, `stalled`, `disconnected`, `retrying`, `draining`, `stopped`; `error` (and `attempt` when retrying, `silent_for_ms` when stalled: how long
/// nothing has come from the server) say why a consumer is not running; `denied` (on a
/// consumer) and `denials` name a permission the server refused that a declaration needs.
pub fn readiness(health: &Health) -> Value {
    let consumers: Vec<Value> = health
        .consumers()
        .into_iter()
        .map(|c| {
            let (state, error, attempt) = match &c.state {
                ConsumerState::Starting => ("starting", None, None),
                ConsumerState::Provisioning => ("provisioning", None, None),
                ConsumerState::Running => ("running", None, None),
                ConsumerState::Standby => ("standby", None, None),
                ConsumerState::Retired => ("retired", None, None),
                ConsumerState::Replaying { .. } => ("replaying", None, None),
                ConsumerState::Stalled { cause, .. } => ("stalled", Some(cause.clone()), None),
                ConsumerState::BackingOff { cause } => ("backing_off", Some(cause.clone()), None),
                ConsumerState::Crowded { cause } => ("crowded", Some(cause.clone()), None),
                ConsumerState::Denied { permission, cause } => {
                    ("denied", Some(format!("grant {permission}: {cause}")), None)
                }
                ConsumerState::Retrying { attempt, error } => {
                    ("retrying", Some(error.clone()), Some(*attempt))
                }
                ConsumerState::Draining => ("draining", None, None),
                ConsumerState::Stopped { error } => ("stopped", error.clone(), None),
            };
            let mut value = json!({
                "stream": c.stream,
                "consumer": c.consumer,
                "handler": c.handler,
                "kind": if c.queue { "queue" } else { "broadcast" },
                "state": state,
                "handled": c.handled,
                "failed": c.failed,
                "retried": c.retried,
                "dead_lettered": c.dead_lettered,
                "early": c.early,
                "ack_floor": c.ack_floor,
                "restarts": c.restarts,
            });
            if let Some(error) = error {
                value["error"] = json!(error);
            }
            if let Some(attempt) = attempt {
                value["attempt"] = json!(attempt);
            }
            if let ConsumerState::Replaying { behind } = &c.state {
                value["behind"] = json!(behind);
            }
            if let ConsumerState::Stalled { silent_for, .. } = &c.state {
                value["silent_for_ms"] = json!(silent_for.as_millis() as u64);
            }
            if let Some(denied) = &c.denied {
                value["denied"] = json!(denied);
            }
            value
        })
        .collect();
    let streams: Vec<Value> = health
        .streams()
        .into_iter()
        .map(|s| json!({ "stream": s.stream, "ensured": s.ensured }))
        .collect();
    let stream_writes: Vec<Value> = health
        .stream_writes()
        .into_iter()
        .map(|s| {
            json!({
                "stream": s.stream,
                "takes_writes": s.writes.taken(),
                "state": s.writes.to_string(),
                "for_ms": s.lasting.as_millis() as u64,
                "remedy": s.remedy(),
            })
        })
        .collect();
    let denials: Vec<Value> = health
        .denials()
        .into_iter()
        .map(|d| {
            json!({
                "action": d.action.as_str(),
                "subject": d.subject,
                "permission": d.permission,
                "needed_by": d.needed_by.iter().map(|(who, why)| format!("{who}: {why}")).collect::<Vec<_>>(),
                "count": d.count,
            })
        })
        .collect();
    let endpoints: Vec<Value> = health
        .endpoints()
        .into_iter()
        .map(|e| {
            let mut value = json!({
                "service": e.service,
                "endpoint": e.endpoint,
                "subject": e.subject,
                "queue_group": e.queue_group,
                "handler": e.handler,
                "requests": e.requests,
                "errors": e.errors,
            });
            serving_state(&e.state, &mut value);
            value
        })
        .collect();
    let subscriptions: Vec<Value> = health
        .subscriptions()
        .into_iter()
        .map(|s| {
            let mut value = json!({
                "subject": s.subject,
                "queue_group": s.queue_group,
                "handler": s.handler,
                "handled": s.handled,
                "failed": s.failed,
            });
            serving_state(&s.state, &mut value);
            value
        })
        .collect();
    let jetstream = health.jetstream();
    json!({
        "ready": health.ready(),
        "live": live(health),
        "bind_only": health.bind_only(),
        "consumers": consumers,
        "endpoints": endpoints,
        "subscriptions": subscriptions,
        "streams": streams,
        "stream_writes": stream_writes,
        "denials": denials,
        "jetstream": {
            "server": jetstream.server,
            "reachable": jetstream.reachable,
            "unreachable_for_ms": jetstream.unreachable_for.as_millis() as u64,
            "error": jetstream.error,
            "action": jetstream.action,
            "moves": jetstream.moves,
        },
    })
}

fn livez(health: &Health) -> Response {
    let status = if live(health) {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    json_response(status, &readiness(health))
}

fn readyz(health: &Health) -> Response {
    let status = if health.ready() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    json_response(status, &readiness(health))
}

fn json_response(status: StatusCode, body: &Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}
