//! Consumers: ensure a queue consumer or relay (CREATE first; compare only on conflict,
//! stamped with the declaring version), never resurrect one migrated away from, delete.

use async_nats::jetstream::{ErrorCode, consumer, stream};
use serde::Serialize;

use super::config::apply_editable_consumer_fields;
use super::reconcile::{self, Action, Approach};
use super::version::{MIGRATED_FROM_KEY, VERSION_KEY, stamped_consumer_config};
use super::{
    ApiError, Failure, ProvisionError, ProvisionErrorKind, Provisioner, ResumePoint, Start,
    StreamInstance, UpdateMode, rejected,
};
use topology_core::model::{ConsumerDecl, ConsumerKind};

/// A consumer that a migration created from another one (its `migrated-from` metadata).
struct Successor {
    name: String,
    /// Its version stamp (`unknown` when it has none).
    version: String,
}

impl Provisioner {
    /// Reconciles a consumer on `stream` with the server (CREATE, then what
    /// `reconcile::consumer` decides) and returns its info. A queue consumer is the durable
    /// named by its group; a broadcast relay is an ephemeral named `relay_name`.
    ///
    /// A queue consumer declaring `migrate_from = "old"` first moves from `old` if it exists,
    /// safely beside a running old fleet: `old` is paused and drained, then the new consumer is
    /// created at its ack floor + 1 (a work-queue stream: `old` is deleted and the new one
    /// delivers what remains); see `migrate.rs` and docs/DEPLOYS.md. Refused on a server
    /// without consumer pause (before 2.11).
    ///
    /// Queue consumers are stamped with the declaring version; an editable update declared by
    /// an older version than the server's stamp is not applied (recorded for health). After a
    /// loss ([`UpdateMode::CreateOnly`]) a queue consumer that a newer declaration migrated
    /// away from is not created again ([`ProvisionErrorKind::Superseded`]).
    pub async fn reconcile_consumer(
        &self,
        stream: &stream::Info,
        decl: &ConsumerDecl,
        relay_name: Option<&str>,
        mode: &UpdateMode,
    ) -> Result<consumer::Info, ProvisionError> {
        let stream_name = stream.config.name.as_str();
        let workqueue = stream.config.retention == stream::RetentionPolicy::WorkQueue;
        let mut config = self.declared_consumer_config(stream_name, decl, relay_name);
        let declared_start = config.deliver_policy;
        if let UpdateMode::CreateOnly {
            resume: Some(point),
        } = mode
            // A work-queue stream holds only what is unacknowledged: deliver-all is exact.
            && !workqueue
        {
            config.deliver_policy = resumed_start(stream, decl, &config, point);
        }
        let name = config
            .name
            .clone()
            .expect("consumer_config always names the consumer");
        let migrating = match self.consumer_approach(stream_name, decl, &name) {
            Approach::Refuse(refused) => return Err(refused),
            Approach::Verify => return self.verify_bound(stream_name, &name, decl, &config).await,
            Approach::Migrate(old) => {
                self.migrate(stream_name, (old, &name), &config, workqueue)
                    .await?;
                true
            }
            Approach::Ensure => false,
        };
        if matches!(mode, UpdateMode::CreateOnly { .. }) && decl.as_queue().is_some() {
            self.refuse_to_resurrect(stream_name, &name).await?;
        }
        self.client
            .retry(stream_name, Some(&name), || async {
                match self
                    .reconcile_consumer_once(
                        stream_name,
                        &name,
                        decl,
                        &config,
                        declared_start,
                        mode,
                    )
                    .await
                {
                    // Just after a work-queue migration deleted the old consumer, the server may
                    // still count it as overlapping the new one (10099/10100): try again. So
                    // too for a consumer lost and created again (an old instance whose consumer
                    // a migration replaced between its check and its create): the next attempt
                    // finds the consumer that replaced it, and stands down.
                    Err(Failure::Fatal(e))
                        if workqueue
                            && (migrating || matches!(mode, UpdateMode::CreateOnly { .. }))
                            && e.server_code().is_some_and(|code| {
                                code == ErrorCode(10099) || code == ErrorCode(10100)
                            }) =>
                    {
                        Err(Failure::Transient(ApiError::Retry(e.to_string())))
                    }
                    other => other,
                }
            })
            .await
    }

    /// The configuration a declaration creates, a queue consumer's stamped with the declaring
    /// version (and, migrating, the consumer it migrates from).
    pub(crate) fn declared_consumer_config(
        &self,
        stream: &str,
        decl: &ConsumerDecl,
        relay_name: Option<&str>,
    ) -> consumer::Config {
        stamped_consumer_config(stream, decl, relay_name, self.version.as_deref())
    }

