//! Services, endpoints and core subscriptions: each declaration's own rules (those of
//! `topology_core::service`, which the macros run too), and what needs several of them: a
//! served subject that a stream captures, requests handled twice or shared at random between
//! handlers, duplicate endpoints, and one service declared differently.
//!
//! As for streams, it grows with the number of declarations: overlaps are found through the
//! subject index, and every candidate is checked with `subject::overlaps`.

use std::collections::BTreeMap;

use topology_core::model::StreamDecl;
use topology_core::service::{
    self, EndpointDecl, Fanout, ServiceDecl, SubscriptionDecl, check_endpoint, check_service,
    check_subscription,
};
use topology_core::subject;

use super::Problems;
use super::index::SubjectIndex;
use crate::registry::Topology;

/// Where an endpoint is: its service, its name, its handler.
fn endpoint_at(decl: &EndpointDecl) -> String {
    format!(
        "service `{}`, endpoint `{}` (handler `{}`)",
        decl.service.name, decl.name, decl.handler
    )
}

/// Where a core subscription is: its subject, its fan-out, its handler.
fn subscription_at(decl: &SubscriptionDecl) -> String {
    let fanout = match decl.fanout {
        Fanout::Group(group) => format!("queue group `{group}`"),
        Fanout::EachInstance => "each instance".to_owned(),
    };
    format!(
        "subscription on `{}`, {fanout} (handler `{}`)",
        decl.subject, decl.handler
    )
}

fn service_at(name: &str) -> String {
    format!("service `{name}`")
}

/// Every check of the services, endpoints and subscriptions of `topology`; `streams` are all
/// the declared streams (owned or external: either captures its subjects).
pub(super) fn check(topology: &Topology, streams: &[&StreamDecl], problems: &mut Problems) {
    check_services(topology.services(), problems);
    let endpoints: Vec<&EndpointDecl> = topology.endpoints().iter().map(|e| &e.decl).collect();
    let subscriptions: Vec<&SubscriptionDecl> =
        topology.subscriptions().iter().map(|s| &s.decl).collect();
    for decl in &endpoints {
        if let Err(e) = check_endpoint(decl) {
            problems.push(endpoint_at(decl), e.message());
        }
    }
    for decl in &subscriptions {
        if let Err(e) = check_subscription(decl) {
            problems.push(subscription_at(decl), e.message());
        }
    }
    check_duplicate_names(&endpoints, problems);
    // Overlaps only mean something between valid subjects.
    let valid = |s: &str| service::check_work_subject(s).is_ok();
    let endpoints: Vec<&EndpointDecl> =
        endpoints.into_iter().filter(|e| valid(e.subject)).collect();
    let subscriptions: Vec<&SubscriptionDecl> = subscriptions
        .into_iter()
        .filter(|s| valid(s.subject))
        .collect();
    check_captured(&endpoints, &subscriptions, streams, problems);
    check_shared_subjects(&endpoints, &subscriptions, problems);
}

/// Each service's rules, and one name declared with different settings (sorted by name, so
/// one name's declarations are adjacent).
fn check_services(services: &[ServiceDecl], problems: &mut Problems) {
    for decls in services.chunk_by(|a, b| a.name == b.name) {
        for decl in decls {
            if let Err(e) = check_service(decl) {
                problems.push(service_at(decl.name), e.message());
            }
        }
        if decls.len() < 2 {
            continue;
        }
        let mut differ = Vec::new();
        let first = &decls[0];
        if decls.iter().any(|d| d.version != first.version) {
            let versions: Vec<String> = decls.iter().map(|d| format!("`{}`", d.version)).collect();
            differ.push(format!("versions {}", versions.join(", ")));
        }
        if decls.iter().any(|d| d.description != first.description) {
            differ.push("descriptions".to_owned());
        }
        if decls.iter().any(|d| d.queue_group != first.queue_group) {
            differ.push("queue groups".to_owned());
        }
        if decls.iter().any(|d| d.metadata != first.metadata) {
            differ.push("metadata".to_owned());
        }
        problems.push(
            service_at(first.name),
            format!(
                "declared {} times in one binary with different {}; an instance answers \
                 `$SRV.INFO` as one service: keep one `#[service]` declaration and name it from \
                 every endpoint",
                decls.len(),
                differ.join(" and ")
            ),
        );
    }
}

/// A served subject that a declared stream captures.
fn check_captured(
    endpoints: &[&EndpointDecl],
    subscriptions: &[&SubscriptionDecl],
    streams: &[&StreamDecl],
    problems: &mut Problems,
) {
    let mut index = SubjectIndex::new();
    for (i, stream) in streams.iter().enumerate() {
        for subject in stream.subjects {
            index.insert(i, subject);
        }
    }
    let captured = |served: &'static str| {
        index.owners_overlapping(served).into_iter().map(move |i| {
            let stream = streams[i];
            let by = stream
                .subjects
                .iter()
                .find(|s| subject::overlaps(served, s))
                .copied()
                .unwrap_or_default();
            (stream.name, by)
        })
    };
    for decl in endpoints {
        for (stream, by) in captured(decl.subject) {
            problems.push(
                endpoint_at(decl),
                format!(
                    "subject `{}` overlaps subject `{by}` of stream `{stream}`: the stream stores \
                     every request, replays it to its consumers and answers it with a publish \
                     acknowledgement that can reach the requester before this endpoint's reply; \
                     move the endpoint to a subject outside the stream, or narrow the stream's \
                     subjects",
                    decl.subject
                ),
            );
        }
    }
    for decl in subscriptions {
        for (stream, by) in captured(decl.subject) {
            problems.push(
                subscription_at(decl),
                format!(
                    "subject `{}` overlaps subject `{by}` of stream `{stream}`: what is published \
                     there is also stored and replayed to the stream's consumers, and a message \
                     sent with a reply subject is answered by the stream's publish \
                     acknowledgement; to consume the stream, declare a `#[queue_consumer]` or a \
                     `#[broadcast]` on it, otherwise move the subscription off its subjects",
                    decl.subject
                ),
            );
        }
    }
}

