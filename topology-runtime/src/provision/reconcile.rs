//! Reconciliation: what to do with one declaration. Two steps, each decided here once:
//!
//! - before anything is compared ([`Provisioner::stream_approach`],
//!   [`Provisioner::consumer_approach`]): refused on this server (a feature it lacks), only
//!   verified (external, bind-only), migrated to from an older consumer, or ensured;
//! - then, given what the server holds, one function per kind ([`stream`], [`consumer`](fn@consumer)).
//!
//! Provisioning executes what they return and `plan` prints it, so the two cannot disagree:
//! a refusal is an action too ([`Action::Refused`], with the message provisioning fails
//! with).

use std::collections::HashMap;
use std::fmt;

use async_nats::jetstream::{consumer, stream as js_stream};
use topology_core::model::{ConsumerDecl, StreamDecl};

use super::drift::{consumer_drift, stream_drift};
use super::error::Drift;
use super::version::{Precedence, VERSION_KEY, precedence};
use super::{FieldDiff, ProvisionError, Provisioner, UpdateMode, uncovered};
use crate::health::OlderDeclaration;

/// What provisioning does (or, in a plan, would do) to one stream or consumer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// It does not exist: it is created.
    Create,
    /// It exists as declared: nothing to do.
    Nothing,
    /// It exists; these editable fields are updated (the version stamp among them when it
    /// changes).
    Update(Vec<FieldDiff>),
    /// It exists with fields that cannot be changed in place: provisioning fails.
    Conflict(Vec<FieldDiff>),
    /// Refused before anything is compared (a feature the server lacks): provisioning fails
    /// with this message.
    Refused(String),
    /// An external stream: verified only. `Ok` if it exists and covers what is consumed.
    Verify(Result<(), String>),
    /// The consumer is created from `from` at its ack floor, and `from` deleted.
    Migrate {
        /// The consumer migrated from.
        from: String,
    },
    /// A broadcast relay: each instance creates its own at start-up.
    PerInstance,
    /// The consumer a partitioned group migrates from (a plain queue consumer, or a partition
    /// of a group of another count): never changed, read to its end (by the old fleet and the
    /// new), then deleted (unless no new partition names it: then left to an operator); the
    /// group's partitions start after.
    Retire {
        /// The partitioned group.
        into: String,
        /// Whether it is deleted once read to its end.
        deleted: bool,
        /// What it has left to deliver.
        pending: u64,
        /// What it delivered that is not acknowledged yet.
        ack_pending: usize,
    },
    /// Bind-only ([`RuntimeBuilder::bind_only`](crate::RuntimeBuilder::bind_only)): verified,
    /// never created or changed here. `Ok`: it exists, with the differences from the
    /// declaration (if any) left for an operator to apply; `Err`: not ready, and why.
    Bound(Result<Vec<FieldDiff>, String>),
    /// It exists, and the version stamped on it is newer than this declaration's: these
    /// editable differences are not applied ("declared by an older version").
    OlderVersion {
        /// This declaration's version.
        declared: String,
        /// The version stamped on the server.
        server: String,
        /// The differences left as the newer version set them.
        fields: Vec<FieldDiff>,
    },
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let fields = |f: &mut fmt::Formatter<'_>, diffs: &[FieldDiff]| {
            diffs
                .iter()
                .enumerate()
                .try_for_each(|(i, d)| write!(f, "{}{d}", if i == 0 { "" } else { "; " }))
        };
        match self {
            Action::Create => f.write_str("create"),
            Action::Nothing => f.write_str("nothing to do"),
            Action::Update(diffs) => {
                f.write_str("update: ")?;
                fields(f, diffs)
            }
            Action::Conflict(diffs) => {
                f.write_str("CONFLICT (cannot change in place): ")?;
                fields(f, diffs)
            }
            Action::Refused(why) => write!(f, "REFUSED: {why}"),
            Action::Verify(Ok(())) => {
                f.write_str("external: exists and covers the consumed subjects")
            }
            Action::Verify(Err(why)) => write!(f, "external, NOT READY: {why}"),
            Action::Migrate { from } => {
                write!(
                    f,
                    "pause `{from}`, wait until what it delivered is acknowledged, create at its \
                     ack floor + 1 (work-queue: delete `{from}`, create delivering what is left); \
                     `{from}` is deleted once no instance pulls from it"
                )
            }
            Action::OlderVersion {
                declared,
                server,
                fields: diffs,
            } => {
                write!(
                    f,
                    "declared by an older version ({declared} here, {server} on the server): \
                     not applied: "
                )?;
                fields(f, diffs)
            }
            Action::Retire {
                into,
                deleted,
                pending,
                ack_pending,
            } => write!(
                f,
                "read to its end ({pending} left, {ack_pending} unacknowledged), then {}; \
                 `{into}`'s partitions start after",
                if *deleted {
                    "deleted"
                } else {
                    "left for an operator to delete once the old fleet is gone (no new partition \
                     names it)"
                }
            ),
            Action::PerInstance => {
                f.write_str("created by each instance at start-up (ephemeral relay)")
            }
            Action::Bound(Ok(diffs)) if diffs.is_empty() => {
                f.write_str("bind-only: exists as declared (verified, never changed here)")
            }
            Action::Bound(Ok(diffs)) => {
                f.write_str("bind-only: exists; not changed here (an operator's to apply): ")?;
                fields(f, diffs)
            }
            Action::Bound(Err(why)) => write!(f, "bind-only, NOT READY: {why}"),
        }
    }
}

