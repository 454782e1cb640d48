//! Provisioning: ensure streams and consumers exist as declared, safely when many replicas
//! start at once.
//!
//! Every write is a CREATE first: the server answers an identical CREATE with success, so
//! replicas racing on a fresh stream do not fall into the UPDATE-first cliff (docs/PERFORMANCE.md, "Why CREATE first").
//! Only on "exists with a different configuration" is the server's configuration read and
//! compared, field by field, against what the declaration sets. Transient failures are
//! retried with full jitter under a deadline; configuration conflicts never are.
//!
//! - `client`: the thin JetStream request client (requests, their retry, reads), woken early
//!   by `leader` (the leader watch) when a JetStream leader is elected.
//! - [`Provisioner`] (here), the reconciler above it: `stream`, `consumer` (ensuring each,
//!   deleting consumers; `bound`: verifying them, bind-only), `migrate` (`migrate_from`
//!   beside a running old fleet: pause, drain, create at the floor, retire), `version` (the
//!   stamps that keep an older declaration from reverting a newer one), `priority` (priority
//!   groups refused on a server before 2.11).
//! - `reconcile`: the one decision per kind (update, keep, refuse) that provisioning
//!   executes and `plan` prints.
//! - `error`: [`ProvisionError`] and the classification of API failures.
//! - `config`: declaration -> server configuration; `drift`: server vs declaration.

mod bound;
mod capabilities;
mod client;
mod config;
mod consumer;
mod drift;
mod error;
mod instance;
mod leader;
mod messages;
mod migrate;
mod origins;
mod priority;
pub(crate) mod reconcile;
mod stream;
mod superseded;
mod version;

use async_nats::jetstream::{self, consumer::Info as ConsumerInfo};

use crate::retry::RetryPolicy;

pub use crate::health::OlderDeclaration;
use crate::health::OlderDeclarations;
pub(crate) use config::{PRIORITY_GROUP, push_deliver_subject};

pub(crate) use error::{ApiError, Failure, rejected};
pub use error::{FieldDiff, ProvisionError, ProvisionErrorKind};
pub(crate) use instance::Start;
pub use instance::{ResumePoint, StreamInstance};
pub use leader::LeaderTimings;
pub(crate) use leader::{
    ADVISORY_PREFIX, Advisories, consumer_elected, fleet_channel, meta_elected, stream_elected,
};
pub use reconcile::Action;
pub(crate) use reconcile::Approach;
pub(crate) use stream::uncovered;
pub(crate) use superseded::Superseded;
pub use version::{MIGRATED_FROM_KEY, Precedence, VERSION_KEY, precedence};
pub(crate) use version::{stamped_consumer_config, stamped_stream_config};

/// What ensuring a consumer may change on the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpdateMode {
    /// Apply editable differences (start-up: the declaration is the source of truth).
    Update,
    /// Create if absent, accept what exists (re-ensure after a loss: an old instance in a
    /// rolling deploy must not revert a newer one's configuration). A consumer that has to be
    /// created again starts after `resume` (a queue consumer's last ack floor, a relay's last
    /// handled sequence) when the stream is still the instance that point was read in;
    /// otherwise as declared, as on a first start (never by a sequence of another stream).
    CreateOnly {
        /// Where this instance was, and in which stream instance.
        resume: Option<ResumePoint>,
    },
}

/// The reconciler: ensures streams and consumers as declared (`stream`, `consumer`,
/// `migrate`, `version`), through the JetStream request client beneath it (`client`).
#[derive(Clone)]
pub struct Provisioner {
    client: client::ApiClient,
    /// Whether the server-version warning was given ([`Provisioner::warn_if_server_too_old`]).
    warned_version: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// The last server version read ([`Provisioner::server`]).
    server: capabilities::KnownServer,
    /// The version stamped on what this provisioner creates or updates, overriding the
    /// declarations' own ([`RuntimeBuilder::version`](crate::RuntimeBuilder::version)).
    version: Option<std::sync::Arc<str>>,
    /// Declarations found older than what the server holds (shown in health).
    older: OlderDeclarations,
    /// Verifies owned streams and queue consumers instead of creating or changing them
    /// ([`RuntimeBuilder::bind_only`](crate::RuntimeBuilder::bind_only)).
    bind_only: bool,
}

