//! Migration from an old queue consumer to a new one, safe beside a running old fleet
//! (docs/DEPLOYS.md):
//!
//! 1. pause the old consumer (`$JS.API.CONSUMER.PAUSE`, server 2.11+) and read its info until
//!    it reports paused (in a cluster the API answers before the consumer applies it);
//! 2. wait until it has nothing acknowledgement-pending and its delivered sequence is stable
//!    (acks are still processed while paused): the old fleet finished what it holds;
//! 3. limits and interest streams: create the new consumer at the old ack floor + 1 (CREATE:
//!    every new instance creates the same configuration); the old one stays paused, and old
//!    instances pulling from it receive nothing and never see it lost, until [`retire`]
//!    deletes it once nobody pulls from it;
//!    work-queue streams: delete the old one (the new one cannot coexist with it) and create
//!    the new one at deliver-all: what remains in the stream is exactly what was not acked.
//!
//! Every step is idempotent and starts from what the server holds, so a new instance that
//! died mid-way is finished by the next one: a paused old consumer is found paused, drained,
//! and the same new consumer is created. Once the new consumer exists, the migration is done:
//! a later new instance neither pauses nor drains the old one again.
//!
//! [`retire`]: Provisioner::retire

use std::time::Duration;

use async_nats::jetstream::{ErrorCode, consumer};

use super::{Failure, ProvisionError, ProvisionErrorKind, Provisioner, rejected};

/// Pause deadline of an old consumer: far enough to never pass during a deploy, near enough
/// that the server's remaining-time arithmetic (nanoseconds in an i64) cannot overflow.
pub(crate) const PAUSED_UNTIL: &str = "2099-12-31T00:00:00Z";

/// How often the old consumer is read while waiting for it to pause and drain.
const POLL: Duration = Duration::from_millis(100);

/// At least this many reads in a row must find nobody pulling from a paused old consumer
/// before it is deleted.
const IDLE_READS: u32 = 3;

/// Once the old consumer is gone, it is read every this many ticks.
const ABSENT_EVERY: u32 = 30;

impl Provisioner {
    /// Refuses `migrate_from` on a server without consumer pause, naming its version.
    pub(crate) fn check_migration_supported(
        &self,
        stream: &str,
        new: &str,
        old: &str,
    ) -> Result<(), ProvisionError> {
        let version = self.server();
        if version.has_pause() == Some(false) {
            return Err(ProvisionError::new(
                ProvisionErrorKind::Unsupported,
                stream,
                format!(
                    "`migrate_from = \"{old}\"` needs consumer pause, which nats-server {version} \
                     lacks (2.11 or newer): upgrade the servers before deploying this version, \
                     or stop the old fleet and remove `migrate_from` (the new consumer then \
                     starts as declared)"
                ),
            )
            .consumer(new));
        }
        Ok(())
    }

