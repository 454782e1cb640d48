//! The NATS permissions one service's user needs, walked from its topology: every subject a
//! replica publishes to or subscribes to, each with the declarations that need it, and
//! nothing else.
//!
//! One walk serves three readers: [`Permissions::server_config`] (a nats-server
//! `authorization` block), [`Permissions::to_json`] (for account JWT tooling), and the
//! runtime, which maps a `Permissions Violation` the server reports back to the declarations
//! that need the denied subject (see [`Health`](crate::Health)).

use std::fmt::Write as _;

use topology_core::model::{AckMode, ConsumerKind, Delivery, StreamRef};
use topology_core::subject::is_subset;

use crate::jsapi::DEFAULT_PREFIX;
use crate::provision::{ADVISORY_PREFIX, FLEET_PREFIX};
use crate::registry::Topology;

/// What a service's user is allowed to do with its streams and consumers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Access {
    /// Creates and updates its own streams and consumers, consumes and publishes: the
    /// runtime's default.
    Owner,
    /// Consumes and publishes; its streams and consumers are provisioned by an operator (the
    /// CLI's `provision`, or infrastructure as code). No create, update or delete rights,
    /// except for the per-instance consumers of broadcast relays, which only a running
    /// instance can create. The runtime verifies instead of provisioning
    /// ([`RuntimeBuilder::bind_only`](crate::RuntimeBuilder::bind_only)).
    BindOnly,
    /// What the CLI's `provision` (and `plan`, `inspect`) need: create, update and read the
    /// streams and queue consumers, migrate, and nothing of consuming or publishing.
    Operator,
}

impl Access {
    /// `owner`, `bind-only` or `operator`: as the CLI spells it.
    pub const fn as_str(self) -> &'static str {
        match self {
            Access::Owner => "owner",
            Access::BindOnly => "bind-only",
            Access::Operator => "operator",
        }
    }

    /// Parses the CLI's spelling.
    pub fn parse(text: &str) -> Option<Access> {
        match text {
            "owner" => Some(Access::Owner),
            "bind-only" => Some(Access::BindOnly),
            "operator" => Some(Access::Operator),
            _ => None,
        }
    }
}

/// Whose permissions to generate: the service, its [`Access`], and where its requests go.
///
/// ```
/// use nats_topology::export::{Access, Role};
///
/// let role = Role::owner("billing");
/// assert_eq!(role.access(), Access::Owner);
/// // Connect with the same prefix: `connect_options().custom_inbox_prefix("_INBOX_billing")`.
/// assert_eq!(role.inbox_prefix(), "_INBOX_billing");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Role {
    access: Access,
    service: String,
    inbox_prefix: String,
    api_prefix: String,
    publishes: Vec<String>,
}

impl Role {
    /// A role with `access` for the service named `service` (the user's name in the
    /// generated block; any character that cannot be in a subject token becomes `_`).
    pub fn new(access: Access, service: &str) -> Role {
        let service: String = service
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        Role {
            access,
            inbox_prefix: format!("_INBOX_{service}"),
            service,
            api_prefix: DEFAULT_PREFIX.to_owned(),
            publishes: Vec::new(),
        }
    }

    /// [`Access::Owner`] for `service`.
    pub fn owner(service: &str) -> Role {
        Role::new(Access::Owner, service)
    }

    /// [`Access::BindOnly`] for `service`.
    pub fn bind_only(service: &str) -> Role {
        Role::new(Access::BindOnly, service)
    }

    /// [`Access::Operator`] for `service`.
    pub fn operator(service: &str) -> Role {
        Role::new(Access::Operator, service)
    }

    /// The inbox prefix the service's connection uses (`_INBOX_<service>` unless set):
    /// replies come only to its own inboxes, not to `_INBOX.>` of every service. Connect with
    /// the same one (`NATS_INBOX_PREFIX`, or `connect_options().custom_inbox_prefix(..)`).
    pub fn with_inbox_prefix(mut self, prefix: impl Into<String>) -> Role {
        self.inbox_prefix = prefix.into();
        self
    }

    /// The JetStream domain the runtime talks to (as
    /// [`RuntimeBuilder::domain`](crate::RuntimeBuilder::domain)): API subjects are under
    /// `$JS.<domain>.API`.
    pub fn with_domain(mut self, domain: &str) -> Role {
        self.api_prefix = format!("$JS.{domain}.API");
        self
    }

