//! Whether a refused permission works again: while the server refuses a consumer's acks or
//! pull requests, its session asks for nothing (every message it took would be handled and
//! never settled, then delivered again: a storm), and checks every heartbeat with one publish
//! that the permission covers and that changes nothing: a progress ack of no delivery (stream
//! sequence 0, a subject of its own each time), which the consumer ignores; or a pull request
//! for one message that waits for none (`no_wait`), answered to the session's inbox like any
//! other. The server handles one connection's operations in order and writes its refusal
//! before it reads the next: so a request sent after the publish (the consumer's info, which
//! the consumer needs anyway) is answered after any refusal of it arrived. None by then, and
//! none in the moment the client takes to hand it over, means the publish was allowed. (A
//! `flush` would not do: it returns once the bytes are written to the socket.)

use std::time::Duration;

use tokio::sync::broadcast::error::RecvError;

use crate::server_errors::Heard;

/// What the session checks with, given the refused entry (as `Permission::describe` writes
/// it).
pub(super) struct Ask {
    subject: String,
    reply: Option<async_nats::Subject>,
    payload: &'static [u8],
    /// `<api prefix>.CONSUMER.INFO.<stream>.<consumer>`: the round trip after the publish.
    info: String,
}

impl Ask {
    /// `names`: the stream and the consumer; `pull`: the pull subject and the session's inbox.
    pub(super) fn of(
        permission: &str,
        (stream, consumer): (&str, &str),
        (pull, inbox): (&str, &async_nats::Subject),
    ) -> Ask {
        let info = pull.replacen(".CONSUMER.MSG.NEXT.", ".CONSUMER.INFO.", 1);
        if permission.contains("$JS.ACK.") {
            let unique = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            Ask {
                subject: format!("$JS.ACK.{stream}.{consumer}.1.0.0.{unique}.0"),
                reply: None,
                payload: b"+WPI",
                info,
            }
        } else {
            Ask {
                subject: pull.to_owned(),
                reply: Some(inbox.clone()),
                payload: br#"{"batch":1,"no_wait":true}"#,
                info,
            }
        }
    }
}

/// How long after the round trip a refusal may still be on its way to the runtime (the client
/// hands its events to a callback over a channel).
const REFUSAL_HANDOVER: Duration = Duration::from_millis(50);

/// Whether the publish `ask` makes is allowed, known within `wait` and the handover.
pub(super) async fn works(client: &async_nats::Client, ask: Ask, wait: Duration) -> bool {
    let Some(errors) = crate::server_errors::of(client) else {
        return false;
    };
    let (_, mut coming) = errors.subscribe();
    let payload = bytes::Bytes::from_static(ask.payload);
    let asked = async {
        match ask.reply {
            Some(reply) => client
                .publish_with_reply(ask.subject.clone(), reply, payload)
                .await
                .ok()?,
            None => client.publish(ask.subject.clone(), payload).await.ok()?,
        }
        client
            .request(ask.info.clone(), bytes::Bytes::new())
            .await
            .ok()
    };
    if tokio::time::timeout(wait, asked)
        .await
        .ok()
        .flatten()
        .is_none()
    {
        return false;
    }
    let refused = async {
        loop {
            match coming.recv().await {
                Ok(Heard::Violation(v)) if v.subject == ask.subject => return,
                Ok(_) | Err(RecvError::Lagged(_)) => {}
                Err(RecvError::Closed) => std::future::pending::<()>().await,
            }
        }
    };
    tokio::time::timeout(REFUSAL_HANDOVER, refused)
        .await
        .is_err()
}
