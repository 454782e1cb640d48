//! Streams: ensure an owned stream (CREATE first; compare only on conflict), verify an
//! external one.

use async_nats::jetstream::{ErrorCode, stream};

use super::config::apply_stream_decl;
use super::drift::extra_subjects;
use super::reconcile::{self, Action, Approach};
use super::version::{set_stamp, stamp, stamped_stream_config};
use super::{Failure, ProvisionError, ProvisionErrorKind, Provisioner, rejected};
use topology_core::model::StreamDecl;

impl Provisioner {
    /// Reconciles a stream with the server, on every call (a runtime ensures each stream
    /// once, through its cache): created if absent, then what `reconcile::stream` decides.
    /// An external stream is only verified: it must exist and cover `consumed`.
    pub async fn reconcile_stream(
        &self,
        decl: &StreamDecl,
        consumed: &[&str],
    ) -> Result<stream::Info, ProvisionError> {
        self.warn_if_server_too_old();
        match self.stream_approach(decl) {
            Approach::Refuse(refused) => Err(refused),
            Approach::Verify => {
                self.client
                    .retry(decl.name, None, || self.verify_external(decl, consumed))
                    .await
            }
            Approach::Migrate(_) | Approach::Ensure => {
                self.client
                    .retry(decl.name, None, || self.ensure_owned_stream(decl))
                    .await
            }
        }
    }

    async fn ensure_owned_stream(&self, decl: &StreamDecl) -> Result<stream::Info, Failure> {
        self.origins_exist(decl).await?;
        let config = stamped_stream_config(decl, self.version.as_deref());
        let stamp = self.stream_stamp(decl);
        let created = self
            .client
            .request::<stream::Info>(format!("STREAM.CREATE.{}", decl.name), &config)
            .await;
        let error = match created {
            Ok(info) => return Ok(info),
            Err(e) if e.is_transient() => return Err(Failure::Transient(e)),
            Err(e) => e,
        };
        if error.code() == Some(ErrorCode::STREAM_SUBJECT_OVERLAP) {
            let others = self.streams_overlapping(decl).await;
            let others = if others.is_empty() {
                "another stream on the server".to_owned()
            } else {
                format!("stream(s) {} on the server", others.join(", "))
            };
            return Err(ProvisionError::new(
                ProvisionErrorKind::Rejected,
                decl.name,
                format!(
                    "its subjects {:?} overlap the subjects of {others}; give each subject to \
                     one stream: narrow the subjects, or consume the other stream with \
                     `stream = \"NAME\"` and declare it `external`",
                    decl.subjects
                ),
            )
            .source(error)
            .into());
        }
        if error.code() != Some(ErrorCode::STREAM_NAME_EXIST) {
            return Err(rejected("creating the stream", decl.name, None, error).into());
        }
        // Exists with a different configuration: compare what the declaration sets.
        let info = self.stream_info(decl.name).await?;
        let action = reconcile::stream(decl, &stamp, &[], Some(&info.config));
        let extra = extra_subjects(decl, &info.config);
        if !extra.is_empty() && !matches!(action, Action::Conflict(_)) {
            tracing::warn!(
                stream = decl.name,
                subjects = ?extra,
                "the stream on the server has subjects the declaration lacks; keeping them"
            );
        }
        let conflict = |fields| {
            let message = match bucket_named(decl) {
                Some((noun, bucket)) => format!(
                    "this stream is the {noun} `{bucket}`, and the one on the server differs from \
                     its declaration in fields that cannot be changed in place; declare the \
                     bucket as it is on the server, or declare a bucket under a new name and \
                     copy the data to it"
                ),
                None => "the stream on the server differs from the declaration in fields that \
                         cannot be changed in place; create a stream under a new name and move \
                         consumers to it, or change the declaration to match the server"
                    .to_owned(),
            };
            ProvisionError::new(ProvisionErrorKind::Conflict, decl.name, message).fields(fields)
        };
        let Some(changes) = self.without_writes(action, decl.name, None, conflict)? else {
            return Ok(info);
        };
        tracing::info!(stream = decl.name, changes = ?changes, "updating stream to match its declaration");
        let mut updated = info.config.clone();
        apply_stream_decl(decl, &mut updated);
        set_stamp(&mut updated.metadata, &stamp);
        match self
            .client
            .request::<stream::Info>(format!("STREAM.UPDATE.{}", decl.name), &updated)
            .await
        {
            Ok(info) => Ok(info),
            Err(e) if e.is_transient() => Err(Failure::Transient(e)),
            Err(e) => Err(rejected("updating the stream", decl.name, None, e).into()),
        }
    }

    /// What this provisioner does with the stream `decl` consumed as `consumed`, given its
    /// configuration on the server: an external stream, and any owned one when bind-only, is
    /// verified; another is reconciled. What `plan` prints and verification executes.
    pub(crate) fn stream_action(
        &self,
        decl: &StreamDecl,
        consumed: &[&str],
        on_server: Option<&stream::Config>,
    ) -> Action {
        if self.bind_only && !decl.external {
            return reconcile::bound_stream(consumed, on_server);
        }
        reconcile::stream(decl, &self.stream_stamp(decl), consumed, on_server)
    }

    /// The version a stream declaration is stamped with.
    pub(crate) fn stream_stamp(&self, decl: &StreamDecl) -> String {
        stamp(self.version.as_deref(), decl.version, decl)
    }