    /// The JetStream API prefix the runtime uses (as
    /// [`RuntimeBuilder::api_prefix`](crate::RuntimeBuilder::api_prefix)).
    pub fn with_api_prefix(mut self, prefix: impl Into<String>) -> Role {
        self.api_prefix = prefix.into();
        self
    }

    /// A subject the handlers publish to besides the subjects of the streams the service owns
    /// (which are granted already: the service publishes into its own streams).
    pub fn publishes(mut self, subject: impl Into<String>) -> Role {
        self.publishes.push(subject.into());
        self
    }

    /// Its access.
    pub fn access(&self) -> Access {
        self.access
    }

    /// The service's name, as the user's name.
    pub fn service(&self) -> &str {
        &self.service
    }

    /// The inbox prefix granted.
    pub fn inbox_prefix(&self) -> &str {
        &self.inbox_prefix
    }

    /// The JetStream API prefix granted.
    pub fn api_prefix(&self) -> &str {
        &self.api_prefix
    }
}

/// Publish or subscribe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Action {
    /// Publishing to the subject (a JetStream API request is a publish).
    Publish,
    /// Subscribing to the subject.
    Subscribe,
}

impl Action {
    /// `publish` or `subscribe`, as in a nats-server `permissions` block.
    pub const fn as_str(self) -> &'static str {
        match self {
            Action::Publish => "publish",
            Action::Subscribe => "subscribe",
        }
    }
}

/// What needs a permission: the whole service, one stream, or one consumer.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Declaration {
    /// Every replica, whatever it consumes (its inboxes, the leader watch).
    Service,
    /// A stream.
    Stream(String),
    /// A queue consumer or a broadcast relay of `stream`, declared by `handler`.
    Consumer {
        /// The stream it reads.
        stream: String,
        /// The declaring handler's path.
        handler: String,
    },
}

impl std::fmt::Display for Declaration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Declaration::Service => f.write_str("every replica"),
            Declaration::Stream(name) => write!(f, "stream `{name}`"),
            Declaration::Consumer { stream, handler } => {
                write!(f, "consumer `{handler}` of stream `{stream}`")
            }
        }
    }
}

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
    pub action: Action,
    /// The subject (a pattern with `*` and `>`, as nats-server reads it).
    pub subject: String,
    /// Every declaration that needs it (at least one).
    pub needed_by: Vec<Need>,
}

impl Permission {
    /// `"publish $JS.API.STREAM.INFO.ORDERS"`: for messages.
    pub fn describe(&self) -> String {
        format!("{} `{}`", self.action.as_str(), self.subject)
    }
}

/// The permissions of one service's user: see [`permissions`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Permissions {
    /// Whose they are.
    pub role: Role,
    /// Every allowed subject, publish first, each once; no entry is covered by another.
    pub entries: Vec<Permission>,
}

/// The publish and subscribe allow lists of `role`'s user for `topology`: exactly what its
/// replicas use (or, for [`Access::Operator`], what provisioning uses), each entry with the
/// declarations that need it.
///
/// ```
/// use nats_topology::export::{self, Action, Role};
/// use nats_topology::model::{ConsumerDecl, QueueDecl, StreamDecl, StreamRef};
/// use nats_topology::{HandlerError, Topology};
///
/// static ORDERS: StreamDecl = StreamDecl::new("ORDERS", &["orders.>"]);
/// let topology = Topology::new().consumer(
///     ConsumerDecl::queue("billing::on_order", StreamRef::Declared(&ORDERS), QueueDecl::new("billing")),
///     |_| Box::pin(async { Ok::<(), HandlerError>(()) }),
/// );
/// let permissions = export::permissions(&topology, &Role::owner("billing"));
/// assert!(permissions.allows(Action::Publish, "$JS.API.CONSUMER.MSG.NEXT.ORDERS.billing"));
/// assert!(permissions.allows(Action::Subscribe, "_INBOX_billing.x1"));
/// assert!(!permissions.allows(Action::Publish, "$JS.API.STREAM.DELETE.ORDERS"));
/// let block = permissions.server_config("s3cret-from-a-vault");
/// assert!(block.contains("\"$JS.API.STREAM.CREATE.ORDERS\""));
/// ```
pub fn permissions(topology: &Topology, role: &Role) -> Permissions {
    let mut walk = Walk {
        role,
        api: role.api_prefix.clone(),
        entries: Vec::new(),
    };
    walk.service();
    for stream in topology.streams() {
        walk.stream(stream.name, stream.subjects, stream.external);
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
        walk.consumer(decl);
    }
    for subject in &role.publishes {
        walk.add(
            Action::Publish,
            subject.clone(),
            Declaration::Service,
            "declared with `Role::publishes`",
        );
    }
    Permissions {
        role: role.clone(),
        entries: minimal(walk.entries),
    }
}

