//! Routes, and the consumers a partitioned group runs as.

use super::*;
use topology_core::model::SubjectTransform;

const PARTITIONS: Partitioning = Partitioning::new(16, &[1]);

fn stream(transform: Option<SubjectTransform>) -> StreamDecl {
    let decl = StreamDecl::new("ORDERS", &["orders.*.paid"]);
    match transform {
        Some(t) => decl.subject_transform(t),
        None => decl,
    }
}

#[test]
fn a_route_gives_each_partition_its_filter() {
    let decl = stream(Some(SubjectTransform::new(
        "orders.*.paid",
        "{{partition(16,1)}}.orders.{{wildcard(1)}}.paid",
    )));
    let route = route(&decl, "orders.*.paid", &PARTITIONS).unwrap();
    assert_eq!(route.filter(3), "3.orders.*.paid");
    let spaced = stream(Some(SubjectTransform::new(
        "orders.*.paid",
        "orders.$1.paid.{{ partition(16, 1) }}",
    )));
    let route = super::route(&spaced, "orders.*.paid", &PARTITIONS).unwrap();
    assert_eq!(route.filter(15), "orders.*.paid.15");
    assert_eq!(route.key_positions(&[1]), Some(vec![1]));
}

#[test]
fn a_route_says_where_the_key_is_in_a_stored_subject() {
    let two = Partitioning::new(8, &[2, 1]);
    let decl = StreamDecl::new("ORDERS", &["orders.*.*"]).subject_transform(SubjectTransform::new(
        "orders.*.*",
        "{{partition(8,2,1)}}.orders.{{wildcard(1)}}.$2",
    ));
    let route = route(&decl, "orders.*.*", &two).unwrap();
    assert_eq!(route.filter(5), "5.orders.*.*");
    assert_eq!(route.key_positions(two.key), Some(vec![3, 2]));
    assert_eq!(
        route.key_positions(&[3]),
        None,
        "a wildcard the stored subject does not write"
    );
}

#[test]
fn a_stream_that_cannot_carry_the_partition_says_what_to_declare() {
    let wanted = "subject_transform = { src = \"orders.*.paid\", dest = \"{{partition(16,1)}}.orders.{{wildcard(1)}}.paid\" }";
    let none = route(&stream(None), "orders.*.paid", &PARTITIONS).unwrap_err();
    assert!(
        none.contains("stores `orders.*.paid` as published") && none.contains(wanted),
        "{none}"
    );
    let other_count = stream(Some(SubjectTransform::new(
        "orders.*.paid",
        "{{partition(8,1)}}.orders.$1.paid",
    )));
    let error = route(&other_count, "orders.*.paid", &PARTITIONS).unwrap_err();
    assert!(
        error.contains("`{{partition(16,1)}}`") && error.contains(wanted),
        "{error}"
    );
    let other_subject = stream(Some(SubjectTransform::new(
        "orders.>",
        "{{partition(16,1)}}.>",
    )));
    let error = route(&other_subject, "orders.*.paid", &PARTITIONS).unwrap_err();
    assert!(error.contains("rewrites `orders.>`"), "{error}");
    let split = stream(Some(SubjectTransform::new(
        "orders.*.paid",
        "{{partition(16,1)}}.{{split(1,-)}}.paid",
    )));
    let error = route(&split, "orders.*.paid", &PARTITIONS).unwrap_err();
    assert!(error.contains("`{{split(1,-)}}`"), "{error}");
}

#[test]
fn a_new_count_reads_the_old_partitions_and_names_each_it_follows() {
    use topology_core::model::StreamRef;
    static ROUTED: StreamDecl =
        StreamDecl::new("ORDERS", &["orders.*.paid"]).subject_transform(SubjectTransform::new(
            "orders.*.paid",
            "{{partition(2,1)}}.v2.orders.{{wildcard(1)}}.paid",
        ));
    // From 3 partitions to 2.
    let decl = ConsumerDecl::queue(
        "svc::billing",
        StreamRef::Declared(&ROUTED),
        QueueDecl::new("billing-v2")
            .partitioned(2, &[1])
            .migrate_from("billing")
            .migrate_from_partitions(3),
    )
    .subjects(&["orders.*.paid"]);
    let topology = Topology::new()
        .stream(ROUTED)
        .consumer(decl, |_| Box::pin(async { Ok(()) }))
        .partitioned();
    let consumers: Vec<_> = topology
        .consumers()
        .iter()
        .map(|c| {
            let queue = c.decl.as_queue().unwrap();
            (
                queue.group,
                queue.migrate_from,
                c.superseded_by,
                c.partition.map(|p| (p.group, p.index, p.of)),
            )
        })
        .collect();
    let new = |index: u16, from| {
        let name: &str = ["billing-v2-p0", "billing-v2-p1"][usize::from(index)];
        (name, from, None, Some(("billing-v2", index, 2)))
    };
    let old = |index: u16| {
        let name: &str = ["billing-p0", "billing-p1", "billing-p2"][usize::from(index)];
        (name, None, Some("billing-v2"), Some(("billing", index, 3)))
    };
    for expected in [
        new(0, Some("billing-p0")),
        new(1, Some("billing-p1")),
        old(0),
        old(1),
        old(2),
    ] {
        assert!(
            consumers.contains(&expected),
            "{expected:?} in {consumers:?}"
        );
    }
    assert_eq!(consumers.len(), 5, "{consumers:?}");
    // Each old partition is read as a partition: a pinned client, one message at a time.
    let old_p2 = topology
        .consumers()
        .iter()
        .find(|c| c.decl.as_queue().is_some_and(|q| q.group == "billing-p2"))
        .unwrap();
    let queue = old_p2.decl.as_queue().unwrap();
    assert_eq!(queue.max_ack_pending, Some(1));
    assert!(queue.priority.is_some());
    assert_eq!(old_p2.decl.concurrency, Some(2));
}