    /// Moves from `old` to `new` (configured as `config`) if `old` exists; see the module.
    pub(crate) async fn migrate(
        &self,
        stream: &str,
        (old, new): (&str, &str),
        config: &consumer::Config,
        workqueue: bool,
    ) -> Result<(), ProvisionError> {
        let Some(info) = self.read_consumer(stream, old).await? else {
            return Ok(());
        };
        // The new consumer exists: another new instance (or this one before a crash) drained
        // the old one and created it, and its instances consume already. Draining again would
        // only wait, up to the old consumer's `ack_wait` for acks that were lost, and change
        // nothing: the new consumer's position does not depend on the old one any more.
        if self.read_consumer(stream, new).await?.is_some() {
            tracing::debug!(stream, from = old, to = new, "migrated already");
            return Ok(());
        }
        self.pause(stream, old, &info).await?;
        let info = self.drained(stream, old).await?;
        if workqueue {
            self.delete_consumer(stream, old).await?;
            tracing::info!(
                stream,
                from = old,
                to = new,
                "migrating on a work-queue stream: deleted the paused, drained old consumer; the \
                 new one delivers what was not acknowledged"
            );
            return Ok(());
        }
        let start = info.ack_floor.stream_sequence + 1;
        let mut from_floor = config.clone();
        from_floor.deliver_policy = consumer::DeliverPolicy::ByStartSequence {
            start_sequence: start,
        };
        self.client
            .retry(stream, Some(new), || async {
                match self
                    .create_consumer(stream, new, &from_floor, "create")
                    .await
                {
                    Ok(_) => Ok(()),
                    // Created already, by another new instance (or before a crash): it stands.
                    Err(e) if e.code() == Some(ErrorCode::CONSUMER_ALREADY_EXISTS) => Ok(()),
                    Err(e) if e.is_transient() => Err(Failure::Transient(e)),
                    Err(e) => Err(rejected(
                        "creating the consumer at the old ack floor",
                        stream,
                        Some(new),
                        e,
                    )
                    .into()),
                }
            })
            .await?;
        tracing::info!(
            stream,
            from = old,
            to = new,
            start,
            "migrated: the new consumer starts at the paused old consumer's ack floor + 1; the \
             old one is deleted once no instance pulls from it"
        );
        Ok(())
    }

    /// Pauses `old` unless `info` says it is paused, then reads it until it reports paused.
    async fn pause(
        &self,
        stream: &str,
        old: &str,
        info: &consumer::Info,
    ) -> Result<(), ProvisionError> {
        if info.paused {
            return Ok(());
        }
        self.client
            .retry(stream, Some(old), || async {
                let body = serde_json::json!({ "pause_until": PAUSED_UNTIL });
                match self
                    .client
                    .request::<serde_json::Value>(format!("CONSUMER.PAUSE.{stream}.{old}"), &body)
                    .await
                {
                    Ok(_) => Ok(()),
                    // Gone meanwhile (another new instance finished a work-queue migration).
                    Err(e) if e.code() == Some(ErrorCode::CONSUMER_NOT_FOUND) => Ok(()),
                    Err(e) if e.is_transient() => Err(Failure::Transient(e)),
                    Err(e) => {
                        Err(
                            rejected("pausing the consumer to migrate from", stream, Some(old), e)
                                .into(),
                        )
                    }
                }
            })
            .await?;
        tracing::info!(
            stream,
            consumer = old,
            "paused the consumer to migrate from"
        );
        let deadline = tokio::time::Instant::now() + self.client.policy().deadline;
        loop {
            match self.read_consumer(stream, old).await? {
                None => return Ok(()),
                Some(info) if info.paused => return Ok(()),
                Some(_) if tokio::time::Instant::now() >= deadline => {
                    return Err(ProvisionError::new(
                        ProvisionErrorKind::Exhausted,
                        stream,
                        format!(
                            "the consumer to migrate from did not report paused within {:?}; \
                             check the cluster's health (the migration resumes on the next \
                             attempt)",
                            self.client.policy().deadline
                        ),
                    )
                    .consumer(old));
                }
                Some(_) => tokio::time::sleep(POLL).await,
            }
        }
    }

