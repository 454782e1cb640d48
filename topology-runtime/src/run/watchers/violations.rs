//! The denial watch: reads the permission violations the server reports on the runtime's
//! connection (kept by its event callback, see `server_errors.rs`), finds the declarations that need
//! each denied subject in the service's own generated permissions (`export::permissions`:
//! the same walk), and shows them in health and metrics. A consumer whose acks or pulls are
//! refused, and an endpoint or core subscription whose subscription is, shows `denied`.

use std::sync::Arc;

use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

use crate::export::{Declaration, Permission, Permissions, Role, permissions};
use crate::health::PermissionDenial;
use crate::run::Inner;
use crate::server_errors::{Heard, Violation};
use crate::telemetry::permission_violation;

/// Watches until `cancel`; does nothing on a connection whose events it cannot read.
pub(in crate::run) async fn watch_denials(inner: Arc<Inner>, cancel: CancellationToken) {
    let Some(errors) = crate::server_errors::of(&inner.common.client) else {
        return cancel.cancelled().await;
    };
    let needs = needed(&inner);
    let (recent, mut coming) = errors.subscribe();
    // What the connection was told before this runtime existed concerns another user of it
    // (an earlier runtime, the application's own requests).
    let built = inner.health.shared.built;
    for violation in recent.into_iter().filter(|v| v.at >= built) {
        record(&inner, &needs, violation);
    }
    loop {
        tokio::select! {
            received = coming.recv() => match received {
                Ok(Heard::Violation(violation)) => record(&inner, &needs, violation),
                Ok(Heard::Connected) => {
                    if inner.health.shared.denials.clear() {
                        inner.health.shared.changed();
                    }
                    // What is still refused is said again on the new connection (the client
                    // subscribes again on it).
                    for slot in inner.health.slots.iter() {
                        slot.granted();
                    }
                    for slot in inner.health.serve_slots() {
                        slot.granted();
                    }
                }
                Err(RecvError::Lagged(missed)) => {
                    tracing::warn!(missed, "permission violations came faster than read; some are not counted");
                }
                Err(RecvError::Closed) => return cancel.cancelled().await,
            },
            _ = cancel.cancelled() => return,
        }
    }
}

/// After the drain, when the watch has stopped: what the server refused during it (a relay's
/// deletion, the last acks) is still shown in health.
pub(in crate::run) fn sweep_denials(inner: &Inner) {
    let Some(errors) = crate::server_errors::of(&inner.common.client) else {
        return;
    };
    let (recent, _) = errors.subscribe();
    // A denial's `last` is when the server reported its latest violation, and the watch
    // reads them in order: what came after the latest recorded is what the watch missed.
    let recorded = inner
        .health
        .shared
        .denials
        .all()
        .iter()
        .map(|d| d.last)
        .max();
    let built = inner.health.shared.built;
    let unknown: Vec<Violation> = recent
        .into_iter()
        .filter(|v| v.at >= built && recorded.is_none_or(|latest| v.at > latest))
        .collect();
    if unknown.is_empty() {
        return;
    }
    let needs = needed(inner);
    for violation in unknown {
        record(inner, &needs, violation);
    }
}

/// Everything this runtime may use, as an owner uses it (a superset of the other roles'),
/// under its JetStream API (its prefix, and whether it listens to advisories) and its
/// connection's inbox prefix.
fn needed(inner: &Inner) -> Permissions {
    use crate::jsapi::JetStreamApi;
    let prefix = crate::server_errors::inbox_prefix(&inner.common.client);
    let role = Role::owner("runtime").with_inbox_prefix(prefix);
    let role = match inner.ensurer.provisioner().jetstream_api() {
        JetStreamApi::Local => role,
        JetStreamApi::Domain(domain) => role.with_domain(domain),
        JetStreamApi::Prefix(api) => role.with_api_prefix(api.clone()),
    };
    permissions(inner.ensurer.topology(), &role)
}

fn record(inner: &Inner, needs: &Permissions, violation: Violation) {
    let granting: Vec<_> = needs
        .granting(violation.action, &violation.subject)
        .collect();
    let permission = granting.first().map(|p| p.subject.clone());
    let needed_by: Vec<(Declaration, String)> = granting
        .iter()
        .flat_map(|p| p.needed_by.iter())
        .map(|n| (n.declaration.clone(), n.why.clone()))
        .collect();
    let action = violation.action.as_str();
    if needed_by.is_empty() {
        permission_violation("", "", action);
    }
    for (declaration, _) in &needed_by {
        match declaration {
            Declaration::Service => permission_violation("", "", action),
            Declaration::Stream(stream) => permission_violation(stream, "", action),
            Declaration::Consumer { stream, handler } => {
                let consumer = inner
                    .ensurer
                    .topology()
                    .consumers()
                    .iter()
                    .find(|c| c.decl.stream.name() == stream && c.decl.handler == handler)
                    .map_or("", |c| crate::telemetry::consumer_label(&c.decl));
                permission_violation(stream, consumer, action)
            }
        }
    }
    stop_consumers(inner, &granting);
    deny_serving(inner, &violation, &granting);
    let denial = PermissionDenial {
        action: violation.action,
        subject: violation.subject,
        permission,
        needed_by,
        count: 1,
        last: violation.at,
    };
    let text = denial.to_string();
    if inner.health.shared.denials.report(denial) {
        tracing::error!("{text}");
    }
    inner.health.shared.changed();
}

/// An endpoint or core subscription whose subscription the server refused receives nothing,
/// however well its probe proves the connection: each one with the refused subject and queue
/// group shows `denied`, naming the entry that grants it (see `run/serve/refused.rs`, which
/// subscribes again until the server accepts).
fn deny_serving(inner: &Inner, violation: &Violation, granting: &[&Permission]) {
    if violation.action != crate::grant::Verb::Subscribe {
        return;
    }
    for slot in inner.health.serve_slots() {
        let group = slot.queue_group();
        // The server names the group of a refused queue subscription; without one, the
        // subscription had none (or the text did not say: any group).
        let same = slot.subject == violation.subject
            && match &violation.queue {
                Some(queue) => group == Some(queue.as_str()),
                None => true,
            };
        if !same {
            continue;
        }
        let entry = granting
            .iter()
            .find(|p| p.queue.is_none() || p.queue.as_deref() == group)
            .map(|p| p.describe());
        let permission = entry.unwrap_or_else(|| match group {
            Some(group) => format!("subscribe `{}` (queue group `{group}`)", slot.subject),
            None => format!("subscribe `{}`", slot.subject),
        });
        slot.deny(permission);
    }
}

/// A consumer whose acks or pull requests the server refuses stops taking messages it could
/// not settle (see `Slot::deny`): every entry granting the denied subject that is one of
/// those, for the consumers that need it.
fn stop_consumers(inner: &Inner, granting: &[&Permission]) {
    for permission in granting {
        let takes_messages = permission.subject.starts_with("$JS.ACK.")
            || permission.subject.contains(".CONSUMER.MSG.NEXT.");
        if !takes_messages {
            continue;
        }
        for need in &permission.needed_by {
            let Declaration::Consumer { stream, handler } = &need.declaration else {
                continue;
            };
            let consumers = inner.ensurer.topology().consumers();
            for (index, consumer) in consumers.iter().enumerate() {
                if consumer.decl.stream.name() == stream && consumer.decl.handler == handler {
                    inner.health.slots[index].deny(permission.describe());
                }
            }
        }
    }
}
