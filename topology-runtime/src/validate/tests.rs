//! Services, endpoints and core subscriptions at start-up: every problem at once, each with
//! where it is and what to do.

use topology_core::model::StreamDecl;
use topology_core::service::{EndpointDecl, ServiceDecl, SubscriptionDecl};

use super::{Problem, validate};
use crate::handler::HandlerFuture;
use crate::registry::Topology;
use crate::service::{ReplyFuture, Request, ServiceError};

fn reply(_: Request) -> ReplyFuture {
    Box::pin(async { Ok::<_, ServiceError>(bytes::Bytes::new()) })
}

fn listen(_: Request) -> HandlerFuture {
    Box::pin(async { Ok(()) })
}

fn problems(topology: &Topology) -> Vec<Problem> {
    match validate(topology) {
        Ok(()) => Vec::new(),
        Err(e) => e.problems,
    }
}

/// The problems that start with `at`, each as "location: message".
fn at(problems: &[Problem], at: &str) -> Vec<String> {
    problems
        .iter()
        .map(|p| p.to_string())
        .filter(|p| p.starts_with(at))
        .collect()
}

static MEMBERS: ServiceDecl = ServiceDecl::new("members", "1.2.0").description("Member lookups");
static ORDERS: StreamDecl = StreamDecl::new("ORDERS", &["orders.>"]);
static AUDIT: StreamDecl = StreamDecl::new("AUDIT", &["audit.*.log"]).external();

#[test]
fn a_sound_service_topology_has_no_problem() {
    let topology = Topology::new()
        .stream(ORDERS)
        .endpoint(
            EndpointDecl::new("app::get", &MEMBERS, "get", "members.get").concurrency(4),
            reply,
        )
        .endpoint(
            EndpointDecl::new("app::put", &MEMBERS, "put", "members.put"),
            reply,
        )
        .subscription(
            SubscriptionDecl::each_instance("app::invalidate", "cache.invalidate"),
            listen,
        )
        .subscription(
            SubscriptionDecl::group("app::audit", "members.audit", "auditors"),
            listen,
        );
    assert_eq!(problems(&topology), []);
}

#[test]
fn each_declarations_own_rules_are_checked() {
    static BAD: ServiceDecl = ServiceDecl::new("bad name", "1.0");
    let topology = Topology::new()
        .endpoint(
            EndpointDecl::new("app::srv", &MEMBERS, "srv", "$SRV.PING"),
            reply,
        )
        .endpoint(
            EndpointDecl::new("app::zero", &MEMBERS, "zero", "members.zero").concurrency(0),
            reply,
        )
        .endpoint(EndpointDecl::new("app::bad", &BAD, "b", "bad.x"), reply)
        .subscription(
            SubscriptionDecl::group("app::space", "members.x", "a b"),
            listen,
        );
    let found = problems(&topology);
    assert_eq!(
        at(&found, "service `bad name`"),
        [
            "service `bad name`: a service or endpoint name may only have letters, digits, `_` and `-` (the NATS micro protocol's rule)"
        ]
    );
    assert_eq!(
        at(&found, "service `members`, endpoint `srv`"),
        [
            "service `members`, endpoint `srv` (handler `app::srv`): subjects starting with `$SRV.` (answered by every service instance) or `_INBOX.` (where replies travel) cannot be subscribed to for work; choose an application subject"
        ]
    );
    assert_eq!(
        at(&found, "service `members`, endpoint `zero`"),
        [
            "service `members`, endpoint `zero` (handler `app::zero`): `concurrency` must be at least 1"
        ]
    );
    assert_eq!(
        at(&found, "subscription"),
        [
            "subscription on `members.x`, queue group `a b` (handler `app::space`): a queue group cannot be empty or contain whitespace or control characters"
        ]
    );
    assert_eq!(found.len(), 4, "{found:#?}");
}