struct Walk<'a> {
    role: &'a Role,
    api: String,
    entries: Vec<Permission>,
}

impl Walk<'_> {
    fn add(&mut self, action: Action, subject: String, declaration: Declaration, why: &str) {
        let need = Need {
            declaration,
            why: why.to_owned(),
        };
        match self
            .entries
            .iter_mut()
            .find(|e| e.action == action && e.subject == subject)
        {
            Some(entry) => {
                if !entry.needed_by.contains(&need) {
                    entry.needed_by.push(need);
                }
            }
            None => self.entries.push(Permission {
                action,
                subject,
                needed_by: vec![need],
            }),
        }
    }

    fn api(&mut self, request: String, declaration: Declaration, why: &str) {
        let subject = format!("{}.{request}", self.api);
        self.add(Action::Publish, subject, declaration, why);
    }

    fn owns(&self) -> bool {
        self.role.access != Access::BindOnly
    }

    fn consumes(&self) -> bool {
        self.role.access != Access::Operator
    }

    /// What every replica (and the operator's CLI) uses whatever it declares.
    fn service(&mut self) {
        let inbox = format!("{}.>", self.role.inbox_prefix);
        self.add(
            Action::Subscribe,
            inbox,
            Declaration::Service,
            "replies to this service's requests: JetStream API answers, pulled messages, \
             publish and ack confirmations",
        );
        self.api(
            "INFO".to_owned(),
            Declaration::Service,
            "asked every heartbeat whether JetStream answers through this server (the reach \
             watch), and probed by the leader watch while JetStream has no leader",
        );
        for advisory in [
            "DOMAIN.LEADER_ELECTED",
            "STREAM.LEADER_ELECTED.>",
            "CONSUMER.LEADER_ELECTED.>",
        ] {
            self.add(
                Action::Subscribe,
                format!("{ADVISORY_PREFIX}.{advisory}"),
                Declaration::Service,
                "the leader watch: an election wakes the requests that wait for it",
            );
        }
        let fleet = format!("{FLEET_PREFIX}.*.{}", self.api);
        for action in [Action::Publish, Action::Subscribe] {
            self.add(
                action,
                fleet.clone(),
                Declaration::Service,
                "the leader watch's fleet channel: replicas that wait on one JetStream tell \
                 each other when it answers",
            );
        }
    }

    fn stream(&mut self, name: &str, subjects: &[&str], external: bool) {
        let declaration = Declaration::Stream(name.to_owned());
        self.api(
            format!("STREAM.INFO.{name}"),
            declaration.clone(),
            if external {
                "verified at start-up (owned elsewhere), read by health and `inspect`"
            } else {
                "read before it is provisioned, by health and by `inspect`"
            },
        );
        if external {
            return;
        }
        if self.owns() {
            self.api(
                format!("STREAM.CREATE.{name}"),
                declaration.clone(),
                "created at start-up when missing",
            );
            self.api(
                format!("STREAM.UPDATE.{name}"),
                declaration.clone(),
                "updated when an editable field drifted",
            );
        }
        if self.consumes() {
            for subject in subjects {
                self.add(
                    Action::Publish,
                    (*subject).to_owned(),
                    declaration.clone(),
                    "the handlers publish into the streams the service owns \
                     (`Context::publish`)",
                );
            }
        }
    }

    fn consumer(&mut self, decl: &topology_core::model::ConsumerDecl) {
        let stream = decl.stream.name();
        let declaration = Declaration::Consumer {
            stream: stream.to_owned(),
            handler: decl.handler.to_owned(),
        };
        let queue = match &decl.kind {
            ConsumerKind::Queue(queue) => queue,
            ConsumerKind::Broadcast(_) => {
                if self.consumes() {
                    self.relay(stream, decl, declaration);
                }
                return;
            }
        };
        let name = queue.group;
        self.api(
            format!("CONSUMER.INFO.{stream}.{name}"),
            declaration.clone(),
            "read before it is provisioned, while it runs (liveness), by health and `inspect`",
        );
        if self.owns() {
            self.api(
                create_subject(stream, name, decl.subjects),
                declaration.clone(),
                "created at start-up when missing, updated when an editable field drifted",
            );
            self.api(
                format!("CONSUMER.LIST.{stream}"),
                declaration.clone(),
                "after a loss: a consumer that a newer declaration migrated from is not created \
                 again",
            );
        }
        if let Some(old) = queue.migrate_from
            && self.owns()
        {
            self.api(
                format!("CONSUMER.INFO.{stream}.{old}"),
                declaration.clone(),
                "`migrate_from`: reads the old consumer until it is paused and drained",
            );
            self.api(
                format!("CONSUMER.PAUSE.{stream}.{old}"),
                declaration.clone(),
                "`migrate_from`: pauses the old consumer",
            );
            self.api(
                format!("CONSUMER.DELETE.{stream}.{old}"),
                declaration.clone(),
                "`migrate_from` on a work-queue stream: deletes the drained old consumer",
            );
        }
        if !self.consumes() {
            return;
        }
        self.add(
            Action::Subscribe,
            format!("{ADVISORY_PREFIX}.CONSUMER.LEADER_ELECTED.{stream}.{name}"),
            declaration.clone(),
            "pulls again at once when its consumer's leader changes",
        );
        match queue.delivery {
            Delivery::Pull => self.api(
                format!("CONSUMER.MSG.NEXT.{stream}.{name}"),
                declaration.clone(),
                "pulls its messages",
            ),
            Delivery::Push => self.add(
                Action::Subscribe,
                crate::provision::push_deliver_subject(stream, name),
                declaration.clone(),
                "receives its pushed messages (queue group)",
            ),
        }
        self.add(
            Action::Publish,
            format!("$JS.ACK.{stream}.{name}.>"),
            declaration.clone(),
            match queue.ack {
                Some(AckMode::Confirmed) => {
                    "acknowledges, naks, terminates and keeps its messages in progress; \
                     confirmed acks are requests whose answers come to the inbox"
                }
                _ => "acknowledges, naks, terminates and keeps its messages in progress",
            },
        );
        if let Some(subject) = queue.dead_letter {
            self.add(
                Action::Publish,
                subject.to_owned(),
                declaration,
                "publishes a message it gives up on (`dead_letter`)",
            );
        }
    }

    /// A relay's consumer is created per instance under a name no one knows in advance: the
    /// grant covers any consumer name on the stream (subject permissions match whole tokens).
    fn relay(&mut self, stream: &str, decl: &topology_core::model::ConsumerDecl, d: Declaration) {
        self.api(
            create_subject(stream, "*", decl.subjects),
            d.clone(),
            "creates this instance's relay consumer (its name is per instance)",
        );
        self.api(
            format!("CONSUMER.INFO.{stream}.*"),
            d.clone(),
            "reads this instance's relay consumer while it runs (liveness)",
        );
        self.api(
            format!("CONSUMER.DELETE.{stream}.*"),
            d.clone(),
            "deletes this instance's relay consumer when it stops",
        );
        self.api(
            format!("CONSUMER.MSG.NEXT.{stream}.*"),
            d.clone(),
            "pulls its messages",
        );
        self.add(
            Action::Subscribe,
            format!("{ADVISORY_PREFIX}.CONSUMER.LEADER_ELECTED.{stream}.*"),
            d.clone(),
            "pulls again at once when its consumer's leader changes",
        );
        self.add(
            Action::Publish,
            format!("$JS.ACK.{stream}.*.>"),
            d,
            "acknowledges its messages",
        );
    }
}

