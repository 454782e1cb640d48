//! The grants of `migrate_from`: the old consumer read, paused and deleted (a plain
//! migration), or read to its end as a consumer of its own and deleted (onto partitions).

use topology_core::model::{ConsumerDecl, QueueDecl, Retention};

use super::super::{Access, Declaration};
use super::Walk;

impl Walk<'_> {
    /// What a queue consumer migrating from `old` needs of it; `retention` is its stream's,
    /// when declared here.
    pub(super) fn migration(
        &mut self,
        stream: &str,
        (old, queue): (&str, &QueueDecl),
        declaration: &Declaration,
        retention: Option<Retention>,
    ) {
        if queue.partitioned.is_some() {
            // Read to its end beside the partitions (granted as the consumer it is), and
            // deleted then by a running instance.
            if self.role.access == Access::Owner {
                self.api(
                    format!("CONSUMER.DELETE.{stream}.{old}"),
                    declaration.clone(),
                    "`migrate_from` onto partitions: a running instance deletes the old consumer \
                     once it is read to its end",
                );
            }
            if queue.migrate_from_partitions.is_none() {
                // Once the old consumer is gone, start-up checks that it was no partitioned
                // group (whose count would need declaring).
                let name = format!("{old}-p0");
                let why = "`migrate_from` onto partitions: start-up checks that the old consumer \
                           is no partitioned group";
                self.api(
                    format!("CONSUMER.INFO.{stream}.{name}"),
                    declaration.clone(),
                    why,
                );
                self.leader_watch(stream, Some(&name), declaration.clone());
            }
        } else if self.owns() {
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
            // Read, paused and deleted through the retries the leader watch wakes.
            self.leader_watch(stream, Some(old), declaration.clone());
            if let Some(why) = migration_delete(self.role.access, retention) {
                self.api(
                    format!("CONSUMER.DELETE.{stream}.{old}"),
                    declaration.clone(),
                    why,
                );
            }
        }
    }
}

impl Walk<'_> {
    /// What start-up reads of a partitioned `group` of `of` partitions that a new count
    /// migrates from (`decl` is its last partition's), before the stream routes into the new
    /// count: that it has no partition beyond `of`, and, once its partitions are deleted, that
    /// no plain consumer has its name.
    pub(in crate::export::permissions) fn old_partitions(
        &mut self,
        decl: &ConsumerDecl,
        (group, of): (&str, u16),
    ) {
        let stream = decl.stream.name();
        let declaration = Declaration::Consumer {
            stream: stream.to_owned(),
            handler: decl.handler.to_owned(),
        };
        for (name, why) in [
            (
                format!("{group}-p{of}"),
                "`migrate_from_partitions`: start-up checks that the old group has no more \
                 partitions than declared",
            ),
            (
                group.to_owned(),
                "`migrate_from_partitions`: start-up checks that the old group is not a plain \
                 queue consumer",
            ),
        ] {
            self.api(
                format!("CONSUMER.INFO.{stream}.{name}"),
                declaration.clone(),
                why,
            );
            self.leader_watch(stream, Some(&name), declaration.clone());
        }
    }
}

/// Why `access` deletes the consumer a queue consumer migrates from, on a stream of
/// `retention` (`None`: not known here), or `None` when it never does. Work-queue streams: the
/// migration deletes the drained old consumer before creating the new one (the two would
/// overlap), whoever provisions. Limits and interest streams: the old consumer stays paused
/// until a running instance retires it (deletes it once no instance has pulled from it for a
/// pull expiry); the operator's `provision` never retires, and a bind-only instance never
/// migrates.
fn migration_delete(access: Access, retention: Option<Retention>) -> Option<&'static str> {
    match (access, retention) {
        (Access::BindOnly, _) => None,
        (_, Some(Retention::WorkQueue)) => Some(
            "`migrate_from` on a work-queue stream: deletes the paused, drained old consumer \
             before creating the new one (the two would overlap)",
        ),
        (Access::Owner, Some(Retention::Limits | Retention::Interest)) => Some(
            "`migrate_from`: a running instance deletes the paused old consumer once no \
             instance has pulled from it for a pull expiry (retirement)",
        ),
        (Access::Operator, Some(Retention::Limits | Retention::Interest)) => None,
        (Access::Owner, None) => Some(
            "`migrate_from` on a stream whose retention is not declared here: on a work-queue \
             stream the drained old consumer is deleted before the new one is created; on \
             others a running instance deletes it once nobody pulls from it",
        ),
        (Access::Operator, None) => Some(
            "`migrate_from` on a stream whose retention is not declared here: on a work-queue \
             stream `provision` deletes the drained old consumer before creating the new one",
        ),
    }
}
