//! The rules on the values of the attributes, single keys and between keys, in one place. Each
//! broken rule is recorded in the [`Ctxt`] at the token it is about; nothing is generated here.
//!
//! The rules are `topology_core`'s, the ones the runtime applies at start-up; the rules that
//! need another item (the stream a consumer names by type) are generated as `const _`
//! assertions by [`crate::emit`].

mod batch;
mod broadcast;
mod bucket;
mod codec;
mod origin;
mod partition;
mod priority;
mod service;
mod watch;

pub(crate) use batch::batch;
pub(crate) use broadcast::broadcast;
pub(crate) use bucket::bucket;
pub(crate) use codec::codec;
pub(crate) use service::{endpoint, service, subscription};
pub(crate) use watch::watch;

use syn::LitStr;
use topology_core::names::{self, NameError};
use topology_core::rules::{self, EXTERNAL_REFUSED_KEYS};
use topology_core::subject;

use crate::attrs::{ConsumerAttrs, Filters, QueueAttrs, StreamAttrs};
use crate::ctxt::Ctxt;
use crate::value::{PathOrString, key_msg};
use topology_core::model::Delivery;

/// The rules of `#[stream]`: the name, the subjects, no settings on an external stream, the
/// duplicate window within `max_age`, the description's length.
pub(crate) fn stream(attrs: &StreamAttrs, ident: Option<&syn::Ident>, cx: &mut Ctxt) {
    origin::origins(attrs, ident, cx);
    let msg = |key: &str, what: String| key_msg("stream", key, what);
    if let Some(name) = &attrs.name {
        valid_name("stream", "name", name, STREAM, cx);
    }
    if let Some(subjects) = attrs.subjects.as_ref().filter(|list| list.complete) {
        if subjects.lits.is_empty()
            && let Some(key) = &attrs.subjects_key
        {
            cx.error_at(
                key.span(),
                msg(
                    "subjects",
                    "a stream needs at least one subject, as in `subjects = [\"orders.>\"]`".into(),
                ),
            );
        }
        check_filters(
            "stream",
            "subjects",
            &subjects.lits,
            "stream's subjects",
            cx,
        );
    }
    if attrs.external {
        for (key, token) in &attrs.given {
            if EXTERNAL_REFUSED_KEYS.contains(key) || *key == "sources" {
                cx.error_spanned_by(
                    token,
                    format!(
                        "`#[stream]` key `{key}` cannot be set on an `external` stream: it is owned elsewhere, never created or changed here (only its `name`, `subjects` and `retention` are declared, for checks); remove `{key}`"
                    ),
                );
            }
        }
    }
    if let Some(window) = &attrs.duplicate_window
        && !rules::duplicate_window_fits(window.value, attrs.max_age.as_ref().map(|d| d.value))
    {
        cx.error_spanned_by(
            &window.lit,
            msg(
                "duplicate_window",
                format!(
                    "{:?} is longer than `max_age`; the server refuses a duplicate window longer than the messages are kept; shorten it or raise `max_age`",
                    window.lit.value()
                ),
            ),
        );
    }
    if let Some(description) = &attrs.description {
        self::description("stream", description, cx);
    }
    if let Some(placement) = &attrs.placement {
        self::placement(placement, cx);
    }
}

/// `placement = { .. }`: a cluster or tags, each a name the server can match.
fn placement(placement: &crate::attrs::PlacementAttrs, cx: &mut Ctxt) {
    let msg = |what: String| key_msg("stream", "placement", what);
    let tags = placement.tags.as_ref();
    if placement.speaks
        && placement.cluster.is_none()
        && tags.is_none_or(|t| t.lits.is_empty() && t.complete)
    {
        cx.error_spanned_by(
            &placement.block,
            msg("the block names neither a cluster nor tags; write `placement = { cluster = \"east\" }`, `placement = { tags = [\"ssd\"] }` or both, or omit `placement` to let the server choose".into()),
        );
    }
    let names = placement
        .cluster
        .iter()
        .chain(tags.into_iter().flat_map(|t| &t.lits));
    for name in names {
        if !rules::placement_name_ok(&name.value()) {
            cx.error_spanned_by(
                name,
                msg(format!(
                    "{:?} cannot name a cluster or a server tag: it must be non-empty and without whitespace",
                    name.value()
                )),
            );
        }
    }
}

