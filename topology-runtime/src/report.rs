//! Reports for operators: [`plan`] (what provisioning would do, without doing it) and
//! [`inspect`] (the state of every declared consumer on the server: does it exist, is anyone
//! bound or pulling, what is pending). `inspect` is how "the consumer exists, bound by nobody"
//! becomes visible. And [`ProvisionReport`], what [`Runtime::provision`](crate::Runtime::provision)
//! did.

use std::fmt;

use std::time::Duration;

pub use crate::provision::Action;
use crate::provision::{ProvisionError, Provisioner, UpdateMode, VERSION_KEY, reconcile};
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
    /// What provisioning would do.
    pub action: Action,
}

/// What provisioning would do, computed by reading the server only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Streams first (sorted by name), then their consumers.
    pub items: Vec<PlanItem>,
}

impl Plan {
    /// Whether provisioning would fail on a conflict.
    pub fn has_conflicts(&self) -> bool {
        self.items
            .iter()
            .any(|i| matches!(i.action, Action::Conflict(_)))
    }
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "provisioning plan:")?;
        for item in &self.items {
            match &item.consumer {
                None => writeln!(f, "  stream `{}`: {}", item.stream, item.action)?,
                Some(c) => writeln!(
                    f,
                    "    consumer `{c}` on `{}`: {}",
                    item.stream, item.action
                )?,
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
    let mut items = Vec::new();
    for decl in topology.streams() {
        let server = provisioner.read_stream(decl.name).await?;
        let consumed = topology.consumed_subjects(decl.name);
        let on_server = server.as_ref().map(|i| &i.config);
        let action = provisioner.stream_action(decl, &consumed, on_server);
        items.push(PlanItem {
            stream: decl.name.to_owned(),
            consumer: None,
            action,
        });
        for c in topology.consumers_of(decl.name) {
            let ConsumerKind::Queue(queue) = &c.decl.kind else {
                items.push(PlanItem {
                    stream: decl.name.to_owned(),
                    consumer: Some(format!("relay of {}", c.decl.handler)),
                    action: Action::PerInstance,
                });
                continue;
            };
            let existing = match server {
                Some(_) => provisioner.read_consumer(decl.name, queue.group).await?,
                None => None,
            };
            let declared = provisioner.declared_consumer_config(decl.name, &c.decl, None);
            if provisioner.is_bind_only() {
                items.push(PlanItem {
                    stream: decl.name.to_owned(),
                    consumer: Some(queue.group.to_owned()),
                    action: reconcile::bound_consumer(
                        &c.decl,
                        &declared,
                        existing.as_ref().map(|i| &i.config),
                    ),
                });
                continue;
            }
            let migrate_from_exists = match queue.migrate_from {
                Some(old) if existing.is_none() && server.is_some() => {
                    provisioner.read_consumer(decl.name, old).await?.is_some()
                }
                _ => false,
            };
            let action = reconcile::consumer(
                &c.decl,
                &declared,
                existing.as_ref().map(|i| &i.config),
                migrate_from_exists,
                &UpdateMode::Update,
            );
            items.push(PlanItem {
                stream: decl.name.to_owned(),
                consumer: Some(queue.group.to_owned()),
                action,
            });
        }
    }
    Ok(Plan { items })
}

/// The state of one declared queue consumer on the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerReport {
    /// The stream.
    pub stream: String,
    /// The consumer (the group).
    pub consumer: String,
    /// The handler declaring it.
    pub handler: String,
    /// What the server holds, or `None` if the consumer does not exist.
    pub server: Option<ServerConsumer>,
    /// With `migrate_from`: the consumer migrated from, while it still exists (paused, it is
    /// deleted by a running new instance once no instance pulls from it).
    pub migrating_from: Option<(String, ServerConsumer)>,
}

/// What the server says about a consumer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerConsumer {
    /// `pull`, `push, group G`, or `push, NO GROUP (plain durable)`.
    pub shape: String,
    /// Whether anyone is consuming: a push consumer with a bound subscriber, or a pull
    /// consumer with waiting pull requests.
    pub active: bool,
    /// Messages not yet delivered.
    pub pending: u64,
    /// Messages delivered but not yet acknowledged.
    pub ack_pending: u64,
    /// Pull requests waiting.
    pub waiting: u64,
    /// The stream sequence below which everything is acknowledged.
    pub ack_floor: u64,
    /// Paused (the old consumer of a migration).
    pub paused: bool,
    /// The version stamped on it (`nats-topology.version`), if any.
    pub version: Option<String>,
}