/// The request that creates consumer `name`: the filter is part of the subject when there is
/// exactly one (as the runtime sends it).
fn create_subject(stream: &str, name: &str, filters: &[&str]) -> String {
    match filters {
        [one] => format!("CONSUMER.CREATE.{stream}.{name}.{one}"),
        _ => format!("CONSUMER.CREATE.{stream}.{name}"),
    }
}

/// Drops every entry another entry of the same action covers, giving its needs to an entry
/// that covers it and is itself kept; sorted, publish first.
fn minimal(mut entries: Vec<Permission>) -> Vec<Permission> {
    entries.sort_by(|a, b| (a.action, &a.subject).cmp(&(b.action, &b.subject)));
    let covers = |j: usize, i: usize, entries: &[Permission]| {
        j != i
            && entries[j].action == entries[i].action
            && is_subset(&entries[i].subject, &entries[j].subject)
    };
    let covered: Vec<bool> = (0..entries.len())
        .map(|i| (0..entries.len()).any(|j| covers(j, i, &entries)))
        .collect();
    let mut needs: Vec<Vec<Need>> = entries.iter().map(|e| e.needed_by.clone()).collect();
    for i in (0..entries.len()).filter(|&i| covered[i]) {
        // Covering is transitive: some entry that covers this one is not covered itself.
        let Some(j) = (0..entries.len()).find(|&j| !covered[j] && covers(j, i, &entries)) else {
            continue;
        };
        for need in std::mem::take(&mut needs[i]) {
            if !needs[j].contains(&need) {
                needs[j].push(need);
            }
        }
    }
    entries
        .into_iter()
        .zip(needs)
        .zip(covered)
        .filter(|(_, covered)| !covered)
        .map(|((entry, needed_by), _)| Permission { needed_by, ..entry })
        .collect()
}

