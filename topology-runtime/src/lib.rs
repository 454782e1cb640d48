//! Runtime of nats-topology: the registry, validation, provisioning and supervision of the
//! declared streams and consumers, and a test kit that starts real `nats-server` processes.
//!
//! Modules depend one way: `model` <- `validate` <- `provision` <- `run`.

pub mod handler;
pub mod health;
pub mod provision;
pub mod registry;
pub mod report;
pub mod retry;
pub mod run;
pub mod validate;

pub use handler::{Context, HandlerError, Incoming};
pub use health::{ConsumerState, ConsumerStatus, Health};
pub use provision::{ProvisionError, ProvisionErrorKind};
pub use registry::Topology;
pub use report::{Inspection, Plan, inspect, plan};
pub use retry::RetryPolicy;
pub use run::{ProvisionReport, Relay, RelayError, RunError, Runtime, RuntimeBuilder};
pub use topology_core::model;
pub use validate::{Problem, ValidationError};
