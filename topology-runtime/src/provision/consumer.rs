//! Consumers: ensure a queue consumer or relay (CREATE first; compare only on conflict),
//! migrate from an old name at its ack floor, delete.

use async_nats::jetstream::{ErrorCode, consumer, stream};
use serde::Serialize;

use super::config::{apply_editable_consumer_fields, consumer_config};
use super::drift::consumer_drift;
use super::{
    ApiError, Failure, ProvisionError, ProvisionErrorKind, Provisioner, ResumePoint, Start,
    StreamInstance, UpdateMode, rejected,
};
use topology_core::model::{ConsumerDecl, ConsumerKind};

impl Provisioner {
    /// Ensures a consumer on `stream` and returns its info. A queue consumer is the durable
    /// named by its group; a broadcast relay is an ephemeral named `relay_name`.
    ///
    /// A queue consumer declaring `migrate_from = "old"` first moves from `old` if it exists:
    /// on a work-queue stream `old` is deleted and the new consumer delivers what remains
    /// (acknowledged messages are gone, unacknowledged ones are still there); on any other
    /// stream the new consumer starts at `old`'s ack floor + 1, then `old` is deleted. Both
    /// orders are safe when every replica migrates at the same moment.
    pub async fn ensure_consumer(
        &self,
        stream: &stream::Info,
        decl: &ConsumerDecl,
        relay_name: Option<&str>,
        mode: &UpdateMode,
    ) -> Result<consumer::Info, ProvisionError> {
        let stream_name = stream.config.name.as_str();
        let workqueue = stream.config.retention == stream::RetentionPolicy::WorkQueue;
        let mut config = consumer_config(stream_name, decl, relay_name);
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
        self.retry(stream_name, Some(&name), || async {
            if let Some(old) = decl.as_queue().and_then(|q| q.migrate_from)
                && old != name
            {
                self.migrate(stream_name, old, &name, &config, workqueue)
                    .await?;
            }
            match self
                .ensure_consumer_once(stream_name, &name, decl, &config, declared_start, mode)
                .await
            {
                // Just after a work-queue migration deleted the old consumer, the server may
                // still count it as overlapping the new one (10099/10100): try again.
                Err(Failure::Fatal(e))
                    if workqueue
                        && decl.as_queue().is_some_and(|q| q.migrate_from.is_some())
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

    /// Moves from `old` to `new` if `old` exists; see [`Provisioner::ensure_consumer`].
    async fn migrate(
        &self,
        stream: &str,
        old: &str,
        new: &str,
        config: &consumer::Config,
        workqueue: bool,
    ) -> Result<(), Failure> {
        let old_info = match self
            .api_empty::<consumer::Info>(format!("CONSUMER.INFO.{stream}.{old}"))
            .await
        {
            Ok(info) => info,
            Err(e) if e.code() == Some(ErrorCode::CONSUMER_NOT_FOUND) => return Ok(()),
            Err(e) if e.is_transient() => return Err(Failure::Transient(e)),
            Err(e) => {
                return Err(
                    rejected("reading the consumer to migrate from", stream, Some(old), e).into(),
                );
            }
        };
        if !workqueue {
            let start = old_info.ack_floor.stream_sequence + 1;
            let mut from_floor = config.clone();
            from_floor.deliver_policy = consumer::DeliverPolicy::ByStartSequence {
                start_sequence: start,
            };
            match self
                .create_consumer(stream, new, &from_floor, "create")
                .await
            {
                Ok(_) => {
                    tracing::info!(
                        stream,
                        from = old,
                        to = new,
                        start,
                        "migrated consumer: created at the old ack floor + 1"
                    )
                }
                // Another replica migrated first (from a later floor): theirs stands.
                Err(e) if e.code() == Some(ErrorCode::CONSUMER_ALREADY_EXISTS) => {}
                Err(e) if e.is_transient() => return Err(Failure::Transient(e)),
                Err(e) => {
                    return Err(rejected(
                        "creating the consumer at the old ack floor",
                        stream,
                        Some(new),
                        e,
                    )
                    .into());
                }
            }
        }
        // A timed-out delete is retried with the rest of this attempt (creating the new
        // consumer again is idempotent).
        self.delete_consumer_once(stream, old).await?;
        tracing::info!(stream, consumer = old, "deleted the consumer migrated from");
        Ok(())
    }

    async fn ensure_consumer_once(
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
            .api_empty::<consumer::Info>(format!("CONSUMER.INFO.{stream}.{name}"))
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
        let drift = consumer_drift(decl, &compared, &info.config);
        if !drift.immutable.is_empty() {
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
            return Err(
                ProvisionError::new(ProvisionErrorKind::Conflict, stream, hint)
                    .consumer(name)
                    .fields(drift.immutable)
                    .into(),
            );
        }
        if drift.editable.is_empty() || matches!(mode, UpdateMode::CreateOnly { .. }) {
            return Ok(info);
        }
        tracing::info!(stream, consumer = name, changes = ?drift.editable, "updating consumer to match its declaration");
        let mut updated = info.config.clone();
        apply_editable_consumer_fields(config, &mut updated);
        match self.create_consumer(stream, name, &updated, "update").await {
            Ok(info) => Ok(info),
            Err(e) if e.is_transient() || e.code() == Some(ErrorCode::CONSUMER_DOES_NOT_EXIST) => {
                Err(Failure::Transient(e))
            }
            Err(e) => Err(rejected("updating the consumer", stream, Some(name), e).into()),
        }
    }

    async fn create_consumer(
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
        self.api(
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
        self.retry(stream, Some(name), || {
            self.delete_consumer_once(stream, name)
        })
        .await
    }

    async fn delete_consumer_once(&self, stream: &str, name: &str) -> Result<(), Failure> {
        #[derive(serde::Deserialize)]
        struct Deleted {}
        match self
            .api_empty::<Deleted>(format!("CONSUMER.DELETE.{stream}.{name}"))
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
