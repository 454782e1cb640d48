//! Runtime of nats-topology: the registry, validation, provisioning and supervision of the
//! declared streams and consumers. (Real `nats-server` processes for tests come from the
//! `nats-topology-testkit` crate.)
//!
//! Modules depend one way: `model` <- `validate` <- `provision` <- `report` <- `run`;
//! `handler`, `state`, `health`, `retry` and `hash` are the ground every layer stands on.
//! `run/`, `provision/` and `handler/` are folders, one concern per file (their `mod.rs` lists
//! them).

pub mod bucket;
pub mod connect;
pub mod export;
mod grant;
pub mod handler;
mod hash;
pub mod health;
mod jsapi;
pub mod provision;
pub mod registry;
pub mod report;
pub mod retry;
pub mod run;
mod server_errors;
pub mod service;
pub mod state;
pub mod telemetry;
pub mod validate;

pub use connect::{connect, connect_from_env, connect_options, connect_with};
pub use handler::{
    Batch, BatchError, BatchInput, Context, Failures, HandlerError, Incoming, Item, Publish,
};
pub use health::{
    ConsumerState, ConsumerStatus, EndpointStatus, Health, JetStreamStatus, NotReady,
    PermissionDenial, ServingState, StreamStatus, SubscriptionStatus,
};
pub use provision::{OlderDeclaration, ProvisionError, ProvisionErrorKind};
pub use registry::Topology;
pub use report::{Inspection, Plan, ProvisionReport, inspect, plan};
pub use retry::RetryPolicy;
pub use run::{Relay, RelayError, RunError, Runtime, RuntimeBuilder};
pub use service::{Request, RequestContext, ServiceError};
pub use state::State;
pub use topology_core::model;
pub use validate::{Problem, ValidationError};
