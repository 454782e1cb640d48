//! The walk: what each declaration kind needs, one function per kind, and the minimal list.

use topology_core::bucket::{BucketDecl, BucketKind};
use topology_core::model::{AckMode, ConsumerDecl, ConsumerKind, Delivery, Priority};

use super::{Access, Declaration, Need, Permission, Role, Verb};
use crate::provision::{ADVISORY_PREFIX, FLEET_PREFIX};

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
        for advisory in [
            "DOMAIN.LEADER_ELECTED",
            "STREAM.LEADER_ELECTED.>",
            "CONSUMER.LEADER_ELECTED.>",
        ] {
            self.add(
                Verb::Subscribe,
                format!("{ADVISORY_PREFIX}.{advisory}"),
                Declaration::Service,
                "the leader watch: an election wakes the requests that wait for it",
            );
        }
        let fleet = format!("{FLEET_PREFIX}.*.{}", self.api);
        for action in [Verb::Publish, Verb::Subscribe] {
            self.add(
                action,
                fleet.clone(),
                Declaration::Service,
                "the leader watch's fleet channel: replicas that wait on one JetStream tell \
                 each other when it answers",
            );
        }
    }

    pub(super) fn stream(&mut self, name: &str, subjects: &[&str], external: bool) {
        let declaration = Declaration::Stream(name.to_owned());
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
        if self.consumes() {
            for subject in subjects {
                self.add(
                    Verb::Publish,
                    (*subject).to_owned(),
                    declaration.clone(),
                    "the handlers publish into the streams the service owns \
                     (`Context::publish`)",
                );
            }
        }
    }

    /// What the handles on a key-value bucket or object store use, beyond its stream's own
    /// needs (`stream`): writes to its subjects (external buckets too), direct and stored
    /// reads, the ordered consumers of `keys`, object reads and `list`, and the purge of an
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
        let reads: [(String, &str); 6] = [
            (format!("STREAM.INFO.{stream}"), "opened by its handle"),
            (
                format!("DIRECT.GET.{stream}"),
                "read by its handle (direct get)",
            ),
            (
                format!("DIRECT.GET.{stream}.>"),
                "read by its handle (direct get of a key's last value)",
            ),
            (format!("STREAM.MSG.GET.{stream}"), "read by its handle"),
            (
                format!("CONSUMER.CREATE.{stream}.>"),
                "listed and read in order by its handle (an ordered consumer)",
            ),
            (
                format!("STREAM.PURGE.{stream}"),
                "an object's chunks purged when it is replaced or deleted",
            ),
        ];
        for (request, why) in reads {
            if request.starts_with("STREAM.PURGE") && decl.kind == BucketKind::KeyValue {
                continue; // a key's purge is a roll-up message, not an API request
            }
            self.api(request, declaration.clone(), why);
        }
        self.api(
            format!("CONSUMER.CREATE.{stream}"),
            declaration,
            "listed and read in order by its handle (an ordered consumer)",
        );
    }

    pub(super) fn consumer(&mut self, decl: &ConsumerDecl) {
        let stream = decl.stream.name();
        let declaration = Declaration::Consumer {
            stream: stream.to_owned(),
            handler: decl.handler.to_owned(),
        };
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
        if self.owns() {
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
        if let Some(old) = queue.migrate_from
            && self.owns()
        {
            self.api(
                format!("CONSUMER.INFO.{stream}.{old}"),
                declaration.clone(),
                "`migrate_from`: reads the old consumer until it is paused and drained",
            );
            self.api(
                format!("CONSUMER.PAUSE.{stream}.{old}"),
                declaration.clone(),
                "`migrate_from`: pauses the old consumer",
            );
            self.api(
                format!("CONSUMER.DELETE.{stream}.{old}"),
                declaration.clone(),
                "`migrate_from` on a work-queue stream: deletes the drained old consumer",
            );
        }
        if !self.consumes() {
            return;
        }
        self.add(
            Verb::Subscribe,
            format!("{ADVISORY_PREFIX}.CONSUMER.LEADER_ELECTED.{stream}.{name}"),
            declaration.clone(),
            "pulls again at once when its consumer's leader changes",
        );
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

    /// A relay's consumer is created per instance under a name no one knows in advance: the
    /// grant covers any consumer name on the stream (subject permissions match whole tokens).
    fn relay(&mut self, stream: &str, decl: &ConsumerDecl, d: Declaration) {
        self.api(
            create_subject(stream, "*", decl.subjects),
            d.clone(),
            "creates this instance's relay consumer (its name is per instance)",
        );
        self.api(
            format!("CONSUMER.INFO.{stream}.*"),
            d.clone(),
            "reads this instance's relay consumer while it runs (liveness)",
        );
        self.api(
            format!("CONSUMER.DELETE.{stream}.*"),
            d.clone(),
            "deletes this instance's relay consumer when it stops",
        );
        self.api(
            format!("CONSUMER.MSG.NEXT.{stream}.*"),
            d.clone(),
            "pulls its messages",
        );
        self.add(
            Verb::Subscribe,
            format!("{ADVISORY_PREFIX}.CONSUMER.LEADER_ELECTED.{stream}.*"),
            d.clone(),
            "pulls again at once when its consumer's leader changes",
        );
        self.add(
            Verb::Publish,
            format!("$JS.ACK.{stream}.*.>"),
            d,
            "acknowledges its messages",
        );
    }
}

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
