//! Drift of a stream's mirror, sources and subject transform: a mirror's origin is fixed when
//! the stream is created (the server refuses another, 10055), sources and the transform are
//! edited in place.

use async_nats::jetstream::stream;

use super::config::source_config;
use super::error::Drift;
use super::{FieldDiff, ProvisionError, ProvisionErrorKind, Provisioner};
use topology_core::model::StreamDecl;
use topology_core::origin::first_transform;

impl Provisioner {
    /// Refuses a stream declaring a subject transform on a server that would ignore it.
    pub(crate) fn check_transforms_supported(
        &self,
        decl: &StreamDecl,
    ) -> Result<(), ProvisionError> {
        let Some((key, dest)) = first_transform(decl) else {
            return Ok(());
        };
        let version = self.server();
        if version.has_transforms() == Some(false) {
            return Err(ProvisionError::new(
                ProvisionErrorKind::Unsupported,
                decl.name,
                format!(
                    "`{key}` rewrites subjects to `{dest}`, which nats-server {version} cannot \
                     do (subject transforms need 2.10 or newer; an older server would ignore \
                     them and store the subjects as they are): upgrade the servers, or remove \
                     the transform"
                ),
            ));
        }
        Ok(())
    }
}

/// Adds to `drift` how the server's mirror, sources and subject transform differ from what
/// `decl` declares. A mirror is compared whether declared or not (a declared plain stream over
/// a mirror on the server is no update either: the mirror refuses subjects); sources and the
/// transform only when declared (what is not declared is left as it is).
pub(crate) fn origin_drift(decl: &StreamDecl, server: &stream::Config, drift: &mut Drift) {
    let declared = decl.mirror.as_ref().map(source_config);
    if !same_mirror(declared.as_ref(), server.mirror.as_ref()) {
        drift.immutable.push(FieldDiff {
            field: "mirror",
            server: server
                .mirror
                .as_ref()
                .map_or_else(|| "none".to_owned(), describe),
            declared: format!(
                "{} (a mirror's origin is fixed when the stream is created: delete the stream \
                 `{}` on the server to have it created again as declared, or declare the new \
                 mirror under another name)",
                declared
                    .as_ref()
                    .map_or_else(|| "none".to_owned(), describe),
                decl.name
            ),
        });
    }
    if !decl.sources.is_empty() {
        let declared: Vec<stream::Source> = decl.sources.iter().map(source_config).collect();
        let on_server = server.sources.as_deref().unwrap_or_default();
        if !same_sources(&declared, on_server) {
            drift.editable.push(FieldDiff {
                field: "sources",
                server: list(on_server),
                declared: list(&declared),
            });
        }
    }
    if let Some(transform) = decl.subject_transform {
        let matches = server
            .subject_transform
            .as_ref()
            .is_some_and(|t| t.source == transform.src && t.destination == transform.dest);
        if !matches {
            drift.editable.push(FieldDiff {
                field: "subject_transform",
                server: server.subject_transform.as_ref().map_or_else(
                    || "none".to_owned(),
                    |t| format!("{} -> {}", t.source, t.destination),
                ),
                declared: format!("{} -> {}", transform.src, transform.dest),
            });
        }
    }
}

/// A mirror or source as one line: `ORDERS filter orders.eu.> via $JS.hub.API`.
pub(crate) fn describe(source: &stream::Source) -> String {
    let mut text = source.name.clone();
    if let Some(filter) = source.filter_subject.as_deref().filter(|f| !f.is_empty()) {
        text.push_str(&format!(" filter {filter}"));
    }
    for transform in &source.subject_transforms {
        text.push_str(&format!(
            " transform {} -> {}",
            transform.source, transform.destination
        ));
    }
    if let Some(external) = &source.external {
        text.push_str(&format!(" via {}", external.api_prefix));
    }
    text
}

fn list(sources: &[stream::Source]) -> String {
    let items: Vec<String> = sources.iter().map(describe).collect();
    format!("[{}]", items.join(", "))
}

/// The parts of a mirror or source a declaration sets, as the server returns them (an empty
/// filter is none; a delivery prefix is not declared).
fn key(source: &stream::Source) -> (&str, &str, Vec<(&str, &str)>, Option<&str>) {
    (
        &source.name,
        source.filter_subject.as_deref().unwrap_or_default(),
        source
            .subject_transforms
            .iter()
            .map(|t| (t.source.as_str(), t.destination.as_str()))
            .collect(),
        source.external.as_ref().map(|e| e.api_prefix.as_str()),
    )
}

fn same_mirror(declared: Option<&stream::Source>, server: Option<&stream::Source>) -> bool {
    match (declared, server) {
        (None, None) => true,
        (Some(a), Some(b)) => key(a) == key(b),
        _ => false,
    }
}

/// The same sources in any order.
fn same_sources(declared: &[stream::Source], server: &[stream::Source]) -> bool {
    let sorted = |sources: &[stream::Source]| {
        let mut keys: Vec<String> = sources.iter().map(|s| format!("{:?}", key(s))).collect();
        keys.sort();
        keys
    };
    sorted(declared) == sorted(server)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provision::config::stream_config;
    use topology_core::model::Origin;

    static ORDERS: StreamDecl = StreamDecl::new("ORDERS", &["orders.>"]);

    #[test]
    fn another_origin_is_immutable_and_says_how_to_fix_it() {
        let on_server = stream_config(&StreamDecl::mirror_of("EU", Origin::of(&ORDERS)));
        let declared = StreamDecl::mirror_of("EU", Origin::named("BILLING"));
        let mut drift = Drift::default();
        origin_drift(&declared, &on_server, &mut drift);
        assert_eq!(drift.immutable.len(), 1, "{drift:?}");
        let diff = &drift.immutable[0];
        assert_eq!((diff.field, diff.server.as_str()), ("mirror", "ORDERS"));
        assert!(
            diff.declared
                .starts_with("BILLING (a mirror's origin is fixed")
        );
        assert!(diff.declared.contains("delete the stream `EU`"));
    }

    #[test]
    fn the_same_mirror_and_sources_in_another_order_are_no_drift() {
        let decl = StreamDecl::mirror_of(
            "EU",
            Origin::of(&ORDERS).filter("orders.eu.>").domain("hub"),
        );
        let mut drift = Drift::default();
        origin_drift(&decl, &stream_config(&decl), &mut drift);
        assert!(drift.immutable.is_empty() && drift.editable.is_empty());

        static AB: [Origin; 2] = [Origin::named("A"), Origin::named("B").transform("b.>")];
        static BA: [Origin; 2] = [Origin::named("B").transform("b.>"), Origin::named("A")];
        let mut drift = Drift::default();
        origin_drift(
            &StreamDecl::sourced("ALL", &AB),
            &stream_config(&StreamDecl::sourced("ALL", &BA)),
            &mut drift,
        );
        assert!(drift.immutable.is_empty() && drift.editable.is_empty());
    }

    #[test]
    fn changed_sources_are_editable() {
        static A: [Origin; 1] = [Origin::named("A")];
        static AB: [Origin; 2] = [Origin::named("A"), Origin::named("B")];
        let mut drift = Drift::default();
        origin_drift(
            &StreamDecl::sourced("ALL", &AB),
            &stream_config(&StreamDecl::sourced("ALL", &A)),
            &mut drift,
        );
        assert!(drift.immutable.is_empty());
        assert_eq!(drift.editable[0].field, "sources");
        assert_eq!(drift.editable[0].declared, "[A, B]");
    }
}
