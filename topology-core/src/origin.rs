//! Where a stream's messages come from when it does not capture them itself: a mirror's
//! [`Origin`] (one stream, copied as it is), sources (several, aggregated), and the
//! [`SubjectTransform`] a stream applies to what it stores.
//!
//! A mirror declares no subjects: it holds its origin's messages (within the origin's `filter`),
//! so [`delivers`] answers "does a consumer filter on this stream ever receive a message" by
//! looking through mirrors and sources to the subjects of their origins.

use crate::model::{StreamDecl, StreamRef};
use crate::rules::str_eq;
use crate::subject;

/// A stream that a mirror copies or a stream sources from, with what is taken from it.
///
/// `stream` is a declared stream ([`Origin::of`], checked at compile time) or a name
/// ([`Origin::named`]) for a stream declared elsewhere, in another domain (`domain`) or reached
/// through another account's API (`api_prefix`).
///
/// ```
/// use topology_core::model::{Origin, StreamDecl, StreamDef};
///
/// struct Orders;
/// impl StreamDef for Orders {
///     const DECL: StreamDecl = StreamDecl::new("ORDERS", &["orders.>"]);
/// }
/// const ORDERS_EU: StreamDecl =
///     StreamDecl::mirror_of("ORDERS_EU", Origin::of(&Orders::DECL).filter("orders.eu.>"));
/// const HUB: StreamDecl =
///     StreamDecl::mirror_of("ORDERS_HUB", Origin::named("ORDERS").domain("hub"));
/// assert_eq!(ORDERS_EU.mirror.unwrap().name(), "ORDERS");
/// assert!(ORDERS_EU.subjects.is_empty());
/// assert_eq!(HUB.mirror.unwrap().domain, Some("hub"));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Origin {
    /// The stream copied or sourced.
    pub stream: StreamRef,
    /// Only its messages on subjects matching this filter.
    pub filter: Option<&'static str>,
    /// Their subjects rewritten to this destination (a subject mapping: `eu.>`,
    /// `archive.{{wildcard(1)}}`), from `filter` or, without one, from every subject.
    pub transform: Option<&'static str>,
    /// The JetStream domain the stream lives in (its API is `$JS.<domain>.API`).
    pub domain: Option<&'static str>,
    /// The API prefix its JetStream is reached through (another account's import).
    pub api_prefix: Option<&'static str>,
}

impl Origin {
    /// A declared stream (`Origin::of(&Orders::DECL)`).
    pub const fn of(decl: &'static StreamDecl) -> Self {
        Origin::new(StreamRef::Declared(decl))
    }
    /// A stream by its name on the server.
    pub const fn named(name: &'static str) -> Self {
        Origin::new(StreamRef::Named(name))
    }
    const fn new(stream: StreamRef) -> Self {
        Origin {
            stream,
            filter: None,
            transform: None,
            domain: None,
            api_prefix: None,
        }
    }
    /// Takes only the messages whose subject matches `filter`.
    pub const fn filter(mut self, filter: &'static str) -> Self {
        self.filter = Some(filter);
        self
    }
    /// Rewrites the subjects taken to `dest`.
    pub const fn transform(mut self, dest: &'static str) -> Self {
        self.transform = Some(dest);
        self
    }
    /// The stream lives in the JetStream domain `domain`.
    pub const fn domain(mut self, domain: &'static str) -> Self {
        self.domain = Some(domain);
        self
    }
    /// The stream's JetStream is reached through `api_prefix`.
    pub const fn api_prefix(mut self, api_prefix: &'static str) -> Self {
        self.api_prefix = Some(api_prefix);
        self
    }
    /// The stream's name on the server.
    pub const fn name(&self) -> &'static str {
        self.stream.name()
    }
    /// Whether the stream is reached in this JetStream (no domain, no API prefix): only then
    /// can it be this stream itself, or part of a loop among declared streams.
    pub const fn is_local(&self) -> bool {
        self.domain.is_none() && self.api_prefix.is_none()
    }
    /// The API prefix the server is given: `api_prefix`, else `$JS.<domain>.API`; `None` for a
    /// local stream. (Written by the caller, which owns the allocation.)
    pub const fn external(&self) -> Option<External> {
        match (self.api_prefix, self.domain) {
            (Some(prefix), _) => Some(External::Prefix(prefix)),
            (None, Some(domain)) => Some(External::Domain(domain)),
            (None, None) => None,
        }
    }
}

/// How an origin outside this JetStream is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum External {
    /// Through this API prefix.
    Prefix(&'static str),
    /// In this domain: through `$JS.<domain>.API`.
    Domain(&'static str),
}

/// A rewrite of the subjects a stream stores: a message captured on a subject matching `src`
/// is stored under `dest` (a subject mapping, as in `{{wildcard(1)}}`).
///
/// ```
/// use topology_core::model::{StreamDecl, SubjectTransform};
///
/// const EVENTS: StreamDecl = StreamDecl::new("EVENTS", &["in.>"])
///     .subject_transform(SubjectTransform::new("in.>", "events.>"));
/// assert_eq!(EVENTS.subject_transform.unwrap().dest, "events.>");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SubjectTransform {
    /// The subjects rewritten.
    pub src: &'static str,
    /// What they become.
    pub dest: &'static str,
}

impl SubjectTransform {
    /// Rewrites subjects matching `src` to `dest`.
    pub const fn new(src: &'static str, dest: &'static str) -> Self {
        SubjectTransform { src, dest }
    }
}

