//! The NATS permissions one service's user needs, walked from its topology: every subject a
//! replica publishes to or subscribes to (with its queue group when it subscribes in one),
//! each with the declarations that need it, the right to answer requests when it serves
//! endpoints, and nothing else.
//!
//! One walk serves three readers: [`Permissions::server_config`] (a nats-server
//! `authorization` block), [`Permissions::to_json`] (for account JWT tooling), and the
//! runtime, which maps a `Permissions Violation` the server reports back to the declarations
//! that need the denied subject (see [`Health`](crate::Health)).

mod render;
mod role;
mod served;
mod walk;

use std::time::Duration;

use topology_core::model::{Retention, StreamRef};
use topology_core::subject::is_subset;

pub use crate::grant::{Declaration, Verb};
use crate::registry::{MEMBERS_BUCKET, Topology};

#[cfg(test)]
use render::quoted;
pub use role::{Access, Role};
use walk::{Walk, minimal};

/// One declaration's need of a permission, and why.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Need {
    /// Who needs it.
    pub declaration: Declaration,
    /// What for, in a few words.
    pub why: String,
}

/// One allowed subject.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Permission {
    /// Publish or subscribe.
    pub action: Verb,
    /// The subject (a pattern with `*` and `>`, as nats-server reads it).
    pub subject: String,
    /// For a subscription: the only queue group it may be made in (`None`: any, or none).
    pub queue: Option<String>,
    /// Every declaration that needs it (at least one).
    pub needed_by: Vec<Need>,
}

impl Permission {
    /// `"publish $JS.API.STREAM.INFO.ORDERS"`, `"subscribe members.get (queue group q)"`:
    /// for messages.
    pub fn describe(&self) -> String {
        match &self.queue {
            None => format!("{} `{}`", self.action.as_str(), self.subject),
            Some(queue) => format!(
                "{} `{}` (queue group `{queue}`)",
                self.action.as_str(),
                self.subject
            ),
        }
    }

    /// The entry as nats-server and user JWTs write it: the subject, then the queue group
    /// after a space when there is one (`"members.get q"`).
    pub fn pattern(&self) -> String {
        match &self.queue {
            None => self.subject.clone(),
            Some(queue) => format!("{} {queue}", self.subject),
        }
    }

    /// Whether this entry grants everything `other` grants (so `other` is not needed).
    fn covers(&self, other: &Permission) -> bool {
        self.action == other.action
            && is_subset(&other.subject, &self.subject)
            && (self.queue.is_none() || self.queue == other.queue)
    }
}

/// The right to publish one answer to the reply subject of each request received, whatever
/// it is (nats-server's `allow_responses`, a user JWT's `resp`): what lets a service answer
/// requesters whose inboxes it may not publish to otherwise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Responses {
    /// Answers allowed per request.
    pub max: u32,
    /// How long after a request its answer is allowed: nats-server's default (2 minutes), or
    /// the longest endpoint `timeout` when that is longer.
    pub expires: Duration,
    /// What answers requests: the endpoints, and every service's `$SRV` subjects.
    pub needed_by: Vec<Need>,
}

/// nats-server's `allow_responses` expiry when none is given.
pub const DEFAULT_RESPONSE_EXPIRY: Duration = Duration::from_secs(120);

/// The permissions of one service's user: see [`permissions`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Permissions {
    /// Whose they are.
    pub role: Role,
    /// Every allowed subject, publish first, each once; no entry is covered by another.
    pub entries: Vec<Permission>,
    /// The right to answer requests, when the topology serves endpoints or services.
    pub responses: Option<Responses>,
}

