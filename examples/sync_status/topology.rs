//! What every replica runs: the two R3 streams, the queue consumer that computes a member's
//! status once (on whichever replica the server hands the work to), the broadcast relay
//! that gives every replica every status, for the sessions it holds, and the endpoint that
//! answers "what is this member's status now" from the stream (on whichever replica the queue
//! group picks).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nats_topology::async_nats::jetstream::stream::LastRawMessageErrorKind;
use nats_topology::{
    Context, HandlerError, RequestContext, ServiceError, State, broadcast, endpoint,
    queue_consumer, service, stream,
};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

/// The daemon's events: `daemon.sync.complete` when a member's data has been synced.
#[stream(name = "DAEMON_SYNC", subjects = ["daemon.sync.>"], replicas = 3, max_age = "1h")]
pub struct DaemonSync;

/// The computed statuses, one subject per member: `member.status.<member>`.
#[stream(name = "MEMBER_STATUS", subjects = ["member.status.>"], replicas = 3, max_age = "1h")]
pub struct MemberStatus;

/// The replicas' request/reply service: every replica answers `$SRV.PING|INFO|STATS` for it,
/// and one of them (the queue group `q`) each request to its endpoints.
#[service(
    name = "sync_status",
    version = "1.0.0",
    description = "Member sync status, read from the MEMBER_STATUS stream"
)]
pub struct SyncStatusService;

/// Where a page's Refresh asks for a member's status (`{"member": ".."}`).
pub const STATUS_GET: &str = "members.status.get";

/// Where the daemon announces a finished sync (stored in `DAEMON_SYNC`).
pub const SYNC_COMPLETE: &str = "daemon.sync.complete";

/// How long computing a status takes (simulated: the rows of the member are written). Long
/// enough to watch "syncing" in a browser, and to kill the replica doing it.
pub const WORK: Duration = Duration::from_millis(1500);

/// The daemon's event: the member whose data was synced.
#[derive(Debug, Serialize, Deserialize)]
pub struct SyncComplete {
    pub member: String,
    /// When the sync was asked for (milliseconds since the Unix epoch).
    pub requested_at_ms: u64,
}

/// Where a member's sync stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    Idle,
    Syncing,
    Done,
}

/// A member's status as every browser sees it, whichever replica computed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    pub member: String,
    pub state: Phase,
    /// The replica that did (or is doing) the work.
    pub replica: Option<String>,
    /// When this status was computed (milliseconds since the Unix epoch).
    pub at_ms: u64,
    /// Rows written for the member (simulated).
    pub rows: u32,
}

impl Status {
    fn idle(member: &str) -> Status {
        Status {
            member: member.to_owned(),
            state: Phase::Idle,
            replica: None,
            at_ms: 0,
            rows: 0,
        }
    }
}

/// The subject of `member`'s statuses.
pub fn status_subject(member: &str) -> String {
    format!("member.status.{member}")
}

/// Whether `member` can be a subject token (and is short enough to show).
pub fn valid_member(member: &str) -> bool {
    (1..=32).contains(&member.len())
        && member
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The work: one replica (the queue group `sync` shares one durable) computes the status and
/// publishes it, "syncing" when it starts and "done" when the rows are written, to
/// `member.status.<member>` (declared with `publishes`: the service's generated permissions
/// grant it there and nowhere else of `MEMBER_STATUS`). If this replica dies mid-way, the
/// server redelivers the event to a survivor after `ack_wait`.
#[queue_consumer(stream = DaemonSync, group = "sync", subject = "daemon.sync.complete",
                 ack_wait = "2s", max_deliver = 10, concurrency = 4,
                 publishes = ["member.status.>"])]
pub async fn compute_status(
    event: SyncComplete,
    cx: Context,
    hub: State<Hub>,
) -> Result<(), HandlerError> {
    if !valid_member(&event.member) {
        return Err(HandlerError::permanent(format!(
            "`{}` is not a member name",
            event.member
        )));
    }
    let subject = status_subject(&event.member);
    let mut status = Status {
        member: event.member,
        state: Phase::Syncing,
        replica: Some(hub.replica.clone()),
        at_ms: now_ms(),
        rows: 0,
    };
    cx.publish(subject.clone(), &status).await?;
    // Simulated work: the member's rows are written.
    tokio::time::sleep(WORK).await;
    status.state = Phase::Done;
    status.at_ms = now_ms();
    status.rows = 20 + status.member.bytes().map(u32::from).sum::<u32>() % 80;
    cx.publish(subject, &status).await?;
    Ok(())
}

