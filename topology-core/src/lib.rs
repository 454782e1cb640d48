//! Pure, const-evaluable declarations and validity rules of nats-topology.
//!
//! One source of truth: the macros call these functions at expansion time (for spanned
//! errors), generated `const _` assertions call them for cross-item checks, and the runtime
//! calls them for the programmatic API and start-up validation. This crate has no
//! dependencies and does no I/O.
#![no_std]

pub mod model;

pub use model::StreamDef;