/// Two endpoints of one service under one name.
fn check_duplicate_names(endpoints: &[&EndpointDecl], problems: &mut Problems) {
    let mut by_name: BTreeMap<(&str, &str), Vec<&EndpointDecl>> = BTreeMap::new();
    for decl in endpoints {
        by_name
            .entry((decl.service.name, decl.name))
            .or_default()
            .push(decl);
    }
    for ((service, name), decls) in by_name {
        if decls.len() < 2 {
            continue;
        }
        let handlers: Vec<String> = decls
            .iter()
            .map(|d| format!("`{}` on `{}`", d.handler, d.subject))
            .collect();
        problems.push(
            format!("service `{service}`, endpoint `{name}`"),
            format!(
                "declared {} times ({}); `$SRV.INFO` and `$SRV.STATS` name endpoints, so each \
                 must be named once in its service: rename one (`name = \"...\"`) or remove the \
                 duplicate",
                decls.len(),
                handlers.join(", ")
            ),
        );
    }
}

/// Served subjects in a queue group: an endpoint's, or a subscription's.
#[derive(Clone, Copy)]
enum Served<'a> {
    Endpoint(&'a EndpointDecl),
    Subscription(&'a SubscriptionDecl, &'static str),
}

impl Served<'_> {
    fn subject(&self) -> &'static str {
        match self {
            Served::Endpoint(e) => e.subject,
            Served::Subscription(s, _) => s.subject,
        }
    }
    fn group(&self) -> &'static str {
        match self {
            Served::Endpoint(e) => e.queue_group(),
            Served::Subscription(_, group) => group,
        }
    }
    fn at(&self) -> String {
        match self {
            Served::Endpoint(e) => endpoint_at(e),
            Served::Subscription(s, _) => subscription_at(s),
        }
    }
}

/// An endpoint whose requests another endpoint or a queue-grouped subscription also
/// receives: in another queue group, each request is handled twice; in the same group, the
/// requests both match are shared at random between the two handlers.
fn check_shared_subjects(
    endpoints: &[&EndpointDecl],
    subscriptions: &[&SubscriptionDecl],
    problems: &mut Problems,
) {
    // Endpoints first: an endpoint at `i` reports each pair with a later position once.
    let mut served: Vec<Served> = endpoints.iter().map(|e| Served::Endpoint(e)).collect();
    served.extend(subscriptions.iter().filter_map(|s| match s.fanout {
        Fanout::Group(group) => Some(Served::Subscription(s, group)),
        Fanout::EachInstance => None,
    }));
    let mut index = SubjectIndex::new();
    for (i, s) in served.iter().enumerate() {
        index.insert(i, s.subject());
    }
    for (i, a) in served.iter().enumerate().take(endpoints.len()) {
        for j in index.owners_overlapping(a.subject()) {
            if j <= i {
                continue;
            }
            if let Some(message) = shared(a, &served[j]) {
                problems.push(a.at(), message);
            }
        }
    }
}

/// What goes wrong when `a` (an endpoint) and `b` share requests, if anything.
fn shared(a: &Served, b: &Served) -> Option<String> {
    let (x, y) = (a.subject(), b.subject());
    let (g, h) = (a.group(), b.group());
    let other = match b {
        Served::Endpoint(e) => format!("endpoint `{}` of service `{}`", e.name, e.service.name),
        Served::Subscription(s, _) => format!("the subscription of handler `{}`", s.handler),
    };
    let subjects = if x == y {
        format!("subject `{x}`")
    } else {
        format!("subjects `{x}` and `{y}` overlap")
    };
    if g != h {
        let answered = match b {
            Served::Endpoint(_) => "and answered twice (the requester keeps the first answer)",
            Served::Subscription(..) => "(the subscription never answers)",
        };
        return Some(format!(
            "{subjects} with {other} in another queue group (`{g}` here, `{h}` there): a request \
             is delivered once per queue group, so it is handled twice {answered}; put both in \
             one queue group (a misspelt `group`?), or give them disjoint subjects"
        ));
    }
    match b {
        Served::Endpoint(e) if x == y => {
            let same = match a {
                Served::Endpoint(d) => d.service.name == e.service.name && d.name == e.name,
                Served::Subscription(..) => false,
            };
            // Same service and name: reported once, by `check_duplicate_names`.
            (!same).then(|| {
                format!(
                    "{subjects} in queue group `{g}` is also served by {other}: each request \
                     goes to one of the two handlers at random; remove one of them"
                )
            })
        }
        Served::Endpoint(_) => Some(format!(
            "{subjects} with {other} in the same queue group `{g}`: the requests both match go \
             to one of the two handlers at random; give them disjoint subjects"
        )),
        Served::Subscription(..) => Some(format!(
            "{subjects} with {other} in the same queue group `{g}`: the subscription takes a \
             share of the requests and never answers them; give it another queue group (then \
             it sees every request too) or a disjoint subject"
        )),
    }
}
