//! An endpoint or core subscription whose subscription the server refuses shows `denied` on its
//! own line, naming the entry to grant, not `running` (its probe proves the connection, not
//! the refused subscription): the server routes nothing to it (a request finds no responders)
//! and the runtime is not ready. Once an operator grants the entry and reloads the server, it
//! subscribes again by itself and runs: a request is answered, a message handled.

mod fixture;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use fixture::{Running, admin_of, client_of, users_config};
use nats_topology::export::{self, Permission, Permissions, Role, Verb};
use nats_topology::model::{EndpointDecl, ServiceDecl, SubscriptionDecl};
use nats_topology::{HandlerError, Health, Runtime, ServiceError, ServingState, Topology};
use nats_topology_testkit::{NatsServer, eventually};

static QUOTES: ServiceDecl = ServiceDecl::new("quotes", "1.0.0");
const QUOTE: &str = "denied.serving.quote";
const NOTES: &str = "denied.serving.notes";
const NOTES_GROUP: &str = "note-takers";

/// An endpoint (queue group `q`) and a core subscription in a queue group; the notes handled
/// are counted in `notes`.
fn topology(notes: &Arc<AtomicU64>) -> Topology {
    let notes = notes.clone();
    Topology::new()
        .endpoint(
            EndpointDecl::new("tests::quote", &QUOTES, "quote", QUOTE),
            |request| Box::pin(async move { Ok::<_, ServiceError>(request.payload().clone()) }),
        )
        .subscription(
            SubscriptionDecl::group("tests::on_note", NOTES, NOTES_GROUP),
            move |_| {
                let notes = notes.clone();
                Box::pin(async move {
                    notes.fetch_add(1, Ordering::Relaxed);
                    Ok::<(), HandlerError>(())
                })
            },
        )
}

/// The state of the endpoint (`true`) or of the subscription.
fn state(health: &Health, endpoint: bool) -> ServingState {
    if endpoint {
        health.endpoints()[0].state.clone()
    } else {
        health.subscriptions()[0].state.clone()
    }
}

/// A runtime under its generated permissions without the entry that lets the endpoint
/// (`endpoint`) or the subscription subscribe: denied, then granted by a reload; until it
/// answers a request (or handles a message) again.
async fn refused_then_granted(endpoint: bool) {
    fixture::trace();
    let notes = Arc::new(AtomicU64::new(0));
    let role = Role::owner("svc");
    let granted = export::permissions(&topology(&notes), &role);
    let (subject, group) = if endpoint {
        (QUOTE, "q")
    } else {
        (NOTES, NOTES_GROUP)
    };
    let refused = |e: &Permission| {
        e.action == Verb::Subscribe && e.subject == subject && e.queue.as_deref() == Some(group)
    };
    let index = granted
        .entries
        .iter()
        .position(refused)
        .expect("the generated permissions grant the queue subscription");
    let entry = granted.entries[index].describe();
    let users = |permissions: &Permissions| users_config(&[("svc", "pw", permissions)]);
    let mut server = NatsServer::builder()
        .config(users(&granted.without(index)))
        .probe_user("admin", "admin")
        .start()
        .await
        .expect("server starts");
    let admin = admin_of(&server.url()).await;
    let client = client_of(&server.url(), "svc", "pw", role.inbox_prefix()).await;
    let heartbeat = Duration::from_millis(500);
    let running = Running::spawn(
        Runtime::builder(client)
            .heartbeat(heartbeat)
            .topology(topology(&notes))
            .build()
            .expect("a valid topology"),
    );
    let health = running.health.clone();

    // The other one runs: only the refused subscription is denied.
    eventually(Duration::from_secs(20), "the other one running", || {
        let other = state(&health, !endpoint);
        async move { (other == ServingState::Running).then_some(()) }
    })
    .await;
    let permission = eventually(Duration::from_secs(20), "denied", || {
        let state = state(&health, endpoint);
        async move {
            match state {
                ServingState::Denied { permission, .. } => Some(permission),
                _ => None,
            }
        }
    })
    .await;
    assert_eq!(permission, entry, "names the entry to grant: {health}");
    assert!(!health.ready(), "not ready while denied: {health}");
    assert!(
        health.denials().iter().any(|d| d.action == Verb::Subscribe
            && d.subject == subject
            && d.needed_by.iter().any(|(_, why)| why.contains(if endpoint {
                "tests::quote"
            } else {
                "tests::on_note"
            }))),
        "the denial names the declaration: {health}"
    );
    // Nothing reaches it: the server has no such subscription.
    if endpoint {
        let asked = admin.request(QUOTE, "before".into()).await;
        assert!(
            matches!(&asked, Err(e) if e.kind() == async_nats::RequestErrorKind::NoResponders),
            "no responders while refused: {asked:?}"
        );
    }
    // Its probe proves the connection every heartbeat: it stays denied, not running (each
    // state it shows over three heartbeats, sampled).
    let mut samples = tokio::time::interval(Duration::from_millis(20));
    let observed = tokio::time::Instant::now();
    while observed.elapsed() < heartbeat * 3 {
        samples.tick().await;
        let now = state(&health, endpoint);
        assert!(
            matches!(now, ServingState::Denied { .. }),
            "still denied while its probes are answered: {now}"
        );
    }
    if !endpoint {
        // Published while refused: the server has no interest, and drops it.
        admin.publish(NOTES, "before".into()).await.unwrap();
        admin.flush().await.unwrap();
    }

    server.reload(users(&granted)).expect("the grant reloaded");
    eventually(Duration::from_secs(20), "running again", || {
        let up = state(&health, endpoint) == ServingState::Running;
        async move { up.then_some(()) }
    })
    .await;
    if endpoint {
        let answer = admin
            .request(QUOTE, "after".into())
            .await
            .expect("answered once granted");
        assert_eq!(answer.payload.as_ref(), b"after");
    } else {
        admin.publish(NOTES, "after".into()).await.unwrap();
        admin.flush().await.unwrap();
        eventually(Duration::from_secs(10), "the note handled", || {
            let handled = notes.load(Ordering::Relaxed);
            async move { (handled >= 1).then_some(()) }
        })
        .await;
        // Only the one published once it was accepted: nothing reached it while refused.
        assert_eq!(health.subscriptions()[0].handled, 1, "{health}");
    }
    running.stop().await.expect("a clean drain");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_endpoint_is_denied_until_granted() {
    refused_then_granted(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_subscription_is_denied_until_granted() {
    refused_then_granted(false).await;
}
