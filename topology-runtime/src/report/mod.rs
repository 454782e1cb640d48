//! Reports for operators: [`plan`](fn@plan) (what provisioning would do, without doing it, and what is
//! served with nothing to provision) and [`inspect`](fn@inspect) (the state of every declared consumer on
//! the server: does it exist, is anyone bound or pulling, what is pending; and the live
//! instances of every declared service; what each declared bucket holds; where each declared
//! stream lives: its cluster, leader and replicas). `inspect` is how "the consumer exists, bound by
//! nobody" and "no instance answers" become visible. And [`ProvisionReport`], what
//! [`Runtime::provision`](crate::Runtime::provision) did.

mod buckets;
mod inspect;
mod plan;
mod services;
mod streams;

use std::time::Duration;

pub use crate::provision::Action;
pub use buckets::{BucketReport, ServerBucket};
pub(crate) use inspect::inspect_with;
pub use inspect::{ConsumerReport, Inspection, ServerConsumer, inspect};
pub(crate) use plan::plan_with;
pub use plan::{Plan, PlanItem, Served, ServedItem, plan};
pub use services::{
    EndpointStats, InstanceStats, SERVICE_PING_WINDOW, ServiceInstance, ServiceReport,
    inspect_services,
};
pub use streams::{Replica, ServerStream, StreamReport};

/// What [`Runtime::provision`](crate::Runtime::provision) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProvisionReport {
    /// Provisioning attempts made (one per stream and consumer when nothing failed).
    pub attempts: u32,
    /// Requests that went unanswered for the whole
    /// [`request_timeout`](crate::RetryPolicy::request_timeout).
    pub timed_out: u32,
    /// How long it took.
    pub elapsed: Duration,
}
