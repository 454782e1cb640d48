//! A relay's consumer, ensured: it is this instance's own (one per instance, one replica), so
//! when it is lost, or its create goes unanswered, it is deleted and created again rather
//! than waited for, and the server places the new one on a node that answers.

use std::time::Duration;

use crate::provision::{ProvisionError, ProvisionErrorKind, UpdateMode};
use crate::registry::Consumer;
use crate::run::{Ensured, Inner};

/// How long a relay's consumer is given to answer its delete before it is created again: its
/// leader answers within milliseconds while its node is up; on a lost node it never does (the
/// meta leader removes it all the same, which the create that follows tells).
const RELAY_DELETE_WAIT: Duration = Duration::from_secs(1);

/// How long a relay's create may go unanswered before the relay deletes it and creates it
/// again. The server places a new consumer's single replica on a random node of its stream
/// among those it does not know to be offline yet; one placed on a node killed a moment
/// before answers nobody until that node returns (30 s in `watch_faults --faults own30`),
/// while a create placed again lands on a live node two times in three. A healthy create is
/// answered within milliseconds, one during a leader election within a few seconds.
pub(super) const RELAY_CREATE_WAIT: Duration = Duration::from_secs(3);

/// Ensures the relay `name`: deletes its consumer first when `recreate` (see
/// `Loss::recreates`), then creates it; a create unanswered for [`RELAY_CREATE_WAIT`] fails as
/// [`ProvisionErrorKind::Unanswered`], after which the supervisor deletes and creates it
/// again.
pub(super) async fn ensure_relay(
    inner: &Inner,
    consumer: &Consumer,
    name: &str,
    recreate: bool,
    mode: &UpdateMode,
) -> Result<Ensured, ProvisionError> {
    let stream = consumer.decl.stream.name();
    if recreate {
        // A consumer whose single replica is on a lost node answers nobody: the delete is done
        // by the meta leader, and may go unanswered. The create that follows says whether it
        // went through (one that binds the old consumer again loses the session the same way,
        // or goes unanswered, and deletes again).
        let deleted = tokio::time::timeout(
            RELAY_DELETE_WAIT,
            Box::pin(inner.ensurer.provisioner().delete_consumer(stream, name)),
        )
        .await;
        match deleted {
            Ok(Ok(())) => {}
            Ok(Err(e)) if !e.is_transient() => return Err(e),
            Ok(Err(e)) => {
                tracing::debug!(stream, consumer = name, error = %e, "could not delete the relay's consumer before creating it again");
            }
            Err(_) => {
                tracing::debug!(
                    stream,
                    consumer = name,
                    "no answer to the relay consumer's delete; creating it again"
                );
            }
        }
    }
    let created = tokio::time::timeout(
        RELAY_CREATE_WAIT,
        Box::pin(inner.ensurer.ensure(consumer, Some(name), mode)),
    )
    .await;
    created.unwrap_or_else(|_| Err(unanswered(stream, name)))
}

/// Whether a relay's failed ensure calls for its consumer to be deleted before the next one:
/// its create went unanswered (see [`RELAY_CREATE_WAIT`]).
pub(super) fn unanswered_create(e: &ProvisionError) -> bool {
    e.kind() == ProvisionErrorKind::Unanswered
}

fn unanswered(stream: &str, name: &str) -> ProvisionError {
    ProvisionError::new(
        ProvisionErrorKind::Unanswered,
        stream,
        format!(
            "the relay's consumer was not created within {RELAY_CREATE_WAIT:?} (no answer, or \
             `consumer is offline`): it may be on a node that was just lost; the relay deletes \
             it and creates it again, for the server to place it on a node that answers"
        ),
    )
    .consumer(name)
}