    /// After a loss: refuses to create `name` again when a consumer on the stream says a newer
    /// declaration migrated from it (this instance is of the old fleet; the consumer was
    /// retired because nobody pulled from it). Transient: the instance stays unready, saying
    /// why, until it is stopped.
    async fn refuse_to_resurrect(&self, stream: &str, name: &str) -> Result<(), ProvisionError> {
        if self.read_consumer(stream, name).await?.is_some() {
            return Ok(());
        }
        let Some(successor) = self.successor(stream, name).await? else {
            return Ok(());
        };
        Err(ProvisionError::new(
            ProvisionErrorKind::Superseded,
            stream,
            format!(
                "consumer `{}` (version {}) migrated from this one, which was then deleted; \
                 not creating it again: this instance runs an older declaration, stop it (or \
                 deploy the newer version)",
                successor.name, successor.version,
            ),
        )
        .consumer(name))
    }

    /// The first consumer on `stream` whose metadata says it migrated from `old`.
    async fn successor(
        &self,
        stream: &str,
        old: &str,
    ) -> Result<Option<Successor>, ProvisionError> {
        #[derive(serde::Deserialize)]
        struct Page {
            #[serde(default)]
            consumers: Option<Vec<consumer::Info>>,
            #[serde(default)]
            total: usize,
        }
        let mut offset = 0;
        loop {
            let page = self
                .client
                .retry(stream, Some(old), || async {
                    let body = serde_json::json!({ "offset": offset });
                    match self
                        .client
                        .request::<Page>(format!("CONSUMER.LIST.{stream}"), &body)
                        .await
                    {
                        Ok(page) => Ok(page),
                        Err(e) if e.is_transient() => Err(Failure::Transient(e)),
                        Err(e) => {
                            Err(rejected("listing the consumers", stream, Some(old), e).into())
                        }
                    }
                })
                .await?;
            let consumers = page.consumers.unwrap_or_default();
            if let Some(found) = consumers
                .iter()
                .find(|c| c.config.metadata.get(MIGRATED_FROM_KEY).map(String::as_str) == Some(old))
            {
                return Ok(Some(Successor {
                    name: found.name.clone(),
                    version: found
                        .config
                        .metadata
                        .get(VERSION_KEY)
                        .cloned()
                        .unwrap_or_else(|| "unknown".to_owned()),
                }));
            }
            offset += consumers.len();
            if consumers.is_empty() || offset >= page.total {
                return Ok(None);
            }
        }
    }

    async fn reconcile_consumer_once(
        &self,
        stream: &str,
        name: &str,
        decl: &ConsumerDecl,
        config: &consumer::Config,
        declared_start: consumer::DeliverPolicy,
        mode: &UpdateMode,
    ) -> Result<consumer::Info, Failure> {
        let error = match self.create_consumer(stream, name, config, "create").await {
            Ok(info) => return Ok(info),
            Err(e) if e.is_transient() => return Err(Failure::Transient(e)),
            Err(e) => e,
        };
        if error.code() == Some(ErrorCode::STREAM_NOT_FOUND) {
            return Err(ProvisionError::new(
                ProvisionErrorKind::StreamMissing,
                stream,
                "the stream does not exist; it is ensured again before the consumer",
            )
            .consumer(name)
            .source(error)
            .into());
        }
        if error.code() != Some(ErrorCode::CONSUMER_ALREADY_EXISTS) {
            return Err(rejected("creating the consumer", stream, Some(name), error).into());
        }
        let info = match self
            .client
            .request_empty::<consumer::Info>(format!("CONSUMER.INFO.{stream}.{name}"))
            .await
        {
            Ok(info) => info,
            // Deleted in between: the next attempt creates it.
            Err(e) if e.is_transient() || e.code() == Some(ErrorCode::CONSUMER_NOT_FOUND) => {
                return Err(Failure::Transient(e));
            }
            Err(e) => return Err(rejected("reading the consumer", stream, Some(name), e).into()),
        };
        let mut compared = config.clone();
        if matches!(mode, UpdateMode::CreateOnly { .. })
            && decl.as_queue().is_none()
            && (info.config.deliver_policy == declared_start
                || matches!(
                    info.config.deliver_policy,
                    consumer::DeliverPolicy::ByStartSequence { .. }
                ))
        {
            // A relay that outlived its loss keeps where it starts (as declared, or where an
            // earlier session resumed): it delivers from its own state either way.
            compared.deliver_policy = info.config.deliver_policy;
        }
        let action = reconcile::consumer(decl, &compared, Some(&info.config), false, mode);
        if matches!(mode, UpdateMode::CreateOnly { .. }) && action == Action::Nothing {
            // After a loss: what exists is accepted as it is.
            return Ok(info);
        }
        let conflict = |fields| {
            let hint = match &decl.kind {
                ConsumerKind::Queue(_) => format!(
                    "the consumer on the server cannot be changed in place to the declared shape; \
                     move to a new group name with `migrate_from = \"{name}\"` (lossless: it \
                     starts at the old consumer's ack floor), or delete the old consumer"
                ),
                ConsumerKind::Broadcast(_) => {
                    "a consumer with the relay's name and another shape exists; delete it"
                        .to_owned()
                }
            };
            ProvisionError::new(ProvisionErrorKind::Conflict, stream, hint)
                .consumer(name)
                .fields(fields)
        };
        let Some(changes) = self.without_writes(action, stream, Some(name), conflict)? else {
            return Ok(info);
        };
        tracing::info!(stream, consumer = name, changes = ?changes, "updating consumer to match its declaration");
        let mut updated = info.config.clone();
        apply_editable_consumer_fields(config, &mut updated);
        for key in [VERSION_KEY, MIGRATED_FROM_KEY] {
            if let Some(value) = config.metadata.get(key) {
                updated.metadata.insert(key.to_owned(), value.clone());
            }
        }
        match self.create_consumer(stream, name, &updated, "update").await {
            Ok(info) => Ok(info),
            Err(e) if e.is_transient() || e.code() == Some(ErrorCode::CONSUMER_DOES_NOT_EXIST) => {
                Err(Failure::Transient(e))
            }
            Err(e) => Err(rejected("updating the consumer", stream, Some(name), e).into()),
        }
    }