#[test]
fn a_served_subject_a_stream_captures_names_both() {
    let topology = Topology::new()
        .stream(ORDERS)
        .stream(AUDIT)
        .endpoint(
            EndpointDecl::new("app::order", &MEMBERS, "order", "orders.get"),
            reply,
        )
        .subscription(
            SubscriptionDecl::each_instance("app::tap", "audit.>"),
            listen,
        );
    let found = problems(&topology);
    assert_eq!(found.len(), 2, "{found:#?}");
    assert_eq!(
        found[0].location,
        "service `members`, endpoint `order` (handler `app::order`)"
    );
    assert!(
        found[0]
            .message
            .starts_with("subject `orders.get` overlaps subject `orders.>` of stream `ORDERS`: the stream stores every request"),
        "{}",
        found[0]
    );
    assert!(found[0].message.ends_with(
        "move the endpoint to a subject outside the stream, or narrow the stream's subjects"
    ));
    // An external stream captures its subjects too.
    assert_eq!(
        found[1].location,
        "subscription on `audit.>`, each instance (handler `app::tap`)"
    );
    assert!(
        found[1]
            .message
            .starts_with("subject `audit.>` overlaps subject `audit.*.log` of stream `AUDIT`"),
        "{}",
        found[1]
    );
}

#[test]
fn overlapping_subjects_in_different_queue_groups_are_handled_twice() {
    let topology = Topology::new()
        .endpoint(
            EndpointDecl::new("app::get", &MEMBERS, "get", "members.get"),
            reply,
        )
        .endpoint(
            EndpointDecl::new("app::any", &MEMBERS, "any", "members.*").group("qq"),
            reply,
        )
        .subscription(
            SubscriptionDecl::group("app::audit", "members.get", "auditors"),
            listen,
        )
        // Each instance sees every request on purpose: not a problem.
        .subscription(
            SubscriptionDecl::each_instance("app::tap", "members.>"),
            listen,
        );
    let found = problems(&topology);
    let messages: Vec<&str> = found.iter().map(|p| p.message.as_str()).collect();
    assert_eq!(found.len(), 3, "{found:#?}");
    // Sorted by service, then subject: `members.*` comes before `members.get`.
    assert_eq!(
        found[0].location,
        "service `members`, endpoint `any` (handler `app::any`)"
    );
    assert_eq!(
        messages[0],
        "subjects `members.*` and `members.get` overlap with endpoint `get` of service `members` in another queue group (`qq` here, `q` there): a request is delivered once per queue group, so it is handled twice and answered twice (the requester keeps the first answer); put both in one queue group (a misspelt `group`?), or give them disjoint subjects"
    );
    assert!(messages[1].starts_with("subjects `members.*` and `members.get` overlap with the subscription of handler `app::audit` in another queue group (`qq` here, `auditors` there)"));
    assert!(messages[1].contains("handled twice (the subscription never answers)"));
    assert_eq!(
        found[2].location,
        "service `members`, endpoint `get` (handler `app::get`)"
    );
    assert!(messages[2].starts_with("subject `members.get` with the subscription of handler `app::audit` in another queue group (`q` here, `auditors` there)"));
}

#[test]
fn duplicate_endpoints_and_shared_groups() {
    static OTHER: ServiceDecl = ServiceDecl::new("other", "1.0.0");
    let topology = Topology::new()
        // Same service and name, on two subjects.
        .endpoint(
            EndpointDecl::new("app::get", &MEMBERS, "get", "members.get"),
            reply,
        )
        .endpoint(
            EndpointDecl::new("app::get2", &MEMBERS, "get", "members.fetch"),
            reply,
        )
        // Same subject and group in another service.
        .endpoint(
            EndpointDecl::new("other::get", &OTHER, "lookup", "members.get"),
            reply,
        )
        // Same group, overlapping subjects.
        .endpoint(
            EndpointDecl::new("other::wild", &OTHER, "wild", "shop.*"),
            reply,
        )
        .endpoint(
            EndpointDecl::new("other::cart", &OTHER, "cart", "shop.cart"),
            reply,
        )
        .subscription(
            SubscriptionDecl::group("app::steal", "shop.cart", "q"),
            listen,
        );
    let found = problems(&topology);
    let text: Vec<String> = found.iter().map(Problem::to_string).collect();
    assert_eq!(
        at(&found, "service `members`, endpoint `get`:"),
        [
            "service `members`, endpoint `get`: declared 2 times (`app::get2` on `members.fetch`, `app::get` on `members.get`); `$SRV.INFO` and `$SRV.STATS` name endpoints, so each must be named once in its service: rename one (`name = \"...\"`) or remove the duplicate"
        ]
    );
    assert!(text.contains(&"service `members`, endpoint `get` (handler `app::get`): subject `members.get` in queue group `q` is also served by endpoint `lookup` of service `other`: each request goes to one of the two handlers at random; remove one of them".to_owned()), "{text:#?}");
    assert!(text.contains(&"service `other`, endpoint `cart` (handler `other::cart`): subject `shop.cart` with the subscription of handler `app::steal` in the same queue group `q`: the subscription takes a share of the requests and never answers them; give it another queue group (then it sees every request too) or a disjoint subject".to_owned()), "{text:#?}");
    assert!(text.contains(&"service `other`, endpoint `wild` (handler `other::wild`): subjects `shop.*` and `shop.cart` overlap with endpoint `cart` of service `other` in the same queue group `q`: the requests both match go to one of the two handlers at random; give them disjoint subjects".to_owned()), "{text:#?}");
    assert!(text.iter().any(|t| t.starts_with("service `other`, endpoint `wild` (handler `other::wild`): subjects `shop.*` and `shop.cart` overlap with the subscription of handler `app::steal` in the same queue group `q`")), "{text:#?}");
    assert_eq!(found.len(), 5, "{text:#?}");
}

