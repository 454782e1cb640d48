//! What serving needs: the micro protocol's `$SRV` subjects of each service, each endpoint's
//! subject in its queue group and the right to answer, each core subscription's subject; and
//! for the operator, what `inspect` asks the services.

use topology_core::service::{EndpointDecl, Fanout, SubscriptionDecl};

use super::walk::Walk;
use super::{Declaration, Need, Verb};
use crate::registry::Topology;

/// The micro protocol's verbs every service instance answers.
const VERBS: [&str; 3] = ["PING", "INFO", "STATS"];

impl Walk<'_> {
    /// Every service, endpoint and core subscription of `topology`.
    pub(super) fn served(&mut self, topology: &Topology) {
        let mut names: Vec<&str> = topology.services().iter().map(|s| s.name).collect();
        names.dedup(); // sorted by name
        for name in names {
            if self.consumes() {
                self.micro_service(name);
            } else {
                self.inspects(name);
            }
        }
        if !self.consumes() {
            return;
        }
        for endpoint in topology.endpoints() {
            self.endpoint(&endpoint.decl);
        }
        for subscription in topology.subscriptions() {
            self.subscription(&subscription.decl);
        }
    }

    /// An instance of service `name` answers `$SRV.<verb>`, `$SRV.<verb>.<name>` and
    /// `$SRV.<verb>.<name>.<id>` (its id is random: any last token).
    fn micro_service(&mut self, name: &str) {
        let why = format!(
            "service `{name}`: every instance answers the micro protocol's PING, INFO and \
             STATS requests (discovery, `inspect`, `nats micro`)"
        );
        for verb in VERBS {
            for subject in [
                format!("$SRV.{verb}"),
                format!("$SRV.{verb}.{name}"),
                format!("$SRV.{verb}.{name}.*"),
            ] {
                self.add(Verb::Subscribe, subject, Declaration::Service, &why);
            }
        }
        self.responses.push(Need {
            declaration: Declaration::Service,
            why: format!("service `{name}`: answers PING, INFO and STATS"),
        });
        self.add(
            Verb::Publish,
            format!("$SRV.PING.{name}.*"),
            Declaration::Service,
            &format!(
                "service `{name}`: every instance proves its endpoints are on the server by a \
                 round trip to its own `$SRV.PING.{name}.<id>` (at start, every heartbeat, and \
                 when it drains)"
            ),
        );
    }

    /// The operator's `inspect` pings service `name` and reads each instance's stats.
    fn inspects(&mut self, name: &str) {
        let why =
            format!("`inspect`: finds the instances of service `{name}` and reads their stats");
        for subject in [format!("$SRV.PING.{name}"), format!("$SRV.STATS.{name}.*")] {
            self.add(Verb::Publish, subject, Declaration::Service, &why);
        }
    }

    fn endpoint(&mut self, decl: &EndpointDecl) {
        let what = format!(
            "endpoint `{}` of service `{}` (handler `{}`)",
            decl.name, decl.service.name, decl.handler
        );
        let group = decl.queue_group();
        self.add_in(
            Verb::Subscribe,
            decl.subject.to_owned(),
            Some(group),
            Declaration::Service,
            &format!("{what}: receives its requests, in queue group `{group}`"),
        );
        self.responses.push(Need {
            declaration: Declaration::Service,
            why: format!("{what}: answers its requests"),
        });
    }

    fn subscription(&mut self, decl: &SubscriptionDecl) {
        let what = format!("subscription of handler `{}`", decl.handler);
        self.add(
            Verb::Publish,
            format!("{}.>", self.role.inbox_prefix),
            Declaration::Service,
            &format!(
                "{what}: proves its subscription is on the server by a round trip through a \
                 probe inbox of its own (at start, every heartbeat, and when it drains)"
            ),
        );
        match decl.fanout {
            Fanout::Group(group) => self.add_in(
                Verb::Subscribe,
                decl.subject.to_owned(),
                Some(group),
                Declaration::Service,
                &format!("{what}: receives its messages, in queue group `{group}`"),
            ),
            Fanout::EachInstance => self.add(
                Verb::Subscribe,
                decl.subject.to_owned(),
                Declaration::Service,
                &format!("{what}: receives every message on every instance (each_instance)"),
            ),
        }
    }
}
