//! Where a stream's messages come from when it does not capture them itself: a mirror's
//! [`Origin`] (one stream, copied as it is), sources (several, aggregated), and the
//! [`SubjectTransform`] a stream applies to what it stores.
//!
//! A mirror declares no subjects: it holds its origin's messages (within the origin's `filter`),
//! so [`delivers`] answers "does a consumer filter on this stream ever receive a message" by
//! looking through mirrors and sources to the subjects of their origins.

pub use crate::model::{External, Origin, SubjectTransform};

use crate::model::{StreamDecl, StreamRef};
use crate::prim::str_eq;
use crate::subject;

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