/// `pull, consumed; pending 0, ack pending 0, waiting pulls 1, ack floor 5`: the form
/// `inspect` and the CLI's `health` print.
impl fmt::Display for ServerConsumer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}, {}; pending {}, ack pending {}, waiting pulls {}, ack floor {}",
            self.shape,
            if self.active {
                "consumed"
            } else {
                "BOUND BY NOBODY (no instance consumes it)"
            },
            self.pending,
            self.ack_pending,
            self.waiting,
            self.ack_floor
        )
    }
}

/// The state of every declared queue consumer: see [`inspect`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inspection {
    /// One report per declared queue consumer.
    pub consumers: Vec<ConsumerReport>,
}

impl fmt::Display for Inspection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "consumers:")?;
        for c in &self.consumers {
            write!(f, "  `{}` on `{}` ({}): ", c.consumer, c.stream, c.handler)?;
            match &c.server {
                None => writeln!(f, "DOES NOT EXIST")?,
                Some(s) => writeln!(f, "{s}")?,
            }
            if let Some((old, s)) = &c.migrating_from {
                writeln!(
                    f,
                    "    migrating from `{old}`: {}; waiting pulls {}, ack pending {}; {}",
                    if s.paused { "paused" } else { "NOT PAUSED" },
                    s.waiting,
                    s.ack_pending,
                    if s.paused {
                        "removal scheduled: deleted by a new instance once no instance pulls from it"
                    } else {
                        "a new instance pauses it"
                    }
                )?;
            }
        }
        Ok(())
    }
}

/// Reads the state of every declared queue consumer. Reads are retried under
/// [`RetryPolicy::default`]; [`Runtime::inspect`](crate::Runtime::inspect) uses the runtime's
/// policy.
pub async fn inspect(
    client: &async_nats::Client,
    topology: &Topology,
) -> Result<Inspection, ProvisionError> {
    inspect_with(
        &Provisioner::new(client.clone(), RetryPolicy::default()),
        topology,
    )
    .await
}

/// [`inspect`] through `provisioner` (its retry policy and request timeout).
pub(crate) async fn inspect_with(
    provisioner: &Provisioner,
    topology: &Topology,
) -> Result<Inspection, ProvisionError> {
    let mut consumers = Vec::new();
    for c in topology.consumers() {
        let ConsumerKind::Queue(queue) = &c.decl.kind else {
            continue;
        };
        let stream = c.decl.stream.name();
        let server = provisioner
            .read_consumer(stream, queue.group)
            .await?
            .map(server_consumer);
        let migrating_from = match queue.migrate_from {
            Some(old) => provisioner
                .read_consumer(stream, old)
                .await?
                .map(|info| (old.to_owned(), server_consumer(info))),
            None => None,
        };
        consumers.push(ConsumerReport {
            stream: stream.to_owned(),
            consumer: queue.group.to_owned(),
            handler: c.decl.handler.to_owned(),
            server,
            migrating_from,
        });
    }
    Ok(Inspection { consumers })
}

/// What inspect shows of a consumer's info.
fn server_consumer(info: async_nats::jetstream::consumer::Info) -> ServerConsumer {
    {
        {
            let shape = match (&info.config.deliver_subject, &info.config.deliver_group) {
                (None, _) => "pull".to_owned(),
                (Some(_), Some(group)) => format!("push, group `{group}`"),
                (Some(_), None) => "push, NO GROUP (plain durable)".to_owned(),
            };
            let push = info.config.deliver_subject.is_some();
            ServerConsumer {
                shape,
                active: if push {
                    info.push_bound
                } else {
                    info.num_waiting > 0
                },
                pending: info.num_pending,
                ack_pending: info.num_ack_pending as u64,
                waiting: info.num_waiting as u64,
                ack_floor: info.ack_floor.stream_sequence,
                paused: info.paused,
                version: info.config.metadata.get(VERSION_KEY).cloned(),
            }
        }
    }
}

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