/// The publish and subscribe allow lists of `role`'s user for `topology`: exactly what its
/// replicas use (or, for [`Access::Operator`], what provisioning uses), each entry with the
/// declarations that need it.
///
/// ```
/// use nats_topology::export::{self, Verb, Role};
/// use nats_topology::model::{ConsumerDecl, QueueDecl, StreamDecl, StreamRef};
/// use nats_topology::{HandlerError, Topology};
///
/// static ORDERS: StreamDecl = StreamDecl::new("ORDERS", &["orders.>"]);
/// let topology = Topology::new().consumer(
///     ConsumerDecl::queue("billing::on_order", StreamRef::Declared(&ORDERS), QueueDecl::new("billing")),
///     |_| Box::pin(async { Ok::<(), HandlerError>(()) }),
/// );
/// let permissions = export::permissions(&topology, &Role::owner("billing"));
/// assert!(permissions.allows(Verb::Publish, "$JS.API.CONSUMER.MSG.NEXT.ORDERS.billing"));
/// assert!(permissions.allows(Verb::Subscribe, "_INBOX_billing.x1"));
/// assert!(!permissions.allows(Verb::Publish, "$JS.API.STREAM.DELETE.ORDERS"));
/// let block = permissions.server_config("s3cret-from-a-vault");
/// assert!(block.contains("\"$JS.API.STREAM.CREATE.ORDERS\""));
/// ```
///
/// An endpoint is received in its queue group only, and answered through `allow_responses`:
///
/// ```
/// use nats_topology::export::{self, Verb, Role};
/// use nats_topology::model::{EndpointDecl, ServiceDecl};
/// use nats_topology::{ServiceError, Topology};
///
/// static MEMBERS: ServiceDecl = ServiceDecl::new("members", "1.2.0");
/// let topology = Topology::new().endpoint(
///     EndpointDecl::new("app::get_member", &MEMBERS, "get", "members.get"),
///     |request| Box::pin(async move { Ok::<_, ServiceError>(request.payload().clone()) }),
/// );
/// let permissions = export::permissions(&topology, &Role::owner("members"));
/// assert!(permissions.allows_queue("members.get", "q"));
/// assert!(!permissions.allows(Verb::Subscribe, "members.get")); // not without the group
/// assert!(permissions.allows(Verb::Subscribe, "$SRV.PING.members.Yq2w8"));
/// assert!(permissions.allows_responses());
/// assert!(permissions.permissions_map().contains("\"members.get q\","));
/// ```
pub fn permissions(topology: &Topology, role: &Role) -> Permissions {
    // A partitioned consumer is granted as the consumers of its partitions, and the members'
    // bucket they share.
    let topology = &topology.partitioned();
    let mut walk = Walk {
        role,
        api: role.api_prefix.clone(),
        entries: Vec::new(),
        responses: Vec::new(),
    };
    walk.service();
    for stream in topology.streams() {
        walk.stream(stream.name, stream.subjects, stream.external);
    }
    for bucket in topology.buckets() {
        walk.bucket(bucket);
    }
    for consumer in topology.consumers() {
        let decl = &consumer.decl;
        // A consumer of a stream named only by string: the stream is someone else's, but the
        // runtime still reads it (and checks that it carries the consumer's subjects).
        if let StreamRef::Named(name) = decl.stream
            && topology.find_stream(name).is_none()
        {
            walk.stream(name, &[], true);
        }
        let superseded = consumer.superseded_by.is_some();
        walk.consumer(decl, retention(topology, decl.stream), superseded);
        // The last partition of a group migrated from: the checks on the old group as a whole.
        if let (true, Some(p)) = (superseded, consumer.partition)
            && p.index + 1 == p.of
        {
            walk.old_partitions(decl, (p.group, p.of));
        }
        if consumer.partition.is_some_and(|p| p.index == 0) && walk.consumes() {
            let subject = format!("{}.STREAM.PURGE.KV_{MEMBERS_BUCKET}", walk.api);
            let declaration = Declaration::Consumer {
                stream: decl.stream.name().to_owned(),
                handler: decl.handler.to_owned(),
            };
            let why = "a replica of a partitioned group removes its key from the members' bucket \
                       when it drains, so that the others take its partitions at once";
            walk.add(Verb::Publish, subject, declaration.clone(), why);
            if consumer.partition.is_some_and(|p| p.key.is_some()) {
                let subject = format!("{}.STREAM.MSG.GET.{}", walk.api, decl.stream.name());
                let why = "a partition reads its next message from the stream while one runs, to \
                           run it as soon as that one is handled (`partitions_early`)";
                walk.add(Verb::Publish, subject, declaration, why);
            }
        }
    }
    walk.served(topology);
    for subject in &role.publishes {
        walk.add(
            Verb::Publish,
            subject.clone(),
            Declaration::Service,
            "declared with `Role::publishes` (`--publishes`): the service publishes here, \
             from outside its handlers or without their `publishes`",
        );
    }
    let responses = (!walk.responses.is_empty()).then(|| Responses {
        max: 1,
        expires: topology
            .endpoints()
            .iter()
            .filter_map(|e| e.decl.timeout)
            .fold(DEFAULT_RESPONSE_EXPIRY, Duration::max),
        needed_by: walk.responses,
    });
    Permissions {
        role: role.clone(),
        entries: minimal(walk.entries),
        responses,
    }
}

