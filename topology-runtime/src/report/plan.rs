//! [`plan`]: what provisioning would do, and what is served without provisioning.

use std::fmt;

use super::Action;
use crate::provision::{Approach, ProvisionError, Provisioner, UpdateMode, reconcile};
use crate::registry::Topology;
use crate::retry::RetryPolicy;
use topology_core::model::ConsumerKind;

/// One line of a [`Plan`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanItem {
    /// The stream.
    pub stream: String,
    /// The consumer, or `None` for the stream itself.
    pub consumer: Option<String>,
    /// What the stream is when it is a key-value bucket or an object store, as the plan
    /// prints it (key-value bucket, then the name in backticks).
    pub bucket: Option<String>,
    /// What provisioning would do.
    pub action: Action,
}

/// What is served on core NATS: an endpoint or a core subscription.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Served {
    /// An endpoint of a service.
    Endpoint {
        /// The service's name.
        service: String,
        /// The service's version.
        version: String,
        /// The endpoint's name.
        name: String,
    },
    /// A core subscription (its queue group, if any, is the item's).
    Subscription,
}

/// An endpoint or core subscription in a [`Plan`]: served by every instance, with nothing to
/// provision on the server.
///
/// ```
/// use nats_topology::report::{Served, ServedItem};
///
/// let item = ServedItem {
///     served: Served::Subscription,
///     subject: "cache.invalidate".into(),
///     queue_group: None,
///     concurrency: 1,
///     handler: "app::invalidate".into(),
/// };
/// assert_eq!(
///     item.to_string(),
///     "subscription on `cache.invalidate`, each_instance (every instance receives every \
///      message), concurrency 1 (handler `app::invalidate`)"
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServedItem {
    /// Which.
    pub served: Served,
    /// The subject.
    pub subject: String,
    /// The queue group; `None` for a subscription on every instance (`each_instance`).
    pub queue_group: Option<String>,
    /// Requests or messages handled at once per instance.
    pub concurrency: u32,
    /// The handler.
    pub handler: String,
}

/// `endpoint `get` of service `members@1.2.0` on `members.get`, queue group `q`, concurrency 4
/// (handler `app::get`)`: the form `plan` prints.
impl fmt::Display for ServedItem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.served {
            Served::Endpoint {
                service,
                version,
                name,
            } => write!(
                f,
                "endpoint `{name}` of service `{service}@{version}` on `{}`",
                self.subject
            )?,
            Served::Subscription => write!(f, "subscription on `{}`", self.subject)?,
        }
        match &self.queue_group {
            Some(group) => write!(f, ", queue group `{group}`")?,
            None => write!(f, ", each_instance (every instance receives every message)")?,
        }
        write!(
            f,
            ", concurrency {} (handler `{}`)",
            self.concurrency, self.handler
        )
    }
}

/// What provisioning would do, computed by reading the server only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Streams first (sorted by name), then their consumers.
    pub items: Vec<PlanItem>,
    /// Endpoints (by service, then subject), then core subscriptions (by subject): nothing
    /// to provision, listed so that the plan shows every subscription of the application.
    pub served: Vec<ServedItem>,
}

impl Plan {
    /// Whether provisioning would fail on a conflict.
    pub fn has_conflicts(&self) -> bool {
        self.items
            .iter()
            .any(|i| matches!(i.action, Action::Conflict(_)))
    }

    /// Whether provisioning would fail: on a conflict, or on a declaration refused on this
    /// server.
    pub fn fails(&self) -> bool {
        self.items
            .iter()
            .any(|i| matches!(i.action, Action::Conflict(_) | Action::Refused(_)))
    }
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "provisioning plan:")?;
        for item in &self.items {
            match (&item.consumer, &item.bucket) {
                (None, Some(bucket)) => {
                    writeln!(f, "  {bucket} (stream `{}`): {}", item.stream, item.action)?
                }
                (None, None) => writeln!(f, "  stream `{}`: {}", item.stream, item.action)?,
                (Some(c), _) => writeln!(
                    f,
                    "    consumer `{c}` on `{}`: {}",
                    item.stream, item.action
                )?,
            }
        }
        if !self.served.is_empty() {
            writeln!(f, "served, nothing to provision:")?;
            for item in &self.served {
                writeln!(f, "  {item}")?;
            }
        }
        Ok(())
    }
}

/// Computes what provisioning `topology` would do, reading the server and changing nothing.
/// Reads are retried under [`RetryPolicy::default`]; [`Runtime::plan`](crate::Runtime::plan)
/// uses the runtime's policy.
pub async fn plan(
    client: &async_nats::Client,
    topology: &Topology,
) -> Result<Plan, ProvisionError> {
    plan_with(
        &Provisioner::new(client.clone(), RetryPolicy::default()),
        topology,
    )
    .await
}

