//! Facade.

#[cfg(feature = "testkit")]
pub use topology_runtime::testkit;
