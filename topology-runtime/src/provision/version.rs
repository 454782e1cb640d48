//! Version stamps: owned streams and queue consumers carry the declaring service's version in
//! their `metadata` (server 2.10+), under a key of this library's own. An instance never
//! applies an editable update declared by an older version than the one stamped on the
//! server, so old and new versions running side by side in a rolling deploy do not revert
//! each other's settings.
//!
//! "Older" is semver precedence (major, minor, patch, then pre-release; build metadata is
//! ignored) when both stamps parse as semver. Otherwise the two are not ordered: the
//! declaration is applied (the declaration is the source of truth, as without stamps) and
//! the stamp replaced.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::fmt;

use async_nats::jetstream::{consumer, stream};
use topology_core::model::{ConsumerDecl, StreamDecl};

use super::config::{consumer_config, stream_config};

/// The metadata key naming the version that declared a stream or consumer. The server
/// reserves keys starting `_nats` (`_nats.ver`, `_nats.level`, `_nats.req.level`, ...); users
/// own the rest: this library reads and writes only its `nats-topology.` keys.
pub const VERSION_KEY: &str = "nats-topology.version";

/// The metadata key on a consumer created by a migration, naming the consumer it migrated
/// from. An instance that lost the old consumer reads it and does not re-create that one.
pub const MIGRATED_FROM_KEY: &str = "nats-topology.migrated-from";

/// How a declaration's version compares with the version stamped on the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precedence {
    /// The declaration is older: its editable changes are not applied.
    Older,
    /// The same version.
    Same,
    /// The declaration is newer: it is applied and stamped.
    Newer,
    /// Not both semver (a declaration hash, say): not ordered; applied, as without stamps.
    Unordered,
    /// Nothing stamped on the server (created by a version before stamps, or by hand).
    Unstamped,
}

/// Compares `declared` with the stamp `server` holds (if any).
pub fn precedence(declared: &str, server: Option<&str>) -> Precedence {
    let Some(server) = server else {
        return Precedence::Unstamped;
    };
    if declared == server {
        return Precedence::Same;
    }
    match (
        semver::Version::parse(declared),
        semver::Version::parse(server),
    ) {
        (Ok(declared), Ok(server)) => match declared.cmp_precedence(&server) {
            Ordering::Less => Precedence::Older,
            Ordering::Equal => Precedence::Same,
            Ordering::Greater => Precedence::Newer,
        },
        _ => Precedence::Unordered,
    }
}

/// The version a declaration is stamped with: the runtime's (set on its builder), else the
/// declaration's own (the macros set the declaring crate's `CARGO_PKG_VERSION`), else a hash
/// of the declaration (`decl-` and 16 hex digits: stable across builds, never ordered).
pub(crate) fn stamp(
    runtime: Option<&str>,
    declared: Option<&str>,
    decl: &dyn fmt::Debug,
) -> String {
    if let Some(v) = runtime.or(declared) {
        return v.to_owned();
    }
    // A hash of the declaration's Debug form: the same declaration, the same stamp.
    let hash = crate::hash::fnv1a(format!("{decl:?}").as_bytes());
    format!("decl-{hash:016x}")
}

/// Sets this library's stamp in `metadata`, leaving every other key as it is.
pub(crate) fn set_stamp(metadata: &mut HashMap<String, String>, version: &str) {
    metadata.insert(VERSION_KEY.to_owned(), version.to_owned());
}

/// The stream configuration provisioning creates for `decl`: the declaration's, stamped with
/// the runtime's version (`None` outside a runtime, as for the export) or the declaration's.
pub(crate) fn stamped_stream_config(
    decl: &StreamDecl,
    runtime_version: Option<&str>,
) -> stream::Config {
    let mut config = stream_config(decl);
    set_stamp(
        &mut config.metadata,
        &stamp(runtime_version, decl.version, decl),
    );
    config
}

/// The consumer configuration provisioning creates for `decl`: a queue consumer's stamped
/// with the declaring version (and, migrating, naming the consumer it migrates from).
pub(crate) fn stamped_consumer_config(
    stream: &str,
    decl: &ConsumerDecl,
    relay_name: Option<&str>,
    runtime_version: Option<&str>,
) -> consumer::Config {
    let mut config = consumer_config(stream, decl, relay_name);
    if let Some(queue) = decl.as_queue() {
        set_stamp(
            &mut config.metadata,
            &stamp(runtime_version, decl.version, decl),
        );
        if let Some(old) = queue.migrate_from {
            config
                .metadata
                .insert(MIGRATED_FROM_KEY.to_owned(), old.to_owned());
        }
    }
    config
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn older_is_semver_precedence() {
        assert_eq!(precedence("1.2.3", Some("1.10.0")), Precedence::Older);
        assert_eq!(precedence("1.10.0", Some("1.2.3")), Precedence::Newer);
        assert_eq!(precedence("2.0.0-rc.1", Some("2.0.0")), Precedence::Older);
        assert_eq!(precedence("2.0.0", Some("2.0.0-rc.1")), Precedence::Newer);
        // Build metadata does not order.
        assert_eq!(precedence("1.0.0+a", Some("1.0.0+b")), Precedence::Same);
        assert_eq!(precedence("1.0.0", Some("1.0.0")), Precedence::Same);
        assert_eq!(precedence("1.0.0", None), Precedence::Unstamped);
        assert_eq!(
            precedence("decl-0123456789abcdef", Some("1.0.0")),
            Precedence::Unordered
        );
        assert_eq!(precedence("1.0", Some("1.0.1")), Precedence::Unordered);
    }

    #[test]
    fn the_stamp_is_the_runtimes_then_the_declarations_then_a_stable_hash() {
        assert_eq!(stamp(Some("3.0.0"), Some("1.0.0"), &"d"), "3.0.0");
        assert_eq!(stamp(None, Some("1.0.0"), &"d"), "1.0.0");
        let hashed = stamp(None, None, &"declaration");
        // What servers hold for this declaration: it must never change.
        assert_eq!(hashed, "decl-996942c32b5469a3");
        assert_eq!(hashed, stamp(None, None, &"declaration"));
        assert_ne!(hashed, stamp(None, None, &"another declaration"));
    }

    #[test]
    fn stamping_keeps_other_keys() {
        let mut metadata = HashMap::from([
            ("_nats.ver".to_owned(), "2.15.1".to_owned()),
            ("team".to_owned(), "billing".to_owned()),
        ]);
        set_stamp(&mut metadata, "1.2.0");
        assert_eq!(metadata.len(), 3);
        assert_eq!(metadata[VERSION_KEY], "1.2.0");
        assert_eq!(metadata["team"], "billing");
    }
}