    pub(super) async fn create_consumer(
        &self,
        stream: &str,
        name: &str,
        config: &consumer::Config,
        action: &str,
    ) -> Result<consumer::Info, ApiError> {
        let subject = if config.filter_subject.is_empty() {
            format!("CONSUMER.CREATE.{stream}.{name}")
        } else {
            format!("CONSUMER.CREATE.{stream}.{name}.{}", config.filter_subject)
        };
        #[derive(Serialize)]
        struct Request<'a> {
            stream_name: &'a str,
            config: &'a consumer::Config,
            action: &'a str,
        }
        self.client
            .request(
                subject,
                &Request {
                    stream_name: stream,
                    config,
                    action,
                },
            )
            .await
    }

    /// Deletes a consumer, retrying transient failures; a consumer already gone is not an
    /// error.
    pub async fn delete_consumer(&self, stream: &str, name: &str) -> Result<(), ProvisionError> {
        self.client
            .retry(stream, Some(name), || {
                self.delete_consumer_once(stream, name)
            })
            .await
    }

    async fn delete_consumer_once(&self, stream: &str, name: &str) -> Result<(), Failure> {
        #[derive(serde::Deserialize)]
        struct Deleted {}
        match self
            .client
            .request_empty::<Deleted>(format!("CONSUMER.DELETE.{stream}.{name}"))
            .await
        {
            Ok(_) => Ok(()),
            Err(e)
                if matches!(
                    e.code(),
                    Some(ErrorCode::CONSUMER_NOT_FOUND | ErrorCode::STREAM_NOT_FOUND)
                ) =>
            {
                Ok(())
            }
            Err(e) if e.is_transient() => Err(Failure::Transient(e)),
            Err(e) => Err(rejected("deleting the consumer", stream, Some(name), e).into()),
        }
    }
}

/// Where a consumer created again after a loss starts: after `point` when `stream` (read just
/// before) is the instance the point was read in; otherwise as declared, said at WARN, since
/// the new instance's sequences start again at 1 and resuming would skip its first messages.
fn resumed_start(
    stream: &stream::Info,
    decl: &ConsumerDecl,
    config: &consumer::Config,
    point: &ResumePoint,
) -> consumer::DeliverPolicy {
    let now = StreamInstance::of(stream);
    let consumer = config.name.as_deref().unwrap_or_default();
    match point.start_in(&now) {
        // A queue consumer with nothing acknowledged yet delivers the whole stream, exactly as
        // declared (an identical CREATE from every instance).
        Start::After(0) if decl.as_queue().is_some() => config.deliver_policy,
        Start::After(after) => {
            if after + 1 < stream.state.first_sequence {
                tracing::info!(
                    stream = %now.name,
                    consumer,
                    resume_after = after,
                    first_sequence = stream.state.first_sequence,
                    "resuming in a stream purged past the resume point: from its first message"
                );
            }
            consumer::DeliverPolicy::ByStartSequence {
                start_sequence: after + 1,
            }
        }
        Start::Fresh(why) => {
            tracing::warn!(
                stream = %now.name,
                consumer,
                old_created = %point.stream.created,
                new_created = %now.created,
                old_resume_after = point.after,
                last_sequence = now.last_sequence,
                new_start = ?config.deliver_policy,
                "not resuming after sequence {}: {why}; starting as declared ({:?}) instead of \
                 skipping the new stream's first {} messages",
                point.after,
                config.deliver_policy,
                point.after.min(now.last_sequence),
            );
            config.deliver_policy
        }
    }
}
