//! Serving request/reply and core subscriptions: every declared service, as supervised tasks
//! beside the consumers.
//!
//! - `service`: one service: its micro protocol instance, a queue subscription and a dispatch
//!   task per endpoint, the link proven through its own `$SRV.PING.<name>.<id>`;
//! - `micro`: the micro protocol's `$SRV.PING/INFO/STATS` answers and endpoint statistics (and
//!   why not async-nats' `service` module);
//! - `endpoint`: one endpoint's dispatch, bounded by its concurrency, and its drain;
//! - `answer`: one request from received to answered (the error mapping);
//! - `subscription`: one core subscription, its dispatch and its drain;
//! - `bounded`: the dispatch loop both share: the concurrency bound, the stop and the grace
//!   period;
//! - `probe`: proving subscriptions on the server by round trips, at once and every heartbeat;
//! - `refused`: a subscription the server refused, made again every heartbeat until the
//!   server accepts it.

mod answer;
mod bounded;
mod endpoint;
mod micro;
mod probe;
mod refused;
mod service;
mod subscription;

pub(super) use service::serve_service;
pub(super) use subscription::serve_subscription;