/// Whether every message on a subject matching `filter` can be in `stream`: captured by its
/// subjects, or, for a mirror or a stream with sources, held by an origin whose subjects cover
/// the filter within the origin's `filter`. Where subjects are rewritten (a `transform`, a
/// stream's `subject_transform`) or an origin is a name not found in `declared`, nothing is
/// known, and the answer is `true` (the server has the last word).
///
/// ```
/// use topology_core::model::{Origin, StreamDecl};
/// use topology_core::origin::delivers;
///
/// static ORDERS: StreamDecl = StreamDecl::new("ORDERS", &["orders.>"]);
/// static EU: StreamDecl = StreamDecl::mirror_of("EU", Origin::of(&ORDERS).filter("orders.eu.>"));
/// assert!(delivers("orders.eu.paid", &EU, &[]));
/// assert!(!delivers("orders.us.paid", &EU, &[]));
/// assert!(!delivers("billing.x", &EU, &[]));
/// ```
pub const fn delivers(filter: &str, stream: &StreamDecl, declared: &[&StreamDecl]) -> bool {
    delivers_within(filter, stream, declared, 8)
}

/// [`delivers`], following at most `depth` origins (a loop among named streams ends).
const fn delivers_within(
    filter: &str,
    stream: &StreamDecl,
    declared: &[&StreamDecl],
    depth: u8,
) -> bool {
    if stream.subject_transform.is_some() || depth == 0 {
        return true;
    }
    if let Some(origin) = &stream.mirror {
        return origin_delivers(filter, origin, declared, depth - 1);
    }
    if subject::covered_by(filter, stream.subjects) {
        return true;
    }
    let mut i = 0;
    while i < stream.sources.len() {
        if origin_delivers(filter, &stream.sources[i], declared, depth - 1) {
            return true;
        }
        i += 1;
    }
    false
}

const fn origin_delivers(
    filter: &str,
    origin: &Origin,
    declared: &[&StreamDecl],
    depth: u8,
) -> bool {
    if origin.transform.is_some() {
        return true;
    }
    if let Some(taken) = origin.filter
        && !subject::covered_by(filter, &[taken])
    {
        return false;
    }
    match origin.stream {
        StreamRef::Declared(decl) => delivers_within(filter, decl, declared, depth),
        StreamRef::Named(name) => {
            let mut i = 0;
            while i < declared.len() {
                if str_eq(declared[i].name, name) {
                    return delivers_within(filter, declared[i], declared, depth);
                }
                i += 1;
            }
            true
        }
    }
}

/// The first nats-server with subject transforms on a stream and on its mirror or sources
/// (an older server ignores the unknown fields and stores the subjects as they are).
pub const TRANSFORMS_SINCE: (u64, u64, u64) = (2, 10, 0);

/// The first subject transform `decl` declares, as `(key, destination)`: its own
/// `subject_transform`, or a mirror's or source's `transform`.
pub const fn first_transform(decl: &StreamDecl) -> Option<(&'static str, &'static str)> {
    if let Some(transform) = decl.subject_transform {
        return Some(("subject_transform", transform.dest));
    }
    if let Some(origin) = &decl.mirror
        && let Some(dest) = origin.transform
    {
        return Some(("mirror", dest));
    }
    let mut i = 0;
    while i < decl.sources.len() {
        if let Some(dest) = decl.sources[i].transform {
            return Some(("sources", dest));
        }
        i += 1;
    }
    None
}

/// Whether `decl` names itself as its mirror or one of its sources (in this JetStream).
pub const fn names_itself(decl: &StreamDecl) -> bool {
    if let Some(origin) = &decl.mirror
        && origin.is_local()
        && str_eq(origin.name(), decl.name)
    {
        return true;
    }
    let mut i = 0;
    while i < decl.sources.len() {
        if decl.sources[i].is_local() && str_eq(decl.sources[i].name(), decl.name) {
            return true;
        }
        i += 1;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    static ORDERS: StreamDecl = StreamDecl::new("ORDERS", &["orders.>"]);
    static BILLING: StreamDecl = StreamDecl::new("BILLING", &["billing.>"]);
    static ALL: StreamDecl =
        StreamDecl::sourced("ALL", &[Origin::of(&ORDERS), Origin::named("BILLING")]);

    #[test]
    fn sources_deliver_what_any_origin_holds() {
        assert!(delivers("orders.eu", &ALL, &[]));
        assert!(delivers("billing.x", &ALL, &[&BILLING]));
        assert!(!delivers("shipping.x", &ALL, &[&BILLING]));
        // A name not declared: nothing known, the server decides.
        assert!(delivers("shipping.x", &ALL, &[]));
    }

    #[test]
    fn a_mirror_of_a_mirror_looks_through_both_filters() {
        static EU: StreamDecl =
            StreamDecl::mirror_of("EU", Origin::of(&ORDERS).filter("orders.eu.>"));
        static EU_PAID: StreamDecl =
            StreamDecl::mirror_of("EU_PAID", Origin::of(&EU).filter("*.*.paid"));
        assert!(delivers("orders.eu.paid", &EU_PAID, &[]));
        assert!(!delivers("orders.us.paid", &EU_PAID, &[]));
        assert!(!delivers("orders.eu.sent", &EU_PAID, &[]));
    }

    #[test]
    fn a_stream_naming_itself_is_found_unless_in_another_domain() {
        assert!(names_itself(&StreamDecl::mirror_of(
            "A",
            Origin::named("A")
        )));
        assert!(!names_itself(&StreamDecl::mirror_of(
            "A",
            Origin::named("A").domain("hub")
        )));
        static BOTH: [Origin; 2] = [Origin::named("B"), Origin::named("A")];
        assert!(names_itself(&StreamDecl::sourced("A", &BOTH)));
        assert!(!names_itself(&ALL));
    }
}