/// What provisioning does with a declaration before it compares anything with the server.
pub(crate) enum Approach {
    /// Refused here: provisioning fails with this error.
    Refuse(ProvisionError),
    /// Only verified: an external stream, or a bind-only runtime's stream or queue consumer.
    Verify,
    /// A queue consumer moved to from the older consumer named (if it still exists).
    Migrate(&'static str),
    /// Created first, compared only on conflict.
    Ensure,
}

impl Provisioner {
    /// The approach to a stream: verified when external or bind-only; refused when it
    /// declares what the server would ignore (a subject transform, a per-message feature);
    /// else ensured.
    pub(crate) fn stream_approach(&self, decl: &StreamDecl) -> Approach {
        if decl.external || self.bind_only {
            return Approach::Verify;
        }
        match self
            .check_transforms_supported(decl)
            .and_then(|()| self.check_message_features_supported(decl))
        {
            Err(refused) => Approach::Refuse(refused),
            Ok(()) => Approach::Ensure,
        }
    }

    /// The approach to the consumer `name` declared as `decl` on `stream`: refused when it
    /// declares a priority or a migration the server lacks; verified by a bind-only runtime
    /// (a queue consumer); migrated to when it declares `migrate_from`; else ensured.
    pub(crate) fn consumer_approach(
        &self,
        stream: &str,
        decl: &ConsumerDecl,
        name: &str,
    ) -> Approach {
        if let Err(refused) = self.check_priority_supported(stream, decl) {
            return Approach::Refuse(refused);
        }
        let Some(queue) = decl.as_queue() else {
            return Approach::Ensure;
        };
        if self.bind_only {
            return Approach::Verify;
        }
        // A partitioned group's partitions are created as declared (see `moves_from`).
        match queue.moves_from().filter(|old| *old != name) {
            Some(old) => match self.check_migration_supported(stream, name, old) {
                Err(refused) => Approach::Refuse(refused),
                Ok(()) => Approach::Migrate(old),
            },
            None => Approach::Ensure,
        }
    }
}

/// What to do with a stream declared as `decl` and stamped `stamp`, given its configuration
/// on the server (`None`: absent). An external stream is only verified: it must exist and
/// cover the subjects `consumed` from it.
pub(crate) fn stream(
    decl: &StreamDecl,
    stamp: &str,
    consumed: &[&str],
    on_server: Option<&js_stream::Config>,
) -> Action {
    match on_server {
        None if decl.external => Action::Verify(Err("the stream does not exist".to_owned())),
        Some(server) if decl.external => Action::Verify(uncovered(server, consumed)),
        None => Action::Create,
        Some(server) => versioned(stream_drift(decl, server), stamp, &server.metadata),
    }
}

/// What a bind-only runtime does with an owned stream: verifies that it exists and covers
/// the subjects `consumed` from it, as an external stream's.
pub(crate) fn bound_stream(consumed: &[&str], on_server: Option<&js_stream::Config>) -> Action {
    match on_server {
        None => Action::Bound(Err(
            "the stream does not exist; an operator provisions it".to_owned()
        )),
        Some(server) => Action::Bound(uncovered(server, consumed).map(|()| Vec::new())),
    }
}

/// What a bind-only runtime does with a queue consumer declared as `decl` (configured as
/// `declared`): uses it as it is on the server, or waits for an operator to provision it.
pub(crate) fn bound_consumer(
    decl: &ConsumerDecl,
    declared: &consumer::Config,
    on_server: Option<&consumer::Config>,
) -> Action {
    match on_server {
        None => Action::Bound(Err(
            "the consumer does not exist; an operator provisions it".to_owned(),
        )),
        Some(server) => {
            let drift = consumer_drift(decl, declared, server);
            let mut differences = drift.immutable;
            differences.extend(drift.editable);
            Action::Bound(Ok(differences))
        }
    }
}

/// What to do with a consumer declared as `decl` (configured as `declared`, a queue
/// consumer's stamped), given its configuration on the server (`None`: absent) and, for a
/// queue consumer declaring `migrate_from`, whether the consumer it migrates from exists.
///
/// In [`UpdateMode::CreateOnly`] (after a loss) what exists is accepted unless it cannot
/// be used as declared. Relays carry no version stamp: their editable differences apply.
pub(crate) fn consumer(
    decl: &ConsumerDecl,
    declared: &consumer::Config,
    on_server: Option<&consumer::Config>,
    migrate_from_exists: bool,
    mode: &UpdateMode,
) -> Action {
    let Some(server) = on_server else {
        return match decl.as_queue().and_then(|q| q.moves_from()) {
            Some(from) if migrate_from_exists => Action::Migrate {
                from: from.to_owned(),
            },
            _ => Action::Create,
        };
    };
    let drift = consumer_drift(decl, declared, server);
    if !drift.immutable.is_empty() {
        return Action::Conflict(drift.immutable);
    }
    if matches!(mode, UpdateMode::CreateOnly { .. }) {
        return Action::Nothing;
    }
    match declared.metadata.get(VERSION_KEY) {
        Some(stamp) if decl.as_queue().is_some() => versioned(drift, stamp, &server.metadata),
        _ if drift.editable.is_empty() => Action::Nothing,
        _ => Action::Update(drift.editable),
    }
}

/// The action for `drift` by a declaration stamped `declared` against what the server's
/// `metadata` stamps: an older declaration's editable differences are not applied; any other
/// replaces a stamp that differs (an update even when no declared field does).
fn versioned(mut drift: Drift, declared: &str, metadata: &HashMap<String, String>) -> Action {
    if !drift.immutable.is_empty() {
        return Action::Conflict(drift.immutable);
    }
    let server = metadata.get(VERSION_KEY);
    match precedence(declared, server.map(String::as_str)) {
        Precedence::Older if drift.editable.is_empty() => Action::Nothing,
        Precedence::Older => Action::OlderVersion {
            declared: declared.to_owned(),
            server: server.cloned().unwrap_or_default(),
            fields: drift.editable,
        },
        Precedence::Same if drift.editable.is_empty() => Action::Nothing,
        Precedence::Same => Action::Update(drift.editable),
        Precedence::Newer | Precedence::Unordered | Precedence::Unstamped => {
            drift.editable.push(FieldDiff {
                field: "metadata.nats-topology.version",
                server: format!("{server:?}"),
                declared: format!("{:?}", declared),
            });
            Action::Update(drift.editable)
        }
    }
}

impl Provisioner {
    /// Executes what `action` (for a stream, or its `consumer`, found on the server) asks
    /// short of a write: a conflict is the error `conflict` makes of its fields; an older
    /// declaration is recorded for health and left as it is; anything else forgets an older
    /// declaration recorded before. `Some(changes)` when an update is to be sent.
    pub(super) fn without_writes(
        &self,
        action: Action,
        stream: &str,
        consumer: Option<&str>,
        conflict: impl FnOnce(Vec<FieldDiff>) -> ProvisionError,
    ) -> Result<Option<Vec<FieldDiff>>, ProvisionError> {
        match action {
            Action::Conflict(fields) => Err(conflict(fields)),
            Action::OlderVersion {
                declared,
                server,
                fields,
            } => {
                let older = OlderDeclaration {
                    stream: stream.to_owned(),
                    consumer: consumer.map(str::to_owned),
                    declared,
                    server,
                };
                tracing::warn!(stream, consumer, changes = ?fields, "{older}");
                self.older.record(older);
                Ok(None)
            }
            Action::Update(changes) => {
                self.older.clear(stream, consumer);
                Ok(Some(changes))
            }
            _ => {
                self.older.clear(stream, consumer);
                Ok(None)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    static DECL: StreamDecl =
        StreamDecl::new("ORDERS", &["orders.>"]).max_age(Duration::from_secs(60));

    fn on_server(stamp: Option<&str>, max_age: u64) -> js_stream::Config {
        let mut config = super::super::config::stream_config(&DECL);
        config.max_age = Duration::from_secs(max_age);
        if let Some(stamp) = stamp {
            config
                .metadata
                .insert(VERSION_KEY.to_owned(), stamp.to_owned());
        }
        config
    }

    fn fields(action: &Action) -> Vec<&'static str> {
        match action {
            Action::Update(f) | Action::Conflict(f) | Action::OlderVersion { fields: f, .. } => {
                f.iter().map(|d| d.field).collect()
            }
            _ => Vec::new(),
        }
    }

    #[test]
    fn a_stream_is_created_kept_updated_or_left_to_a_newer_version() {
        assert_eq!(stream(&DECL, "1.0.0", &[], None), Action::Create);
        assert_eq!(
            stream(&DECL, "1.0.0", &[], Some(&on_server(Some("1.0.0"), 60))),
            Action::Nothing
        );
        let same = stream(&DECL, "1.0.0", &[], Some(&on_server(Some("1.0.0"), 30)));
        assert_eq!(fields(&same), ["max_age"]);
        assert!(matches!(
            stream(&DECL, "1.0.0", &[], Some(&on_server(Some("2.0.0"), 30))),
            Action::OlderVersion { .. }
        ));
        assert_eq!(
            stream(&DECL, "1.0.0", &[], Some(&on_server(Some("2.0.0"), 60))),
            Action::Nothing
        );
    }

    /// A stamp that differs (or is missing) is an update of its own.
    #[test]
    fn a_missing_or_older_stamp_alone_is_an_update() {
        for server in [None, Some("0.9.0"), Some("decl-0123456789abcdef")] {
            let action = stream(&DECL, "1.0.0", &[], Some(&on_server(server, 60)));
            assert_eq!(
                fields(&action),
                ["metadata.nats-topology.version"],
                "{server:?}"
            );
            assert!(matches!(action, Action::Update(_)), "{action}");
        }
    }
}
