//! [`inspect`]: the state of every declared queue consumer, the live instances of every
//! declared service, what every declared bucket holds, and where every declared stream lives.

use std::fmt;

use super::buckets::{BucketReport, inspect_buckets};
use super::services::{SERVICE_PING_WINDOW, ServiceReport, inspect_services};
use super::streams::{StreamReport, inspect_streams};
use crate::provision::{ProvisionError, Provisioner, VERSION_KEY};
use crate::registry::Topology;
use crate::retry::RetryPolicy;
use topology_core::model::ConsumerKind;

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

/// The state of every declared queue consumer, and the live instances of every declared
/// service: see [`inspect`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inspection {
    /// One report per declared queue consumer.
    pub consumers: Vec<ConsumerReport>,
    /// One report per declared service, sorted by name.
    pub services: Vec<ServiceReport>,
    /// One report per declared key-value bucket and object store, sorted by name.
    pub buckets: Vec<BucketReport>,
    /// One report per declared stream (buckets aside), sorted by name: where it lives.
    pub streams: Vec<StreamReport>,
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
        if !self.streams.is_empty() {
            writeln!(f, "streams:")?;
            for stream in &self.streams {
                writeln!(f, "  {stream}")?;
            }
        }
        if !self.buckets.is_empty() {
            writeln!(f, "buckets:")?;
            for bucket in &self.buckets {
                writeln!(f, "  {bucket}")?;
            }
        }
        if !self.services.is_empty() {
            writeln!(f, "services:")?;
            for service in &self.services {
                write!(f, "{service}")?;
            }
        }
        Ok(())
    }
}

/// Reads the state of every declared queue consumer (reads retried under
/// [`RetryPolicy::default`]; [`Runtime::inspect`](crate::Runtime::inspect) uses the runtime's
/// policy), then asks every declared service for its live instances and their stats
/// ([`inspect_services`] with [`super::SERVICE_PING_WINDOW`]).
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
        // The consumer a partitioned group migrates from: listed while it exists.
        if c.superseded_by.is_some() && server.is_none() {
            continue;
        }
        // A partitioned group's is listed as a consumer of its own (above).
        let migrating_from = match queue.moves_from() {
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
    let buckets = inspect_buckets(provisioner, topology).await?;
    let streams = inspect_streams(provisioner, topology).await?;
    let client = provisioner.jetstream().client();
    let services = inspect_services(&client, topology, SERVICE_PING_WINDOW).await;
    Ok(Inspection {
        consumers,
        services,
        buckets,
        streams,
    })
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