impl Provisioner {
    /// A provisioner on `client` with `policy` (its `request_timeout` bounds each request).
    pub fn new(client: async_nats::Client, policy: RetryPolicy) -> Self {
        Self::with_api(
            client,
            policy,
            crate::jsapi::JetStreamApi::Local,
            LeaderTimings::default(),
        )
    }

    /// A provisioner whose requests go to `api` (a JetStream domain or API prefix), its
    /// leader watch paced by `timings`.
    pub(crate) fn with_api(
        client: async_nats::Client,
        policy: RetryPolicy,
        api: crate::jsapi::JetStreamApi,
        timings: LeaderTimings,
    ) -> Self {
        Provisioner {
            client: client::ApiClient::new(client, policy, api, timings),
            warned_version: Default::default(),
            server: Default::default(),
            version: None,
            older: OlderDeclarations::default(),
            bind_only: false,
        }
    }

    /// Verifies owned streams and queue consumers instead of creating or updating them (an
    /// operator provisions them); broadcast relays, which only a running instance can
    /// create, are still created.
    pub fn bind_only(mut self, bind_only: bool) -> Self {
        self.bind_only = bind_only;
        self
    }

    /// Whether it only verifies ([`Provisioner::bind_only`]).
    pub fn is_bind_only(&self) -> bool {
        self.bind_only
    }

    /// Stamps `version` on what this provisioner creates or updates, instead of each
    /// declaration's own version.
    pub fn with_version(mut self, version: Option<std::sync::Arc<str>>) -> Self {
        self.version = version;
        self
    }

    /// The declarations found older than the version stamped on the server.
    pub(crate) fn older_declarations(&self) -> &OlderDeclarations {
        &self.older
    }

    /// Which JetStream requests go to.
    pub(crate) fn jetstream_api(&self) -> &crate::jsapi::JetStreamApi {
        self.client.jetstream_api()
    }

    /// Repeating an identical CREATE is safe from nats-server 2.14.5 on: before it, a replica
    /// that was down could recreate the stream from a meta snapshot and lose its data
    /// (nats-server #8413). Says so once per provisioner when the server is older.
    fn warn_if_server_too_old(&self) {
        if self
            .warned_version
            .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            return;
        }
        let version = self.server();
        if version.at_least(capabilities::SAFE_CREATE_SINCE) == Some(false) {
            tracing::warn!(
                server_version = %version,
                "nats-server {version} is older than 2.14.5: concurrent identical stream creates can \
                 make a recovering replica lose the stream's data (nats-server #8413); upgrade the server"
            );
        }
    }

    /// How many provisioning attempts this provisioner has made, retries included.
    pub fn attempts(&self) -> u32 {
        self.client.attempts()
    }

    /// How many of its requests went unanswered for their whole
    /// [`request_timeout`](RetryPolicy::request_timeout).
    pub fn timed_out(&self) -> u32 {
        self.client.timed_out()
    }

    /// The retry policy requests go through.
    pub fn policy(&self) -> &RetryPolicy {
        self.client.policy()
    }

    /// The JetStream context requests go through.
    pub fn jetstream(&self) -> &jetstream::Context {
        self.client.jetstream()
    }

    /// Reads a stream; `None` if it does not exist.
    pub(crate) async fn read_stream(
        &self,
        name: &str,
    ) -> Result<Option<jetstream::stream::Info>, ProvisionError> {
        self.client.read_stream(name).await
    }

    /// Reads a consumer; `None` if it (or its stream) does not exist.
    pub(crate) async fn read_consumer(
        &self,
        stream: &str,
        name: &str,
    ) -> Result<Option<ConsumerInfo>, ProvisionError> {
        self.client.read_consumer(stream, name).await
    }
}

#[cfg(test)]
mod tests;
