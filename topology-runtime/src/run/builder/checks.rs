//! What `build` refuses beyond the declarations' own validation: a handler's `State<T>` the
//! builder was not given, a `spill_over` group that no overflow consumer declares.

use crate::registry::Topology;
use crate::state::StateMap;
use crate::validate::{self, Problem};
use topology_core::model::Priority;
use topology_core::service::{EndpointDecl, SubscriptionDecl};

/// A problem for each `spill_over` group that names no queue consumer declared with
/// `priority = "overflow"`.
pub(super) fn unknown_spill_over(topology: &Topology, groups: &[String]) -> Vec<Problem> {
    let overflow: Vec<&str> = topology
        .consumers()
        .iter()
        .filter_map(|c| c.decl.as_queue())
        .filter(|q| matches!(q.priority, Some(Priority::Overflow(_))))
        .map(|q| q.group)
        .collect();
    groups
        .iter()
        .filter(|g| !overflow.contains(&g.as_str()))
        .map(|g| Problem {
            location: "runtime builder `spill_over`".to_owned(),
            message: format!(
                "{g:?} is not a queue consumer declared with `priority = \"overflow\"` (those \
                 are: {overflow:?}); declare its group with `priority = \"overflow\", \
                 min_pending = N`, or remove `spill_over({g:?})`"
            ),
        })
        .collect()
}

/// A problem for each `State<T>` argument of a handler whose `T` the builder was not given.
pub(super) fn missing_state(topology: &Topology, state: &StateMap) -> Vec<Problem> {
    let mut problems = Vec::new();
    let mut need = |location: String, keys: &[crate::state::StateKey]| {
        for key in keys {
            if !state.contains(key.type_id()) {
                problems.push(Problem {
                    location: location.clone(),
                    message: format!(
                        "the handler takes `State<{ty}>`, but the runtime was given no `{ty}`: add `.state(value)` with a `{ty}` to `Runtime::builder(..)`",
                        ty = key.type_name()
                    ),
                });
            }
        }
    };
    for endpoint in topology.endpoints() {
        need(endpoint_at(&endpoint.decl), endpoint.states);
    }
    for subscription in topology.subscriptions() {
        need(subscription_at(&subscription.decl), subscription.states);
    }
    for consumer in topology.consumers() {
        need(validate::consumer_at(&consumer.decl), consumer.states);
    }
    problems
}

/// Where an endpoint is, for a problem's location.
fn endpoint_at(decl: &EndpointDecl) -> String {
    format!(
        "endpoint `{}` of service `{}` on `{}` (handler `{}`)",
        decl.name, decl.service.name, decl.subject, decl.handler
    )
}

/// Where a core subscription is, for a problem's location.
fn subscription_at(decl: &SubscriptionDecl) -> String {
    format!(
        "subscription to `{}` (handler `{}`)",
        decl.subject, decl.handler
    )
}
