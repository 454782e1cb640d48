//! Whose permissions: the service, its [`Access`], and where its requests go.

use crate::jsapi::DEFAULT_PREFIX;

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
    pub(super) access: Access,
    pub(super) service: String,
    pub(super) inbox_prefix: String,
    pub(super) api_prefix: String,
    /// Whether the runtime listens to JetStream advisories (not behind an arbitrary API
    /// prefix: [`Role::with_api_prefix`]).
    pub(super) advisories: bool,
    pub(super) publishes: Vec<String>,
    pub(super) into_owned_streams: bool,
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
            advisories: true,
            publishes: Vec::new(),
            into_owned_streams: false,
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
        self.advisories = true;
        self
    }

    /// The JetStream API prefix the runtime uses (as
    /// [`RuntimeBuilder::api_prefix`](crate::RuntimeBuilder::api_prefix)). Behind an arbitrary
    /// prefix (an account import) nothing says which JetStream an advisory comes from, so the
    /// runtime listens to none (its leader watch probes, its consumers notice a lost leader by
    /// silence): no `$JS.EVENT.ADVISORY` subject is granted.
    ///
    /// ```
    /// use nats_topology::export::{self, Role, Verb};
    /// use nats_topology::Topology;
    ///
    /// let imported = export::permissions(&Topology::new(), &Role::owner("billing").with_api_prefix("JS.hub.API"));
    /// assert!(imported.allows(Verb::Publish, "JS.hub.API.INFO"));
    /// assert!(!imported.allows(Verb::Subscribe, "$JS.EVENT.ADVISORY.DOMAIN.LEADER_ELECTED"));
    /// let edge = export::permissions(&Topology::new(), &Role::owner("billing").with_domain("edge"));
    /// assert!(edge.allows(Verb::Subscribe, "$JS.EVENT.ADVISORY.DOMAIN.LEADER_ELECTED"));
    /// ```
    pub fn with_api_prefix(mut self, prefix: impl Into<String>) -> Role {
        self.api_prefix = prefix.into();
        self.advisories = false;
        self
    }

    /// A subject the service publishes to that no handler declares: a publish from outside a
    /// handler (a producer in the same process), or a handler's output declared here rather
    /// than with its consumer's `publishes`. Patterns with `*` and `>` are allowed.
    ///
    /// ```
    /// use nats_topology::export::{self, Role, Verb};
    /// use nats_topology::Topology;
    ///
    /// let role = Role::owner("billing").publishes("invoices.>");
    /// let permissions = export::permissions(&Topology::new(), &role);
    /// assert!(permissions.allows(Verb::Publish, "invoices.paid"));
    /// ```
    pub fn publishes(mut self, subject: impl Into<String>) -> Role {
        self.publishes.push(subject.into());
        self
    }

    /// Grants publishing on every subject of every stream the service owns, as the
    /// permissions did before each handler declared its outputs (`publishes`): for a service
    /// whose code publishes into its streams in ways nothing declares. Wider than needed: a
    /// compromised replica may then inject messages into any of them (work for the other
    /// replicas, say). The generated comment of each such entry says so. Not for
    /// [`Access::Operator`], which publishes nothing.
    ///
    /// ```
    /// use nats_topology::export::{self, Role, Verb};
    /// use nats_topology::model::StreamDecl;
    /// use nats_topology::Topology;
    ///
    /// static ORDERS: StreamDecl = StreamDecl::new("ORDERS", &["orders.>"]);
    /// let topology = Topology::new().stream(ORDERS);
    /// let narrow = export::permissions(&topology, &Role::owner("billing"));
    /// assert!(!narrow.allows(Verb::Publish, "orders.created"));
    /// let wide = export::permissions(&topology, &Role::owner("billing").publish_into_owned_streams());
    /// assert!(wide.allows(Verb::Publish, "orders.created"));
    /// ```
    pub fn publish_into_owned_streams(mut self) -> Role {
        self.into_owned_streams = true;
        self
    }

    /// Whether [`Role::publish_into_owned_streams`] was asked for.
    pub fn publishes_into_owned_streams(&self) -> bool {
        self.into_owned_streams
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