/// The fan-out: every replica receives every status (starting with the last one of each
/// member) and hands it to the sessions it holds for that member.
#[broadcast(stream = MemberStatus, subject = "member.status.>", deliver = "last_per_subject")]
pub async fn relay_status(status: Status, hub: State<Hub>) -> Result<(), HandlerError> {
    hub.deliver(status);
    Ok(())
}

/// A request for a member's status.
#[derive(Debug, Serialize, Deserialize)]
pub struct StatusQuery {
    pub member: String,
}

/// The answer: the member's last status in the stream, and which replica read it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusAnswer {
    pub status: Status,
    pub answered_by: String,
}

/// The status of a member as the stream holds it now: its last message on
/// `member.status.<member>` (idle when there is none), read by whichever replica the queue
/// group hands the request to.
#[endpoint(service = SyncStatusService, subject = "members.status.get", timeout = "5s")]
pub async fn get_status(
    query: StatusQuery,
    cx: RequestContext,
    hub: State<Hub>,
) -> Result<StatusAnswer, ServiceError> {
    if !valid_member(&query.member) {
        return Err(ServiceError::bad_request(format!(
            "`{}` is not a member name: 1 to 32 letters, digits, `-` or `_`",
            query.member
        )));
    }
    let stream = cx
        .jetstream()
        .get_stream(<MemberStatus as nats_topology::model::StreamDef>::DECL.name)
        .await?;
    let status = match stream
        .get_last_raw_message_by_subject(&status_subject(&query.member))
        .await
    {
        Ok(message) => serde_json::from_slice(&message.payload)?,
        Err(e) if matches!(e.kind(), LastRawMessageErrorKind::NoMessageFound) => {
            Status::idle(&query.member)
        }
        Err(e) => return Err(e.into()),
    };
    Ok(StatusAnswer {
        status,
        answered_by: hub.replica.clone(),
    })
}

/// This replica's sessions (per member) and the last status it has seen of each member; a
/// cheap handle shared by the handlers (as `State<Hub>`) and the web server.
#[derive(Clone)]
pub struct Hub {
    /// This replica's name, shown on the statuses it computes.
    pub replica: String,
    inner: Arc<Mutex<HubInner>>,
}

#[derive(Default)]
struct HubInner {
    last: HashMap<String, Status>,
    sessions: HashMap<String, Vec<(u64, mpsc::UnboundedSender<Status>)>>,
}

impl Hub {
    pub fn new(replica: &str) -> Hub {
        Hub {
            replica: replica.to_owned(),
            inner: Arc::default(),
        }
    }

    /// Keeps `status` as its member's last and sends it to the sessions watching the member.
    pub fn deliver(&self, status: Status) {
        let mut inner = self.inner.lock().expect("the hub's lock is not poisoned");
        if let Some(sessions) = inner.sessions.get_mut(&status.member) {
            sessions.retain(|(_, tx)| tx.send(status.clone()).is_ok());
        }
        inner.last.insert(status.member.clone(), status);
    }

    /// Registers `session` as watching `member`; returns the member's last status (idle if
    /// none), so that a session never misses one delivered just before.
    pub fn watch(&self, session: u64, member: &str, tx: mpsc::UnboundedSender<Status>) -> Status {
        let mut inner = self.inner.lock().expect("the hub's lock is not poisoned");
        let sessions = inner.sessions.entry(member.to_owned()).or_default();
        if !sessions.iter().any(|(id, _)| *id == session) {
            sessions.push((session, tx));
        }
        inner
            .last
            .get(member)
            .cloned()
            .unwrap_or_else(|| Status::idle(member))
    }

    /// Forgets `session` (its WebSocket closed).
    pub fn leave(&self, session: u64) {
        let mut inner = self.inner.lock().expect("the hub's lock is not poisoned");
        for sessions in inner.sessions.values_mut() {
            sessions.retain(|(id, _)| *id != session);
        }
        inner.sessions.retain(|_, sessions| !sessions.is_empty());
    }
}
