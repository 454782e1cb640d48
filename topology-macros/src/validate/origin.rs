//! The rules of `mirror`, `sources` and `subject_transform` in `#[stream]`, each error at its
//! token: a mirror declares no subjects and has no sources; no stream names itself; names and
//! subjects are valid; `domain` or `api_prefix`, not both; a transform is one nats-server
//! takes (`topology_core::transform`).

use syn::{Ident, LitStr};
use topology_core::rules::StreamError;
use topology_core::{subject, transform};

use super::{STREAM, valid_name};
use crate::attrs::{OriginAttrs, StreamAttrs};
use crate::ctxt::Ctxt;
use crate::value::{PathOrString, key_msg};

/// The rules of a stream's origins; `ident` is the struct's name (`None` when the item is not
/// a struct, reported elsewhere).
pub(super) fn origins(attrs: &StreamAttrs, ident: Option<&Ident>, cx: &mut Ctxt) {
    let given = |key: &str| attrs.given.iter().find(|(k, _)| *k == key).map(|(_, t)| t);
    if attrs.mirror.is_some() {
        if let Some(token) = given("subjects") {
            cx.error_spanned_by(
                token,
                key_msg(
                    "stream",
                    "subjects",
                    StreamError::MirrorWithSubjects.message(),
                ),
            );
        }
        if let Some(token) = given("sources") {
            cx.error_spanned_by(
                token,
                key_msg("stream", "sources", StreamError::MirrorAndSources.message()),
            );
        }
    }
    if let Some((list, brackets)) = &attrs.sources
        && list.is_empty()
    {
        cx.error_at(
            *brackets,
            key_msg("stream", "sources", "the list is empty; name the streams aggregated, as in `sources = [Orders, Billing]`, or omit the key"),
        );
    }
    let name = attrs.name.as_ref().map(LitStr::value);
    let mirror = attrs.mirror.iter().map(|o| ("mirror", o));
    let sources = attrs
        .sources
        .iter()
        .flat_map(|(list, _)| list)
        .map(|o| ("sources", o));
    for (key, origin) in mirror.chain(sources) {
        self::origin(key, origin, ident, name.as_deref(), cx);
    }
    if let Some(transform) = &attrs.subject_transform {
        if let Some(src) = &transform.src {
            filter("subject_transform", src, cx);
        }
        if let Some(dest) = transform.dest.as_ref().filter(|d| d.value().is_empty()) {
            cx.error_spanned_by(
                dest,
                key_msg("stream", "subject_transform", "the destination is empty; write the subject the messages are stored under, as in `dest = \"events.>\"`"),
            );
        }
        if let (Some(src), Some(dest)) = (&transform.src, &transform.dest)
            && subject::check_filter(&src.value()).is_ok()
        {
            server_transform("subject_transform", &src.value(), dest, cx);
        }
    }
}

/// Refuses, at the destination, a transform of `src` to `dest` that nats-server would refuse
/// when it creates the stream (an empty destination is reported on its own).
fn server_transform(key: &str, src: &str, dest: &LitStr, cx: &mut Ctxt) {
    let dest_text = dest.value();
    if dest_text.is_empty() {
        return;
    }
    if let Err(error) = transform::check_transform(src, &dest_text) {
        let what = match error.token(&dest_text) {
            Some(token) => format!("`{token}`: {}", error.message()),
            None => error.message().to_owned(),
        };
        cx.error_spanned_by(
            dest,
            key_msg(
                "stream",
                key,
                format!(
                    "nats-server refuses the transform of {src:?} to {dest_text:?} when it creates the stream: {what}"
                ),
            ),
        );
    }
}

fn origin(
    key: &str,
    origin: &OriginAttrs,
    ident: Option<&Ident>,
    name: Option<&str>,
    cx: &mut Ctxt,
) {
    let local = origin.domain.is_none() && origin.api_prefix.is_none();
    // The token naming this very stream, if it does (in this JetStream).
    let own: Option<&dyn quote::ToTokens> = match &origin.stream {
        Some(PathOrString::Path(path)) => {
            let own = path.is_ident("Self") || ident.is_some_and(|i| path.is_ident(i));
            (local && own).then_some(path as &dyn quote::ToTokens)
        }
        Some(PathOrString::String(lit)) => {
            let valid = valid_name("stream", key, lit, STREAM, cx);
            (valid && local && name == Some(&lit.value())).then_some(lit as &dyn quote::ToTokens)
        }
        None => None,
    };
    if let Some(token) = own {
        cx.error_spanned_by(
            token,
            key_msg("stream", key, StreamError::NamesItself.message()),
        );
    }
    if let Some(lit) = &origin.filter {
        filter(key, lit, cx);
    }
    if let Some(dest) = origin.transform.as_ref().filter(|d| d.value().is_empty()) {
        cx.error_spanned_by(
            dest,
            key_msg("stream", key, "`transform` is empty; write the subject the messages are stored under, as in `transform = \"eu.orders.>\"`, or omit it"),
        );
    }
    if let Some(dest) = &origin.transform {
        let src = origin
            .filter
            .as_ref()
            .map_or_else(|| ">".to_owned(), LitStr::value);
        if subject::check_filter(&src).is_ok() {
            server_transform(key, &src, dest, cx);
        }
    }
    if let (Some(_), Some(prefix)) = (&origin.domain, &origin.api_prefix) {
        cx.error_spanned_by(
            prefix,
            key_msg("stream", key, StreamError::OriginDomainAndPrefix.message()),
        );
    }
}

fn filter(key: &str, lit: &LitStr, cx: &mut Ctxt) {
    if let Err(error) = subject::check_filter(&lit.value()) {
        cx.error_spanned_by(
            lit,
            key_msg(
                "stream",
                key,
                format!(
                    "{:?} is not a valid subject filter: {}",
                    lit.value(),
                    error.message()
                ),
            ),
        );
    }
}
