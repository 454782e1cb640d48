//! Mirrors and sources among the declared streams: no loop (a stream that, through mirrors and
//! sources, takes its own messages back: the server refuses the last one created, and by then
//! the others exist).

use std::collections::BTreeMap;

use topology_core::model::StreamDecl;

use super::{Problems, stream_at};

/// Reports each loop of mirrors and sources among `streams` once, from the first stream of
/// the loop in name order, with the path that closes it.
pub(super) fn check_loops(streams: &BTreeMap<&str, &StreamDecl>, problems: &mut Problems) {
    let mut reported: Vec<Vec<&str>> = Vec::new();
    for start in streams.keys() {
        let mut path = vec![*start];
        if let Some(cycle) = find_cycle(streams, &mut path) {
            let mut members = cycle.clone();
            members.sort();
            members.dedup();
            if reported.contains(&members) {
                continue;
            }
            reported.push(members);
            problems.push(
                stream_at(cycle[0]),
                format!(
                    "its mirror and sources form a loop: {}; messages would come back to the \
                     stream they left, and the server refuses the stream that closes the loop; \
                     remove one of these mirrors or sources",
                    cycle.join(" <- ")
                ),
            );
        }
    }
}

/// The streams a stream takes messages from in this JetStream, by name.
fn origins<'a>(stream: &'a StreamDecl) -> impl Iterator<Item = &'static str> + 'a {
    stream
        .mirror
        .iter()
        .chain(stream.sources)
        .filter(|origin| origin.is_local())
        .map(|origin| origin.name())
}

/// Depth-first from the last stream of `path`: the path back to its first stream, if any.
fn find_cycle<'a>(
    streams: &BTreeMap<&'a str, &'a StreamDecl>,
    path: &mut Vec<&'a str>,
) -> Option<Vec<&'a str>> {
    let stream = streams.get(path.last()?)?;
    for origin in origins(stream) {
        if origin == path[0] {
            let mut cycle = path.clone();
            cycle.push(origin);
            return Some(cycle);
        }
        if path.contains(&origin) || !streams.contains_key(origin) {
            continue;
        }
        path.push(origin);
        if let Some(cycle) = find_cycle(streams, path) {
            return Some(cycle);
        }
        path.pop();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handler::{HandlerFuture, Incoming};
    use crate::registry::Topology;
    use topology_core::model::{BroadcastDecl, ConsumerDecl, Origin, QueueDecl, StreamRef};

    fn handle(_: Incoming) -> HandlerFuture {
        Box::pin(async { Ok(()) })
    }

    /// At start-up, with streams named by string (no type to check at compile time): a
    /// consumer on a mirror is checked against the origin's subjects within the mirror's
    /// filter, one on a stream with sources against any origin's, and a loop is found.
    #[test]
    fn consumers_on_mirrors_and_loops_are_checked_at_start_up() {
        static ORDERS: StreamDecl = StreamDecl::new("ORDERS", &["orders.>"]);
        static EU: StreamDecl =
            StreamDecl::mirror_of("EU", Origin::named("ORDERS").filter("orders.eu.>"));
        static ALL: StreamDecl =
            StreamDecl::sourced("ALL", &[Origin::named("EU"), Origin::named("LOOP")]);
        static LOOP: StreamDecl = StreamDecl::sourced("LOOP", &[Origin::named("ALL")]);
        let queue = |handler, stream, subject| {
            ConsumerDecl::queue(handler, StreamRef::Named(stream), QueueDecl::new(handler))
                .subjects(std::slice::from_ref(Box::leak(Box::new(subject))))
        };
        let relay = ConsumerDecl::broadcast("relay", StreamRef::Named("ALL"), BroadcastDecl::new())
            .subjects(&["orders.eu.>"]);
        let topology = Topology::new()
            .stream(ORDERS)
            .stream(EU)
            .stream(ALL)
            .stream(LOOP)
            .consumer(queue("eu", "EU", "orders.eu.paid"), handle)
            .consumer(queue("us", "EU", "orders.us.paid"), handle)
            .consumer(relay, handle);
        let problems = crate::validate::validate(&topology)
            .expect_err("problems")
            .problems;
        let text: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
        assert_eq!(problems.len(), 2, "{text:#?}");
        assert!(
            text.iter().any(|p| p.contains("handler `us`")
                && p.contains("`orders.us.paid` is not among the messages the stream holds")),
            "{text:#?}"
        );
        assert!(
            text.iter()
                .any(|p| p.starts_with("stream `ALL`") && p.contains("ALL <- LOOP <- ALL")),
            "{text:#?}"
        );
    }

    #[test]
    fn a_loop_through_three_streams_is_reported_once() {
        static A: StreamDecl = StreamDecl::new("A", &["a.>"]).sources(&[Origin::named("C")]);
        static B: StreamDecl = StreamDecl::mirror_of("B", Origin::named("A"));
        static C: StreamDecl = StreamDecl::sourced("C", &[Origin::named("B")]);
        static D: StreamDecl = StreamDecl::sourced("D", &[Origin::named("A")]);
        static E: StreamDecl = StreamDecl::sourced("E", &[Origin::named("A").domain("hub")]);
        let streams: BTreeMap<&str, &StreamDecl> = [&A, &B, &C, &D, &E]
            .into_iter()
            .map(|s| (s.name, s))
            .collect();
        let mut problems = Problems(Vec::new());
        check_loops(&streams, &mut problems);
        assert_eq!(problems.0.len(), 1, "{:?}", problems.0);
        assert_eq!(problems.0[0].location, "stream `A`");
        assert!(problems.0[0].message.contains("A <- C <- B <- A"));
    }
}
