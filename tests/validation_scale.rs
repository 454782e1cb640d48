//! Validation at scale: several thousand declarations, with problems of every cross-item
//! kind planted among them, give exactly the problems the former pairwise checks gave
//! (comparing every pair of streams, and every pair of consumers of a work-queue stream).

use nats_topology::model::{ConsumerDecl, QueueDecl, Retention, StreamDecl, StreamRef};
use nats_topology::{HandlerError, HandlerFuture, Incoming, Problem, Topology};
use topology_core::subject;

fn noop(_: Incoming) -> HandlerFuture {
    Box::pin(async { Ok::<(), HandlerError>(()) })
}

fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

fn slice(v: Vec<&'static str>) -> &'static [&'static str] {
    Box::leak(v.into_boxed_slice())
}

/// 400 streams (every fourth a work queue) and 4,000 consumers, in a shuffled order, with
/// overlapping streams, overlapping and unfiltered work-queue consumers, wildcards, and an
/// external stream that overlaps (which is allowed).
fn topology() -> Topology {
    let mut streams = Vec::new();
    for k in 0..400usize {
        let mut subjects = vec![leak(format!("s{k}.>"))];
        match k % 50 {
            7 => subjects.push(leak(format!("s{}.x.*", k - 1))), // overlaps stream k-1
            13 => subjects.push("shared.*.y"),
            29 => subjects.push("shared.z.*"), // overlaps the `shared.*.y` ones
            _ => {}
        }
        let mut decl = StreamDecl::new(leak(format!("S{k:04}")), slice(subjects));
        if k % 4 == 0 {
            decl = decl.retention(Retention::WorkQueue);
        }
        streams.push(&*Box::leak(Box::new(decl)));
    }
    let external: &'static StreamDecl =
        Box::leak(Box::new(StreamDecl::new("EXTERNAL", &["s1.>"]).external()));
    let mut consumers = Vec::new();
    for i in 0..4000usize {
        let k = i / 10;
        let filters = match i % 97 {
            3 => vec![],                                  // unfiltered
            5 => vec![leak(format!("s{k}.*"))],           // overlaps the literal ones
            11 => vec![leak(format!("s{k}.c{}", i - 1))], // same filter as the previous one
            _ => vec![leak(format!("s{k}.c{i}"))],
        };
        consumers.push(
            ConsumerDecl::queue(
                leak(format!("scale::h{i:05}")),
                StreamRef::Declared(streams[k]),
                QueueDecl::new(leak(format!("g{i:05}"))),
            )
            .subjects(slice(filters)),
        );
    }
    // A shuffled order of additions: the result must not depend on it.
    let mut order: Vec<usize> = (0..consumers.len()).collect();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for i in (1..order.len()).rev() {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        order.swap(i, (seed % (i as u64 + 1)) as usize);
    }
    let mut topology = Topology::new().stream(*external);
    for &k in order.iter().take(100) {
        topology = topology.stream(*streams[k % streams.len()]);
    }
    for i in order {
        topology = topology.consumer(consumers[i], noop);
    }
    topology
}

/// The former checks, comparing every pair.
fn pairwise(topology: &Topology) -> Vec<Problem> {
    let mut problems = Vec::new();
    let owned: Vec<&StreamDecl> = topology.streams().iter().filter(|s| !s.external).collect();
    for (i, a) in owned.iter().enumerate() {
        for b in &owned[i + 1..] {
            let clash = a.subjects.iter().find_map(|x| {
                b.subjects
                    .iter()
                    .find(|y| subject::overlaps(x, y))
                    .map(|y| (*x, *y))
            });
            if let Some((x, y)) = clash {
                problems.push(Problem {
                    location: format!("streams `{}` and `{}`", a.name, b.name),
                    message: format!(
                        "subjects `{x}` and `{y}` overlap; the server gives a subject to one \
                         stream only: narrow one of them, or declare one stream `external` if \
                         another service owns it"
                    ),
                });
            }
        }
    }
    for stream in topology.streams() {
        if stream.retention != Some(Retention::WorkQueue) {
            continue;
        }
        let consumers: Vec<&ConsumerDecl> = topology
            .consumers()
            .iter()
            .map(|c| &c.decl)
            .filter(|d| d.stream.name() == stream.name && d.as_queue().is_some())
            .collect();
        for (i, a) in consumers.iter().enumerate() {
            for b in &consumers[i + 1..] {
                let overlap = match (a.subjects, b.subjects) {
                    ([], _) | (_, []) => true,
                    (xs, ys) => xs
                        .iter()
                        .any(|x| ys.iter().any(|y| subject::overlaps(x, y))),
                };
                if overlap {
                    problems.push(Problem {
                        location: format!("stream `{}`", stream.name),
                        message: format!(
                            "work-queue stream: consumers `{}` and `{}` have overlapping filters; \
                             a work queue hands each message to one consumer, so give them \
                             disjoint subjects",
                            a.as_queue().unwrap().group,
                            b.as_queue().unwrap().group
                        ),
                    });
                }
            }
        }
    }
    problems
}

#[test]
fn thousands_of_declarations_give_the_problems_pairwise_checks_gave() {
    let topology = topology();
    assert_eq!(topology.consumers().len(), 4000);
    assert_eq!(topology.streams().len(), 401);
    let expected = pairwise(&topology);
    let found = topology_runtime::validate::validate(&topology)
        .expect_err("the planted problems are found")
        .problems;
    // Only the cross-item kinds the former pairwise checks covered, in the order found.
    let cross: Vec<Problem> = found
        .into_iter()
        .filter(|p| p.location.starts_with("streams `") || p.message.starts_with("work-queue"))
        .collect();
    assert!(expected.len() > 50, "planted problems: {}", expected.len());
    assert_eq!(cross, expected);
}
