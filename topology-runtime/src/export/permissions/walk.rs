//! The walk: what each declaration kind needs, one function per kind, and the minimal list.

use topology_core::bucket::{BucketDecl, BucketKind};
use topology_core::model::{AckMode, ConsumerDecl, ConsumerKind, Delivery, Priority, Retention};

use super::{Access, Declaration, Need, Permission, Role, Verb};
use crate::provision::{consumer_elected, fleet_channel, meta_elected, stream_elected};

mod migration;

pub(super) struct Walk<'a> {
    pub(super) role: &'a Role,
    pub(super) api: String,
    pub(super) entries: Vec<Permission>,
    /// What answers requests (`allow_responses`), if anything.
    pub(super) responses: Vec<Need>,
}

impl Walk<'_> {
    pub(super) fn add(
        &mut self,
        action: Verb,
        subject: String,
        declaration: Declaration,
        why: &str,
    ) {
        self.add_in(action, subject, None, declaration, why);
    }

    /// [`Walk::add`], for a subscription in queue group `queue` when there is one.
    pub(super) fn add_in(
        &mut self,
        action: Verb,
        subject: String,
        queue: Option<&str>,
        declaration: Declaration,
        why: &str,
    ) {
        let need = Need {
            declaration,
            why: why.to_owned(),
        };
        match self
            .entries
            .iter_mut()
            .find(|e| e.action == action && e.subject == subject && e.queue.as_deref() == queue)
        {
            Some(entry) => {
                if !entry.needed_by.contains(&need) {
                    entry.needed_by.push(need);
                }
            }
            None => self.entries.push(Permission {
                action,
                subject,
                queue: queue.map(str::to_owned),
                needed_by: vec![need],
            }),
        }
    }

    fn api(&mut self, request: String, declaration: Declaration, why: &str) {
        let subject = format!("{}.{request}", self.api);
        self.add(Verb::Publish, subject, declaration, why);
    }

    pub(super) fn owns(&self) -> bool {
        self.role.access != Access::BindOnly
    }

    pub(super) fn consumes(&self) -> bool {
        self.role.access != Access::Operator
    }

    /// What every replica (and the operator's CLI) uses whatever it declares.
    pub(super) fn service(&mut self) {
        let inbox = format!("{}.>", self.role.inbox_prefix);
        self.add(
            Verb::Subscribe,
            inbox,
            Declaration::Service,
            "replies to this service's requests: JetStream API answers, pulled messages, \
             publish and ack confirmations",
        );
        self.api(
            "INFO".to_owned(),
            Declaration::Service,
            "asked every heartbeat whether JetStream answers through this server (the reach \
             watch), and probed by the leader watch while JetStream has no leader",
        );
        // The meta leader's elections cannot be narrowed: nats-server publishes them under one
        // subject for the whole JetStream (its meta group is every account's), naming no
        // stream, and in the system account, so they reach this account only through an
        // import of it (elsewhere the watch's `INFO` probe finds the new leader). The elections
        // of the streams and consumers the service waits on are theirs (`leader_watch`).
        if self.role.advisories {
            self.add(
                Verb::Subscribe,
                meta_elected(),
                Declaration::Service,
                "the leader watch: the meta leader's election wakes the requests that wait for \
                 one (one subject for the whole JetStream, naming no stream; published in the \
                 system account, it arrives where the account imports it)",
            );
        }
        // The fleet channel is under the service's own inbox prefix, whose subscription is
        // granted above (this need is listed under it); publishing into it is not.
        let fleet = fleet_channel(&self.role.inbox_prefix, &self.api);
        for action in [Verb::Publish, Verb::Subscribe] {
            self.add(
                action,
                fleet.clone(),
                Declaration::Service,
                "the leader watch's fleet channel: the replicas of this service that wait on \
                 one JetStream tell each other when it answers (under the service's inbox \
                 prefix: no other service's user reads or writes it)",
            );
        }
    }

    /// The leader watch: while a provisioning request on `stream` (for its consumer
    /// `consumer`, when it is for one) waits for a leader, the watch subscribes to that
    /// stream's elections and that consumer's (`provision::leader`), and to nothing else of
    /// the account.
    fn leader_watch(&mut self, stream: &str, consumer: Option<&str>, declaration: Declaration) {
        if !self.role.advisories {
            return;
        }
        let (subject, why) = match consumer {
            None => (
                stream_elected(stream),
                "the leader watch, while a request on the stream waits for a leader: the \
                 stream leader's election wakes it",
            ),
            Some(consumer) => (
                consumer_elected(stream, consumer),
                "the leader watch, while a request on the consumer waits for a leader: the \
                 consumer leader's election wakes it",
            ),
        };
        self.add(Verb::Subscribe, subject, declaration, why);
    }

    pub(super) fn stream(&mut self, name: &str, subjects: &[&str], external: bool) {
        let declaration = Declaration::Stream(name.to_owned());
        // Read (and for an owned one, created) through the retries the leader watch wakes,
        // whatever the role.
        self.leader_watch(name, None, declaration.clone());
        self.api(
            format!("STREAM.INFO.{name}"),
            declaration.clone(),
            if external {
                "verified at start-up (owned elsewhere), read by health and `inspect`"
            } else {
                "read before it is provisioned, by health and by `inspect`"
            },
        );
        if external {
            return;
        }
        if self.owns() {
            self.api(
                format!("STREAM.CREATE.{name}"),
                declaration.clone(),
                "created at start-up when missing",
            );
            self.api(
                format!("STREAM.UPDATE.{name}"),
                declaration.clone(),
                "updated when an editable field drifted",
            );
        }
        // The handlers' outputs are granted where they are declared (`publishes`); every
        // subject of the stream only when asked for.
        if self.consumes() && self.role.into_owned_streams {
            for subject in subjects {
                self.add(
                    Verb::Publish,
                    (*subject).to_owned(),
                    declaration.clone(),
                    "`publish_into_owned_streams` (`--publish-into-owned-streams`): any code of \
                     the service may publish into the streams it owns, declared or not; wider \
                     than the handlers' `publishes`: a compromised replica may inject messages \
                     here",
                );
            }
        }
    }

    /// What the handles on a key-value bucket or object store use, beyond its stream's own
    /// needs (`stream`): writes to its subjects (external buckets too), the stream's info when
    /// a handle opens it, reads of a key's or an object's last value (direct gets: the runtime
    /// provisions its buckets with `allow_direct`; an external bucket's stream may not allow
    /// them, and is then read with stored-message gets), the ordered consumers of `keys`,
    /// object reads and `list` (async-nats creates them without a name), and the purge of an
    /// object's chunks.
    pub(super) fn bucket(&mut self, decl: &BucketDecl) {
        if !self.consumes() {
            return;
        }
        let stream = format!("{}{}", decl.kind.stream_prefix(), decl.name);
        let declaration = Declaration::Stream(stream.clone());
        let subjects = match decl.kind {
            BucketKind::KeyValue => format!("$KV.{}.>", decl.name),
            BucketKind::Object => format!("$O.{}.>", decl.name),
        };
        let noun = decl.kind.noun();
        let why = format!("the handle on {noun} `{}` writes its values", decl.name);
        self.add(Verb::Publish, subjects, declaration.clone(), &why);
        self.api(
            format!("STREAM.INFO.{stream}"),
            declaration.clone(),
            "opened by its handle",
        );
        self.api(
            format!("DIRECT.GET.{stream}.>"),
            declaration.clone(),
            "read by its handle (a direct get of a key's or an object's last value)",
        );
        if decl.external {
            self.api(
                format!("STREAM.MSG.GET.{stream}"),
                declaration.clone(),
                "read by its handle when the stream, owned elsewhere, does not allow direct \
                 gets",
            );
        }
        self.api(
            format!("CONSUMER.CREATE.{stream}"),
            declaration.clone(),
            "listed and read in order by its handle (an ordered consumer, created without a \
             name)",
        );
        if decl.kind == BucketKind::Object {
            // A key's purge is a roll-up message, not an API request.
            self.api(
                format!("STREAM.PURGE.{stream}"),
                declaration,
                "an object's chunks purged when it is replaced or deleted",
            );
        }
    }

    /// A queue consumer or relay; `retention` is its stream's, when the stream is declared
    /// here with it (`None`: owned elsewhere and not said, so any). `superseded`: the consumer
    /// a partitioned group migrates from, read to its end and never created here.
    pub(super) fn consumer(
        &mut self,
        decl: &ConsumerDecl,
        retention: Option<Retention>,
        superseded: bool,
    ) {
        let stream = decl.stream.name();
        let declaration = Declaration::Consumer {
            stream: stream.to_owned(),
            handler: decl.handler.to_owned(),
        };
        if self.consumes() {
            self.outputs(decl, &declaration);
        }
        let queue = match &decl.kind {
            ConsumerKind::Queue(queue) => queue,
            ConsumerKind::Broadcast(_) => {
                if self.consumes() {
                    self.relay(stream, decl, declaration);
                }
                return;
            }
        };
        let name = queue.group;
        self.api(
            format!("CONSUMER.INFO.{stream}.{name}"),
            declaration.clone(),
            "read before it is provisioned, while it runs (liveness), by health and `inspect`",
        );
        // Read, created or verified through the retries the leader watch wakes, whatever
        // the role; a running one pulls again at its leader's election (below).
        self.leader_watch(stream, Some(name), declaration.clone());
        if self.owns() && !superseded {
            self.api(
                create_subject(stream, name, decl.subjects),
                declaration.clone(),
                "created at start-up when missing, updated when an editable field drifted",
            );
            self.api(
                format!("CONSUMER.LIST.{stream}"),
                declaration.clone(),
                "after a loss: a consumer that a newer declaration migrated from is not created \
                 again",
            );
        }
        if let Some(old) = queue.migrate_from {
            self.migration(stream, (old, queue), &declaration, retention);
        }
        if !self.consumes() {
            return;
        }
        if self.role.advisories {
            self.add(
                Verb::Subscribe,
                consumer_elected(stream, name),
                declaration.clone(),
                "pulls again at once when its consumer's leader changes",
            );
        }
        match queue.delivery {
            Delivery::Pull => self.api(
                format!("CONSUMER.MSG.NEXT.{stream}.{name}"),
                declaration.clone(),
                "pulls its messages",
            ),
            Delivery::Push => self.add(
                Verb::Subscribe,
                crate::provision::push_deliver_subject(stream, name),
                declaration.clone(),
                "receives its pushed messages (queue group)",
            ),
        }
        if matches!(queue.priority, Some(Priority::PinnedClient { .. })) {
            self.api(
                format!("CONSUMER.UNPIN.{stream}.{name}"),
                declaration.clone(),
                "`priority = \"pinned_client\"`: a pinned instance that drains unpins, so a \
                 standby one takes over at once",
            );
        }
        self.add(
            Verb::Publish,
            format!("$JS.ACK.{stream}.{name}.>"),
            declaration.clone(),
            match queue.ack {
                Some(AckMode::Confirmed) => {
                    "acknowledges, naks, terminates and keeps its messages in progress; \
                     confirmed acks are requests whose answers come to the inbox"
                }
                _ => "acknowledges, naks, terminates and keeps its messages in progress",
            },
        );
        if let Some(subject) = queue.dead_letter {
            self.add(
                Verb::Publish,
                subject.to_owned(),
                declaration,
                "publishes a message it gives up on (`dead_letter`)",
            );
        }
    }

    /// What the handler declares it publishes to (`publishes`).
    fn outputs(&mut self, decl: &ConsumerDecl, declaration: &Declaration) {
        for subject in decl.publishes {
            self.add(
                Verb::Publish,
                (*subject).to_owned(),
                declaration.clone(),
                "the handler publishes here (`publishes`)",
            );
        }
    }

    /// A relay's consumer is created per instance under a name no one knows in advance: the
    /// grant covers any consumer name on the stream (subject permissions match whole tokens).
    fn relay(&mut self, stream: &str, decl: &ConsumerDecl, d: Declaration) {
        let why = |what: &str| format!("{what} {ANY_RELAY_NAME}");
        self.api(
            create_subject(stream, "*", decl.subjects),
            d.clone(),
            &why("creates this instance's relay consumer"),
        );
        self.api(
            format!("CONSUMER.INFO.{stream}.*"),
            d.clone(),
            &why("reads this instance's relay consumer while it runs (liveness)"),
        );
        self.api(
            format!("CONSUMER.DELETE.{stream}.*"),
            d.clone(),
            &why("deletes this instance's relay consumer when it stops"),
        );
        self.api(
            format!("CONSUMER.MSG.NEXT.{stream}.*"),
            d.clone(),
            &why("pulls its messages"),
        );
        if self.role.advisories {
            self.add(
                Verb::Subscribe,
                consumer_elected(stream, "*"),
                d.clone(),
                &why(
                    "pulls again at once when its consumer's leader changes, and the leader \
                     watch wakes the requests that create, read and delete it",
                ),
            );
        }
        self.add(
            Verb::Publish,
            format!("$JS.ACK.{stream}.*.>"),
            d,
            &why("acknowledges its messages"),
        );
    }
}

