//! Runtime of nats-topology.

#[cfg(feature = "testkit")]
pub mod testkit;