impl Permissions {
    /// Whether `subject` is allowed for `action` (a literal subject, or a subscription's
    /// pattern, which every entry must cover as nats-server checks it).
    pub fn allows(&self, action: Action, subject: &str) -> bool {
        self.entries
            .iter()
            .any(|e| e.action == action && is_subset(subject, &e.subject))
    }

    /// The entries that allow `action` on `subject`: where a denial of it comes from.
    pub fn granting(&self, action: Action, subject: &str) -> impl Iterator<Item = &Permission> {
        self.entries
            .iter()
            .filter(move |e| e.action == action && is_subset(subject, &e.subject))
    }

    /// The entries of one action, in order.
    pub fn of(&self, action: Action) -> impl Iterator<Item = &Permission> {
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
        }
    }

    /// The `permissions` map alone (`{ publish = { allow = [..] }, subscribe = { .. } }`),
    /// one comment per entry saying which declarations need it: to embed in an `accounts`
    /// block or a user of one's own.
    pub fn permissions_map(&self) -> String {
        let mut out = String::from("{\n");
        for action in [Action::Publish, Action::Subscribe] {
            let _ = writeln!(out, "  {} = {{\n    allow = [", action.as_str());
            for entry in self.of(action) {
                for need in &entry.needed_by {
                    let _ = writeln!(out, "      # {}: {}", need.declaration, need.why);
                }
                let _ = writeln!(out, "      {},", quoted(&entry.subject));
            }
            out.push_str("    ]\n  }\n");
        }
        out.push('}');
        out
    }

    /// A nats-server `authorization` block with one user, the service, under exactly these
    /// permissions. `password` is written as given: pass a reference such as
    /// `"$BILLING_PASSWORD"` (nats-server reads it from the environment) or a bcrypt hash
    /// (`nats server passwd`) rather than a secret.
    pub fn server_config(&self, password: &str) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# The permissions of service `{}` (role `{}`), generated by nats-topology from its \
             topology.\n# Connect it with the inbox prefix `{}` (NATS_INBOX_PREFIX).",
            self.role.service,
            self.role.access.as_str(),
            self.role.inbox_prefix
        );
        out.push_str("authorization {\n  users = [\n    {\n");
        let _ = writeln!(out, "      user: {}", quoted(&self.role.service));
        let password = if password.starts_with('$') {
            password.to_owned()
        } else {
            quoted(password)
        };
        let _ = writeln!(out, "      password: {password}");
        let map = self.permissions_map().replace('\n', "\n      ");
        let _ = writeln!(out, "      permissions: {map}");
        out.push_str("    }\n  ]\n}\n");
        out
    }

    /// The same as JSON: `{"service", "role", "inbox_prefix", "pub": {"allow": [..]}, "sub":
    /// {"allow": [..]}, "needed_by": {subject: [..]}}`, the shape of a user JWT's
    /// permissions (`nsc` and the JWT libraries read `pub` and `sub`).
    pub fn to_json(&self) -> serde_json::Value {
        let allow = |action| {
            self.of(action)
                .map(|e| serde_json::Value::String(e.subject.clone()))
                .collect::<Vec<_>>()
        };
        let needed_by = |action| {
            self.of(action)
                .map(|e| {
                    let needs = e
                        .needed_by
                        .iter()
                        .map(|n| format!("{}: {}", n.declaration, n.why))
                        .collect::<Vec<_>>();
                    (e.subject.clone(), serde_json::json!(needs))
                })
                .collect::<serde_json::Map<_, _>>()
        };
        serde_json::json!({
            "service": self.role.service,
            "role": self.role.access.as_str(),
            "inbox_prefix": self.role.inbox_prefix,
            "pub": { "allow": allow(Action::Publish) },
            "sub": { "allow": allow(Action::Subscribe) },
            "needed_by": {
                "pub": needed_by(Action::Publish),
                "sub": needed_by(Action::Subscribe),
            },
        })
    }
}

/// A subject quoted for a nats-server configuration file.
fn quoted(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests;