/// Why a relay's entries name any consumer of its stream.
const ANY_RELAY_NAME: &str = "(any consumer name on the stream: each instance names its relay \
                              consumer at random, and permissions match whole tokens only)";

/// The request that creates consumer `name`: the filter is part of the subject when there is
/// exactly one (as the runtime sends it).
fn create_subject(stream: &str, name: &str, filters: &[&str]) -> String {
    match filters {
        [one] => format!("CONSUMER.CREATE.{stream}.{name}.{one}"),
        _ => format!("CONSUMER.CREATE.{stream}.{name}"),
    }
}

/// Drops every entry another entry covers (same action, a wider subject, and any queue group
/// or the same), giving its needs to an entry that covers it and is itself kept; sorted,
/// publish first.
pub(super) fn minimal(mut entries: Vec<Permission>) -> Vec<Permission> {
    entries.sort_by(|a, b| (a.action, &a.subject, &a.queue).cmp(&(b.action, &b.subject, &b.queue)));
    let covers =
        |j: usize, i: usize, entries: &[Permission]| j != i && entries[j].covers(&entries[i]);
    let covered: Vec<bool> = (0..entries.len())
        .map(|i| (0..entries.len()).any(|j| covers(j, i, &entries)))
        .collect();
    let mut needs: Vec<Vec<Need>> = entries.iter().map(|e| e.needed_by.clone()).collect();
    for i in (0..entries.len()).filter(|&i| covered[i]) {
        // Covering is transitive: some entry that covers this one is not covered itself.
        let Some(j) = (0..entries.len()).find(|&j| !covered[j] && covers(j, i, &entries)) else {
            continue;
        };
        for need in std::mem::take(&mut needs[i]) {
            if !needs[j].contains(&need) {
                needs[j].push(need);
            }
        }
    }
    entries
        .into_iter()
        .zip(needs)
        .zip(covered)
        .filter(|(_, covered)| !covered)
        .map(|((entry, needed_by), _)| Permission { needed_by, ..entry })
        .collect()
}