/// [`plan`] through `provisioner` (its retry policy and request timeout).
pub(crate) async fn plan_with(
    provisioner: &Provisioner,
    topology: &Topology,
) -> Result<Plan, ProvisionError> {
    // A partitioned consumer is provisioned as the consumers of its partitions.
    let topology = &topology.partitioned();
    let mut items = Vec::new();
    for decl in topology.streams() {
        let server = provisioner.read_stream(decl.name).await?;
        let consumed = topology.consumed_subjects(decl.name);
        let on_server = server.as_ref().map(|i| &i.config);
        let action = match provisioner.stream_approach(decl) {
            Approach::Refuse(refused) => Action::Refused(refused.to_string()),
            _ => provisioner.stream_action(decl, &consumed, on_server),
        };
        items.push(PlanItem {
            stream: decl.name.to_owned(),
            consumer: None,
            bucket: topology
                .bucket_of_stream(decl.name)
                .map(|b| format!("{} `{}`", b.kind.noun(), b.name)),
            action,
        });
        for c in topology.consumers_of(decl.name) {
            let queue = match &c.decl.kind {
                ConsumerKind::Queue(queue) => queue,
                ConsumerKind::Broadcast(relay) => {
                    items.push(PlanItem {
                        stream: decl.name.to_owned(),
                        consumer: Some(format!("{} of {}", relay.noun(), c.decl.handler)),
                        bucket: None,
                        action: Action::PerInstance,
                    });
                    continue;
                }
            };
            if let Some(into) = c.superseded_by {
                // What start-up refuses before the stream routes by partition.
                if let Some(superseded) = topology.superseded(c)
                    && let Err(refused) = provisioner.refuse_superseded(&superseded).await
                {
                    items.push(PlanItem {
                        stream: decl.name.to_owned(),
                        consumer: Some(queue.group.to_owned()),
                        bucket: None,
                        action: Action::Refused(refused.to_string()),
                    });
                    continue;
                }
                // Gone: the migration is done (or there was nothing to migrate).
                let old = match &server {
                    Some(_) => provisioner.read_consumer(decl.name, queue.group).await?,
                    None => None,
                };
                if let Some(old) = old {
                    items.push(PlanItem {
                        stream: decl.name.to_owned(),
                        consumer: Some(queue.group.to_owned()),
                        bucket: None,
                        action: Action::Retire {
                            into: into.to_owned(),
                            deleted: topology.deletes_once_read(c),
                            pending: old.num_pending,
                            ack_pending: old.num_ack_pending,
                        },
                    });
                }
                continue;
            }
            let approach = provisioner.consumer_approach(decl.name, &c.decl, queue.group);
            let existing = match (&approach, &server) {
                (Approach::Refuse(_), _) | (_, None) => None,
                (_, Some(_)) => provisioner.read_consumer(decl.name, queue.group).await?,
            };
            let on_server = existing.as_ref().map(|i| &i.config);
            let declared = provisioner.declared_consumer_config(decl.name, &c.decl, None);
            let action = match approach {
                Approach::Refuse(refused) => Action::Refused(refused.to_string()),
                Approach::Verify => reconcile::bound_consumer(&c.decl, &declared, on_server),
                Approach::Migrate(old) => {
                    let old_exists = existing.is_none()
                        && server.is_some()
                        && provisioner.read_consumer(decl.name, old).await?.is_some();
                    reconcile::consumer(
                        &c.decl,
                        &declared,
                        on_server,
                        old_exists,
                        &UpdateMode::Update,
                    )
                }
                Approach::Ensure => {
                    reconcile::consumer(&c.decl, &declared, on_server, false, &UpdateMode::Update)
                }
            };
            items.push(PlanItem {
                stream: decl.name.to_owned(),
                consumer: Some(queue.group.to_owned()),
                bucket: None,
                action,
            });
        }
    }
    Ok(Plan {
        items,
        served: served(topology),
    })
}

/// The endpoints and core subscriptions of `topology`, as [`Plan::served`] lists them.
fn served(topology: &Topology) -> Vec<ServedItem> {
    let endpoints = topology.endpoints().iter().map(|e| {
        let decl = &e.decl;
        ServedItem {
            served: Served::Endpoint {
                service: decl.service.name.to_owned(),
                version: decl.service.version.to_owned(),
                name: decl.name.to_owned(),
            },
            subject: decl.subject.to_owned(),
            queue_group: Some(decl.queue_group().to_owned()),
            concurrency: decl.effective_concurrency(),
            handler: decl.handler.to_owned(),
        }
    });
    let subscriptions = topology.subscriptions().iter().map(|s| {
        let decl = &s.decl;
        ServedItem {
            served: Served::Subscription,
            subject: decl.subject.to_owned(),
            queue_group: decl.queue_group().map(str::to_owned),
            concurrency: decl.effective_concurrency(),
            handler: decl.handler.to_owned(),
        }
    });
    endpoints.chain(subscriptions).collect()
}
