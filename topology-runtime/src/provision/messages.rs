//! Per-message TTL (`allow_msg_ttl`, 2.11) and schedules (`allow_msg_schedules`, 2.12) on a
//! stream: refused at start-up on a server that would ignore them, and turned on in place when
//! a stream on the server lacks them (the server refuses to turn them off, so a stream that
//! allows more than declared is left as it is).

use async_nats::jetstream::stream;

use super::error::Drift;
use super::{FieldDiff, ProvisionError, ProvisionErrorKind, Provisioner};
use topology_core::model::StreamDecl;

impl Provisioner {
    /// Refuses a stream allowing a per-message feature that the server would ignore.
    pub(crate) fn check_message_features_supported(
        &self,
        decl: &StreamDecl,
    ) -> Result<(), ProvisionError> {
        let version = self.server();
        let Some(parsed) = version.parsed() else {
            return Ok(());
        };
        let Some((key, (major, minor, _))) = decl.message_feature_missing(parsed) else {
            return Ok(());
        };
        Err(ProvisionError::new(
            ProvisionErrorKind::Unsupported,
            decl.name,
            format!(
                "`{key}` needs nats-server {major}.{minor} or newer, and this server is \
                 {version} (it would ignore the setting, and the messages relying on it would \
                 be kept or delivered as ordinary ones): upgrade the servers, or remove `{key}`"
            ),
        ))
    }
}

/// Adds to `drift` the per-message features `decl` allows and the server's stream does not:
/// editable (turned on in place).
pub(crate) fn message_drift(decl: &StreamDecl, server: &stream::Config, drift: &mut Drift) {
    for (key, declared, on_server) in [
        (
            "allow_msg_ttl",
            decl.allow_msg_ttl,
            server.allow_message_ttl,
        ),
        (
            "allow_msg_schedules",
            decl.allow_msg_schedules,
            server.allow_message_schedules,
        ),
    ] {
        if declared && !on_server {
            drift.editable.push(FieldDiff {
                field: key,
                server: "false".to_owned(),
                declared: "true".to_owned(),
            });
        }
    }
}