/// The rules of `#[queue_consumer]`: those of every consumer, the group, the backoff against
/// `max_deliver`, the dead-letter subject against the filters, `migrate_from` against the group,
/// the description's length.
pub(crate) fn queue(attrs: &QueueAttrs, cx: &mut Ctxt) {
    consumer(&attrs.common, cx);
    let attr = attrs.common.attr;
    let msg = |key: &str, what: String| key_msg(attr, key, what);
    if let Some(n) = attrs.max_waiting
        && attrs.delivery == Some(Delivery::Push)
    {
        cx.error_at(
            n.span,
            msg(
                "max_waiting",
                topology_core::rules::ConsumerError::MaxWaitingOnPush
                    .message()
                    .into(),
            ),
        );
    }
    if let Some(group) = &attrs.group {
        valid_name(attr, "group", group, CONSUMER, cx);
    }
    if let Some(backoff) = &attrs.backoff {
        let steps = &backoff.steps;
        if steps.lits.is_empty() && steps.complete {
            cx.error_at(
                steps.brackets,
                msg(
                    "backoff",
                    "the list is empty; list at least one delay, or omit the key".into(),
                ),
            );
        }
        if let Some(max_deliver) = attrs.max_deliver
            && steps.complete
            && !rules::backoff_fits(steps.lits.len(), Some(max_deliver.value as i64))
        {
            let max = max_deliver.value;
            let deliveries = if max == 1 { "delivery" } else { "deliveries" };
            cx.error_spanned_by(
                &steps.lits[max as usize],
                msg(
                    "backoff",
                    format!(
                        "{} delays for at most {max} {deliveries} (`max_deliver = {max}`); the server refuses more delays than deliveries: remove the delays from here on, or raise `max_deliver`",
                        steps.lits.len()
                    ),
                ),
            );
        }
    }
    if let Some(lit) = &attrs.dead_letter {
        let value = lit.value();
        if let Err(error) = subject::check_subject(&value) {
            cx.error_spanned_by(
                lit,
                msg(
                    "dead_letter",
                    format!(
                        "{value:?} is not a valid dead-letter subject: {}",
                        error.message()
                    ),
                ),
            );
        } else {
            let filters: Vec<String> = attrs
                .common
                .filters
                .lits()
                .iter()
                .map(LitStr::value)
                .collect();
            let filters: Vec<&str> = filters.iter().map(String::as_str).collect();
            if !filters.is_empty() && rules::dead_letter_loops(&value, &filters, &[]) {
                cx.error_spanned_by(
                    lit,
                    msg(
                        "dead_letter",
                        format!(
                            "{value:?} matches this consumer's own filters: {}; publish dead letters to a subject it does not read",
                            rules::ConsumerError::DeadLetterLoops.message()
                        ),
                    ),
                );
            }
        }
    }
    if let Some(lit) = &attrs.migrate_from
        && valid_name(attr, "migrate_from", lit, CONSUMER, cx)
        && attrs
            .group
            .as_ref()
            .is_some_and(|g| g.value() == lit.value())
    {
        cx.error_spanned_by(
            lit,
            msg(
                "migrate_from",
                format!(
                    "{:?} is this consumer's own group; name the previous consumer to migrate from, or remove `migrate_from`",
                    lit.value()
                ),
            ),
        );
    }
    if let Some(lit) = &attrs.description {
        description(attr, lit, cx);
    }
    if let Some(priority) = &attrs.priority {
        priority::priority(attrs, priority, cx);
    }
    partition::partitioned(attrs, cx);
}

