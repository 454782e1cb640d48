//! The rules of `#[service]`, `#[endpoint]` and `#[subscription]`: `topology_core::service`'s,
//! each broken one reported at its token.

use syn::LitStr;
use topology_core::service::{self as rules, ServiceDeclError};

use super::description;
use crate::attrs::{EndpointAttrs, ServiceAttrs, SubscriptionAttrs};
use crate::ctxt::Ctxt;
use crate::item::Handler;
use crate::value::{Pairs, key_msg};

/// The name, the version, the description's length, the queue group and the metadata.
pub(crate) fn service(attrs: &ServiceAttrs, cx: &mut Ctxt) {
    let attr = "service";
    if let Some(name) = &attrs.name {
        check(attr, "name", name, "service name", rules::check_name, cx);
    }
    if let Some(version) = &attrs.version {
        check(
            attr,
            "version",
            version,
            "version",
            rules::check_version,
            cx,
        );
    }
    if let Some(lit) = &attrs.description {
        description(attr, lit, cx);
    }
    if let Some(group) = &attrs.queue_group {
        check(
            attr,
            "queue_group",
            group,
            "queue group",
            rules::check_queue_group,
            cx,
        );
    }
    if let Some(pairs) = &attrs.metadata {
        metadata(attr, pairs, cx);
    }
}

/// The subject, the name (given, or the handler's), the group and the metadata.
pub(crate) fn endpoint(attrs: &EndpointAttrs, handler: Option<&Handler>, cx: &mut Ctxt) {
    let attr = "endpoint";
    if let Some(subject) = &attrs.subject {
        check(
            attr,
            "subject",
            subject,
            "subject",
            rules::check_work_subject,
            cx,
        );
    }
    match (&attrs.name, handler) {
        (Some(name), _) => {
            check(attr, "name", name, "endpoint name", rules::check_name, cx);
        }
        (None, Some(handler)) => {
            let name = handler.name();
            if let Err(error) = rules::check_name(&name) {
                cx.error_spanned_by(
                    &handler.ident,
                    format!(
                        "`#[{attr}]`: the endpoint is named after its function, `{name}`, which is not a valid endpoint name: {}; give it one with `name = \"...\"`",
                        error.message()
                    ),
                );
            }
        }
        (None, None) => {}
    }
    if let Some(group) = &attrs.group {
        check(
            attr,
            "group",
            group,
            "queue group",
            rules::check_queue_group,
            cx,
        );
    }
    if let Some(pairs) = &attrs.metadata {
        metadata(attr, pairs, cx);
    }
}

/// The subject, the group, and not both `group` and `each_instance`.
pub(crate) fn subscription(attrs: &SubscriptionAttrs, cx: &mut Ctxt) {
    let attr = "subscription";
    if let Some(subject) = &attrs.subject {
        check(
            attr,
            "subject",
            subject,
            "subject",
            rules::check_work_subject,
            cx,
        );
    }
    if let Some(group) = &attrs.group {
        check(
            attr,
            "group",
            group,
            "queue group",
            rules::check_queue_group,
            cx,
        );
    }
    if let Some(later) = &attrs.both {
        cx.error_spanned_by(
            later,
            format!(
                "`#[{attr}]` takes `group` or `each_instance`, not both: `group = \"...\"` shares each message among the instances (one of them handles it), `each_instance` gives it to every instance; keep the one you mean"
            ),
        );
    }
}

/// Whether `lit` passes `rule`; an error at it if not.
fn check(
    attr: &str,
    key: &str,
    lit: &LitStr,
    what: &str,
    rule: fn(&str) -> Result<(), ServiceDeclError>,
    cx: &mut Ctxt,
) -> bool {
    let Err(error) = rule(&lit.value()) else {
        return true;
    };
    let value = lit.value();
    let what = match error {
        ServiceDeclError::SubjectReserved => format!("{value:?} is reserved"),
        _ => format!("{value:?} is not a valid {what}"),
    };
    cx.error_spanned_by(
        lit,
        key_msg(attr, key, format!("{what}: {}", error.message())),
    );
    false
}

/// Each pair is checked against the ones accepted before it, so that every bad key is
/// reported at its token.
fn metadata(attr: &str, pairs: &Pairs, cx: &mut Ctxt) {
    let values: Vec<(String, String)> = (pairs.pairs.iter())
        .map(|(k, v)| (k.value(), v.value()))
        .collect();
    let mut accepted: Vec<(&str, &str)> = Vec::new();
    for ((key, _), (k, v)) in pairs.pairs.iter().zip(&values) {
        accepted.push((k, v));
        if let Err(error) = rules::check_metadata(&accepted) {
            accepted.pop();
            cx.error_spanned_by(
                key,
                key_msg(attr, "metadata", format!("{k:?}: {}", error.message())),
            );
        }
    }
}