    /// Reads the paused `old` until nothing is pending acknowledgement and its delivered
    /// sequence is stable, and returns it. Messages still pending when no acknowledgement came
    /// for the consumer's `ack_wait` belong to an instance that is gone: the new consumer
    /// delivers them again (said at WARN, with how many acknowledged ones follow them).
    async fn drained(&self, stream: &str, old: &str) -> Result<consumer::Info, ProvisionError> {
        let gone = || {
            ProvisionError::new(
                ProvisionErrorKind::Exhausted,
                stream,
                "the consumer to migrate from disappeared while draining; migrating again",
            )
            .consumer(old)
        };
        let mut last = self.read_consumer(stream, old).await?.ok_or_else(gone)?;
        let mut changed = tokio::time::Instant::now();
        loop {
            tokio::time::sleep(POLL).await;
            let now = self.read_consumer(stream, old).await?.ok_or_else(gone)?;
            let stable = now.delivered.stream_sequence == last.delivered.stream_sequence;
            if stable && now.num_ack_pending == 0 {
                return Ok(now);
            }
            if !stable || now.num_ack_pending != last.num_ack_pending {
                changed = tokio::time::Instant::now();
            }
            let waited = changed.elapsed();
            if stable && waited > now.config.ack_wait + Duration::from_secs(1) {
                let after = now
                    .delivered
                    .stream_sequence
                    .saturating_sub(now.ack_floor.stream_sequence)
                    .saturating_sub(now.num_ack_pending as u64);
                tracing::warn!(
                    stream,
                    consumer = old,
                    ack_pending = now.num_ack_pending,
                    ack_floor = now.ack_floor.stream_sequence,
                    "{} message(s) of the paused consumer stayed unacknowledged for its ack_wait \
                     ({:?}): their instance is gone; the new consumer delivers them again, with \
                     up to {after} acknowledged message(s) after them",
                    now.num_ack_pending,
                    now.config.ack_wait,
                );
                return Ok(now);
            }
            last = now;
        }
    }

    /// Watches the old consumer of a migration forever: deletes it once it is paused and
    /// nobody has consumed from it for `idle_for` (read every second at most: an old instance
    /// pulling always has a request waiting, one of a push consumer is bound to it, so a limits stream keeps nothing for it and an
    /// interest stream, where it holds every message, loses it as soon as the old fleet is
    /// gone), and pauses it again if an old instance running older code re-created or resumed
    /// it. What it still has pending acknowledgement belongs to instances that are gone: the
    /// drain before the migration waited for every live one.
    pub(crate) async fn retire(
        &self,
        stream: &str,
        old: &str,
        idle_for: Duration,
    ) -> std::convert::Infallible {
        let every = idle_for.min(Duration::from_secs(1));
        let idle_for = idle_for.max(every * IDLE_READS);
        let mut idle_since: Option<tokio::time::Instant> = None;
        let mut interval = tokio::time::interval(every);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Reads in a row that found it gone: then it is read every 30th tick only, to notice an
        // old instance of older code re-creating it without a request a second forever.
        let mut absent = 0u32;
        loop {
            interval.tick().await;
            if absent >= IDLE_READS && !absent.is_multiple_of(ABSENT_EVERY) {
                absent += 1;
                continue;
            }
            let info = match self.read_consumer(stream, old).await {
                Ok(Some(info)) => {
                    absent = 0;
                    info
                }
                Ok(None) => {
                    absent += 1;
                    idle_since = None;
                    continue;
                }
                Err(_) => {
                    idle_since = None;
                    continue;
                }
            };
            if !info.paused {
                tracing::warn!(
                    stream,
                    consumer = old,
                    "the consumer migrated from runs again (re-created or resumed by an old \
                     instance): pausing it again"
                );
                if let Err(e) = self.pause(stream, old, &info).await {
                    tracing::warn!(stream, consumer = old, error = %e, "could not pause it");
                }
                idle_since = None;
                continue;
            }
            // Someone consumes: a pull request waiting, or a push consumer's bound subscriber.
            if info.num_waiting > 0 || info.push_bound {
                idle_since = None;
                continue;
            }
            let since = *idle_since.get_or_insert_with(tokio::time::Instant::now);
            if since.elapsed() < idle_for {
                continue;
            }
            match self.delete_consumer(stream, old).await {
                Ok(()) => tracing::info!(
                    stream,
                    consumer = old,
                    "deleted the consumer migrated from: paused, and no instance pulled from it \
                     for {idle_for:?}"
                ),
                Err(e) => {
                    tracing::warn!(stream, consumer = old, error = %e, "could not delete the consumer migrated from")
                }
            }
            idle_since = None;
        }
    }
}
