//! Runtime of nats-topology: the registry, validation, provisioning and supervision of the
//! declared streams and consumers. (Real `nats-server` processes for tests come from the
//! `nats-topology-testkit` crate.)
//!
//! Modules stand on layers, bottom first, and import only from layers below their own
//! (docs/ARCHITECTURE.md, "Layers"; `tests/layers.rs` checks it):
//!
//! 1. the ground: `hash`, `retry`, `jsapi`, `grant`, `state`, `telemetry`, `codec`, `stack`;
//! 2. what the runtime records and what handlers see: `health`, `server_errors`, `handler`;
//! 3. talking to the server: `connect`, `provision`, `service`;
//! 4. the declarations: `registry`;
//! 5. what is read from them: `validate`, `export`, `report`, `bucket`;
//! 6. running them: `run` (`run/consume`, `run/serve`, `run/watchers`).

/// `Debug` as the human message (`Display`), as anyhow's errors do: a `main` returning
/// `Result<(), E>` prints what went wrong and what to do, not a struct.
macro_rules! debug_as_display {
    ($($error:ty),+ $(,)?) => {$(
        impl ::std::fmt::Debug for $error {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                ::std::fmt::Display::fmt(self, f)
            }
        }
    )+};
}

pub mod bucket;
pub mod codec;
pub mod connect;
pub mod export;
mod grant;
pub mod handler;
mod hash;
pub mod health;
mod jsapi;
mod outage;
pub mod provision;
pub mod registry;
pub mod report;
pub mod retry;
pub mod run;
mod server_errors;
pub mod service;
#[cfg(feature = "tower")]
mod stack;
pub mod state;
pub mod telemetry;
pub mod validate;

pub use connect::{connect, connect_from_env, connect_options, connect_with};
pub use handler::{
    Batch, BatchError, BatchInput, Context, Failures, HandlerError, Incoming, Item, Publish,
};
pub use health::{
    ConsumerState, ConsumerStatus, EndpointStatus, Health, JetStreamStatus, NotReady,
    PermissionDenial, ServingState, StreamStatus, StreamWrites, SubscriptionStatus, Writes,
};
pub use provision::{OlderDeclaration, ProvisionError, ProvisionErrorKind};
pub use registry::Topology;
pub use report::{Inspection, Plan, ProvisionReport, inspect, plan};
pub use retry::RetryPolicy;
pub use run::{OutagePolicy, Relay, RelayError, RunError, Runtime, RuntimeBuilder};
pub use service::{Request, RequestContext, ServiceError};
pub use state::State;
pub use topology_core::model;
pub use validate::{Problem, ValidationError};
