//! Pure, const-evaluable declarations and validity rules of nats-topology.
//!
//! One source of truth: the macros call these functions at expansion time (for spanned
//! errors), generated `const _` assertions call them for cross-item checks, and the runtime
//! calls them for the programmatic API and start-up validation. This crate has no
//! dependencies and does no I/O.
//!
//! - [`model`]: the declarations.
//! - [`names`], [`subject`], [`duration`]: the leaf rules (names, subjects and filters,
//!   duration literals).
//! - [`bucket`]: key-value buckets and object stores (streams underneath), with their rules.
//! - [`watch`]: watches of a key-value bucket (`#[kv_watch]`), with the rule for their keys.
//! - [`codec`]: how payloads are written (JSON, MessagePack, CBOR, protobuf, raw bytes).
//! - [`placement`]: where a stream lives (its storage; a cluster, server tags).
//! - [`priority`]: priority groups on a queue consumer (pinned client, overflow).
//! - [`service`]: services, endpoints and core subscriptions (request/reply), with their rules.
//! - [`rules`]: ranges and cross-field rules, and whole-declaration checks built from the leaf
//!   rules ([`rules::check_stream`], [`rules::check_consumer`],
//!   [`rules::check_consumer_on_stream`]).
//!
//! Every rule is a `const fn` whose error is a small `Copy` enum with a
//! `const fn message(&self) -> &'static str`.
#![no_std]

pub mod batch;
pub mod bucket;
pub mod codec;
pub mod duration;
mod error;
mod limits;
pub mod messages;
pub mod model;
pub mod names;
pub mod ordered;
pub mod origin;
pub mod partition;
pub mod placement;
mod prim;
pub mod priority;
pub mod rules;
pub mod service;
pub mod subject;
pub mod transform;
pub mod watch;
#[doc(hidden)]
pub mod xorshift;

pub use model::StreamDef;