/// The rules both consumer macros share: the stream's name, and the filters.
pub(super) fn consumer(attrs: &ConsumerAttrs, cx: &mut Ctxt) {
    let attr = attrs.attr;
    if let Some(PathOrString::String(name)) = &attrs.stream {
        valid_name(attr, "stream", name, STREAM, cx);
    }
    match &attrs.filters {
        Filters::Both { later } => cx.error_spanned_by(
            later,
            format!(
                "`#[{attr}]` takes `subject` or `subjects`, not both; list every filter in `subjects = [..]`"
            ),
        ),
        Filters::One(lit) => check_filters(attr, "subject", std::slice::from_ref(lit), "filters", cx),
        Filters::Many(list) => {
            if list.lits.is_empty() && list.complete {
                cx.error_at(
                    list.brackets,
                    key_msg(
                        attr,
                        "subjects",
                        "the list is empty; list at least one filter, or omit the key to read the whole stream",
                    ),
                );
            }
            check_filters(attr, "subjects", &list.lits, "filters of one consumer", cx);
        }
        Filters::Whole | Filters::Unreadable => {}
    }
    if let Some(list) = &attrs.publishes {
        publishes(attr, list, cx);
    }
}

/// `publishes = [..]`: at least one subject, each a valid subject or pattern, none twice.
fn publishes(attr: &str, list: &crate::value::StrList, cx: &mut Ctxt) {
    if list.lits.is_empty() && list.complete {
        cx.error_at(
            list.brackets,
            key_msg(
                attr,
                "publishes",
                "the list is empty; list the subjects the handler publishes to, or omit the key if it publishes nothing",
            ),
        );
    }
    let values: Vec<String> = list.lits.iter().map(LitStr::value).collect();
    for (j, (lit, value)) in list.lits.iter().zip(&values).enumerate() {
        if let Err(error) = subject::check_filter(value) {
            cx.error_spanned_by(
                lit,
                key_msg(
                    attr,
                    "publishes",
                    format!("{value:?} is not a valid subject: {}", error.message()),
                ),
            );
        } else if values[..j].contains(value) {
            cx.error_spanned_by(
                lit,
                key_msg(
                    attr,
                    "publishes",
                    format!("{value:?} is given twice; remove one"),
                ),
            );
        }
    }
}

/// Each filter is valid, and no two overlap. `whose` names the list in messages.
fn check_filters(attr: &str, key: &str, filters: &[LitStr], whose: &str, cx: &mut Ctxt) {
    let values: Vec<String> = filters.iter().map(LitStr::value).collect();
    let mut valid = true;
    for (lit, value) in filters.iter().zip(&values) {
        if let Err(error) = subject::check_filter(value) {
            valid = false;
            cx.error_spanned_by(
                lit,
                key_msg(
                    attr,
                    key,
                    format!("{value:?} is not a valid subject: {}", error.message()),
                ),
            );
        }
    }
    if !valid {
        // Overlaps between invalid filters mean nothing.
        return;
    }
    for (j, later) in values.iter().enumerate() {
        if let Some(earlier) = values[..j].iter().find(|v| subject::overlaps(v, later)) {
            let what = if earlier == later {
                format!("{later:?} is given twice; remove one")
            } else {
                format!(
                    "{later:?} overlaps {earlier:?}: the {whose} cannot overlap (the server refuses it); keep the wider one"
                )
            };
            cx.error_spanned_by(&filters[j], key_msg(attr, key, what));
        }
    }
}

/// A kind of name, and its rule.
type NameRule = (&'static str, fn(&str) -> Result<(), NameError>);
const STREAM: NameRule = ("stream", names::check_stream_name);
const CONSUMER: NameRule = ("consumer", names::check_consumer_name);

/// Whether `lit` is a valid name by `rule`; an error at it if not.
fn valid_name(attr: &str, key: &str, lit: &LitStr, (kind, rule): NameRule, cx: &mut Ctxt) -> bool {
    let Err(error) = rule(&lit.value()) else {
        return true;
    };
    cx.error_spanned_by(
        lit,
        key_msg(
            attr,
            key,
            format!(
                "{:?} is not a valid {kind} name: {}",
                lit.value(),
                error.message()
            ),
        ),
    );
    false
}

/// The description's length.
fn description(attr: &str, lit: &LitStr, cx: &mut Ctxt) {
    if !rules::description_fits(&lit.value()) {
        cx.error_spanned_by(
            lit,
            key_msg(
                attr,
                "description",
                format!(
                    "the description is {} bytes long; the server accepts at most {}",
                    lit.value().len(),
                    rules::MAX_DESCRIPTION_LEN
                ),
            ),
        );
    }
}