#[test]
fn one_service_declared_twice_differently() {
    static V1: ServiceDecl = ServiceDecl::new("members", "1.0.0");
    static V2: ServiceDecl = ServiceDecl::new("members", "1.1.0").description("newer");
    static SAME: ServiceDecl = ServiceDecl::new("members", "1.0.0");
    let topology = Topology::new()
        .endpoint(EndpointDecl::new("a::a", &V1, "a", "m.a"), reply)
        .endpoint(EndpointDecl::new("b::b", &V2, "b", "m.b"), reply)
        // An equal declaration elsewhere is the same service.
        .endpoint(EndpointDecl::new("c::c", &SAME, "c", "m.c"), reply);
    assert_eq!(
        problems(&topology),
        [Problem {
            location: "service `members`".into(),
            message: "declared 2 times in one binary with different versions `1.0.0`, `1.1.0` and descriptions; an instance answers `$SRV.INFO` as one service: keep one `#[service]` declaration and name it from every endpoint".into(),
        }]
    );
}

/// Validation stays about linear: ten thousand endpoints and subscriptions beside a hundred
/// streams, with one planted problem of each cross-item kind.
#[test]
fn many_endpoints_validate_quickly_and_exactly() {
    fn leak(s: String) -> &'static str {
        Box::leak(s.into_boxed_str())
    }
    let mut topology = Topology::new();
    for k in 0..100 {
        let subjects: &'static [&'static str] = Box::leak(vec![leak(format!("s{k}.>"))].into());
        topology = topology.stream(StreamDecl::new(leak(format!("S{k:03}")), subjects));
    }
    let service: &'static ServiceDecl = Box::leak(Box::new(ServiceDecl::new("big", "1.0.0")));
    for i in 0..5000 {
        let subject = match i {
            17 => "s42.get".to_owned(), // captured by S042
            _ => format!("big.e{i}"),
        };
        let mut decl = EndpointDecl::new(
            leak(format!("h::e{i}")),
            service,
            leak(format!("e{i}")),
            leak(subject),
        );
        if i == 99 {
            decl = decl.group("other"); // overlaps the subscription in `q` below
        }
        topology = topology.endpoint(decl, reply);
        let subscription = match i {
            4000 => SubscriptionDecl::group("h::s4000", "big.e99", "q"),
            _ => {
                SubscriptionDecl::each_instance(leak(format!("h::s{i}")), leak(format!("tap.s{i}")))
            }
        };
        topology = topology.subscription(subscription, listen);
    }
    let started = std::time::Instant::now();
    let found = problems(&topology);
    let elapsed = started.elapsed();
    let text: Vec<String> = found.iter().map(Problem::to_string).collect();
    assert_eq!(found.len(), 2, "{text:#?}");
    assert!(text[0].starts_with("service `big`, endpoint `e17` (handler `h::e17`): subject `s42.get` overlaps subject `s42.>` of stream `S042`"), "{text:#?}");
    assert!(text[1].starts_with("service `big`, endpoint `e99` (handler `h::e99`): subject `big.e99` with the subscription of handler `h::s4000` in another queue group (`other` here, `q` there)"), "{text:#?}");
    assert!(elapsed < std::time::Duration::from_secs(5), "{elapsed:?}");
}