    /// The names of other streams on the server whose subjects overlap the declaration's
    /// (best effort: empty if the server cannot be asked).
    async fn streams_overlapping(&self, decl: &StreamDecl) -> Vec<String> {
        #[derive(serde::Deserialize)]
        struct Names {
            #[serde(default)]
            streams: Option<Vec<String>>,
        }
        let mut names = Vec::new();
        for subject in decl.subjects {
            let body = serde_json::json!({ "subject": subject });
            if let Ok(found) = self
                .client
                .request::<Names>("STREAM.NAMES".to_owned(), &body)
                .await
            {
                for name in found.streams.unwrap_or_default() {
                    if name != decl.name && !names.contains(&name) {
                        names.push(name);
                    }
                }
            }
        }
        names.iter().map(|n| format!("`{n}`")).collect()
    }

    async fn stream_info(&self, name: &str) -> Result<stream::Info, Failure> {
        match self
            .client
            .request_empty::<stream::Info>(format!("STREAM.INFO.{name}"))
            .await
        {
            Ok(info) => Ok(info),
            // Deleted between our CREATE and this read: the next attempt creates it.
            Err(e) if e.is_transient() || e.code() == Some(ErrorCode::STREAM_NOT_FOUND) => {
                Err(Failure::Transient(e))
            }
            Err(e) => Err(rejected("reading the stream", name, None, e).into()),
        }
    }

    /// The streams a mirror or sources name by string in this JetStream exist (the server would
    /// accept the stream and copy nothing): else the stream waits, not ready, as for an
    /// external stream. A declared origin (`Origin::of`) is created by its declaration.
    async fn origins_exist(&self, decl: &StreamDecl) -> Result<(), Failure> {
        let named = decl.mirror.iter().chain(decl.sources).filter(|origin| {
            origin.is_local() && matches!(origin.stream, topology_core::model::StreamRef::Named(_))
        });
        for origin in named {
            match self
                .client
                .request_empty::<stream::Info>(format!("STREAM.INFO.{}", origin.name()))
                .await
            {
                Ok(_) => {}
                Err(e) if e.code() == Some(ErrorCode::STREAM_NOT_FOUND) => {
                    let role = if decl.mirror.is_some() {
                        "mirrors"
                    } else {
                        "sources from"
                    };
                    let why = format!(
                        "the stream `{}` it {role} does not exist; declare it, or deploy the \
                         service that owns it (this stream waits, not ready, until it exists)",
                        origin.name()
                    );
                    return Err(ProvisionError::new(
                        ProvisionErrorKind::ExternalNotReady,
                        decl.name,
                        why,
                    )
                    .into());
                }
                Err(e) if e.is_transient() => return Err(Failure::Transient(e)),
                Err(e) => {
                    return Err(rejected(
                        "reading a mirrored or sourced stream",
                        decl.name,
                        None,
                        e,
                    )
                    .into());
                }
            }
        }
        Ok(())
    }

    async fn verify_external(
        &self,
        decl: &StreamDecl,
        consumed: &[&str],
    ) -> Result<stream::Info, Failure> {
        let info = match self
            .client
            .request_empty::<stream::Info>(format!("STREAM.INFO.{}", decl.name))
            .await
        {
            Ok(info) => Some(info),
            Err(e) if e.code() == Some(ErrorCode::STREAM_NOT_FOUND) => None,
            Err(e) if e.is_transient() => return Err(Failure::Transient(e)),
            Err(e) => {
                return Err(rejected("reading the external stream", decl.name, None, e).into());
            }
        };
        let action = self.stream_action(decl, consumed, info.as_ref().map(|i| &i.config));
        let why = match (info, action) {
            (Some(_), Action::Verify(Err(why)) | Action::Bound(Err(why))) => {
                format!("{why}; ask its owner to add them, or change the consumer's subjects")
            }
            (Some(info), _) => return Ok(info),
            (None, Action::Bound(_)) => {
                "the stream does not exist, and this runtime is bind-only (its streams and \
                 consumers are provisioned by an operator, never here): provision it with the \
                 operator's credentials (the CLI's `provision`, or infrastructure as code); this \
                 consumer waits, not ready, until it is there"
                    .to_owned()
            }
            (None, _) => "the external stream does not exist; it is owned elsewhere and is never \
                          created here: deploy its owner (this consumer waits, not ready, until \
                          it does)"
                .to_owned(),
        };
        Err(ProvisionError::new(ProvisionErrorKind::ExternalNotReady, decl.name, why).into())
    }
}

/// The kind and name of the bucket a stream is, for a bucket's stream (`KV_<name>` or
/// `OBJ_<name>` with the bucket shape).
fn bucket_named(decl: &StreamDecl) -> Option<(&'static str, &str)> {
    decl.bucket_shape?;
    if let Some(name) = decl.name.strip_prefix("KV_") {
        return Some(("key-value bucket", name));
    }
    decl.name
        .strip_prefix("OBJ_")
        .map(|name| ("object store", name))
}

/// `Err` naming the consumed subjects an external stream's subjects do not cover.
pub(crate) fn uncovered(config: &stream::Config, consumed: &[&str]) -> Result<(), String> {
    let patterns: Vec<&str> = config.subjects.iter().map(String::as_str).collect();
    let missing: Vec<&str> = consumed
        .iter()
        .copied()
        .filter(|subject| !topology_core::subject::covered_by(subject, &patterns))
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "the external stream's subjects {:?} do not cover {:?} consumed from it",
            config.subjects, missing
        ))
    }
}