/// The retention of the stream `stream` names, when it is declared here: an owned stream's
/// (the server's default, limits, when not set), an external one's when it says.
fn retention(topology: &Topology, stream: StreamRef) -> Option<Retention> {
    let decl = topology.find_stream(stream.name()).or(match stream {
        StreamRef::Declared(decl) => Some(decl),
        StreamRef::Named(_) => None,
    })?;
    match (decl.retention, decl.external) {
        (Some(retention), _) => Some(retention),
        (None, false) => Some(Retention::Limits),
        (None, true) => None,
    }
}

impl Permissions {
    /// Whether `subject` is allowed for `action` (a literal subject, or a subscription's
    /// pattern, which every entry must cover as nats-server checks it); a subscription in no
    /// queue group.
    pub fn allows(&self, action: Verb, subject: &str) -> bool {
        self.entries
            .iter()
            .any(|e| e.action == action && e.queue.is_none() && is_subset(subject, &e.subject))
    }

    /// Whether a subscription to `subject` in queue group `queue` is allowed, as nats-server
    /// decides it: an entry without a queue group allows it, unless entries with queue groups
    /// match the subject too, in which case one of them must name `queue`.
    pub fn allows_queue(&self, subject: &str, queue: &str) -> bool {
        let matching = || {
            self.entries
                .iter()
                .filter(|e| e.action == Verb::Subscribe && is_subset(subject, &e.subject))
        };
        let mut grouped = matching().filter_map(|e| e.queue.as_deref()).peekable();
        if grouped.peek().is_some() {
            grouped.any(|q| q == queue)
        } else {
            matching().any(|e| e.queue.is_none())
        }
    }

    /// Whether answering requests is allowed ([`Responses`]).
    pub fn allows_responses(&self) -> bool {
        self.responses.is_some()
    }

    /// These permissions without the right to answer requests (for checking that it is
    /// needed).
    pub fn without_responses(&self) -> Permissions {
        Permissions {
            responses: None,
            ..self.clone()
        }
    }

    /// The entries that allow `action` on `subject` (in any queue group): where a denial of it
    /// comes from.
    pub fn granting(&self, action: Verb, subject: &str) -> impl Iterator<Item = &Permission> {
        self.entries
            .iter()
            .filter(move |e| e.action == action && is_subset(subject, &e.subject))
    }

    /// The entries of one action, in order.
    pub fn of(&self, action: Verb) -> impl Iterator<Item = &Permission> {
        self.entries.iter().filter(move |e| e.action == action)
    }

    /// These permissions without the entry at `index` (for checking that each one is
    /// needed).
    pub fn without(&self, index: usize) -> Permissions {
        let mut entries = self.entries.clone();
        entries.remove(index);
        Permissions {
            role: self.role.clone(),
            entries,
            responses: self.responses.clone(),
        }
    }
}

#[cfg(test)]
mod tests;
