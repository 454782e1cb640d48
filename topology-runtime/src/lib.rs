//! Runtime of nats-topology: the registry, validation, provisioning and supervision of the
//! declared streams and consumers, and a test kit that starts real `nats-server` processes.
//!
//! Modules depend one way: `model` <- `validate` <- `provision` <- `run`.

pub mod handler;
pub mod registry;
#[cfg(feature = "testkit")]
pub mod testkit;

pub use handler::{Context, HandlerError, Incoming};
pub use registry::Topology;
pub use topology_core::model;
