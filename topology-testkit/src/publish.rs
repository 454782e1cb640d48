//! Filling a stream fast: publishes with many acknowledgements awaited at once.

use async_nats::jetstream;

/// How many publish acknowledgements [`publish_all`] awaits at once.
const IN_FLIGHT: usize = 1024;

/// Publishes every payload to `subject` through JetStream, in order, awaiting the server's
/// acknowledgements 1,024 at a time; returns once every one is acknowledged.
///
/// ```no_run
/// # async fn f(js: async_nats::jetstream::Context) -> Result<(), async_nats::Error> {
/// let payloads = (0..10_000).map(|n| format!("{{\"n\":{n}}}").into_bytes());
/// nats_topology_testkit::publish_all(&js, "orders.created", payloads).await?;
/// # Ok(()) }
/// ```
pub async fn publish_all(
    js: &jetstream::Context,
    subject: &str,
    payloads: impl IntoIterator<Item = Vec<u8>>,
) -> Result<(), async_nats::Error> {
    let mut pending = Vec::with_capacity(IN_FLIGHT);
    for payload in payloads {
        pending.push(js.publish(subject.to_owned(), payload.into()).await?);
        if pending.len() == IN_FLIGHT {
            for ack in pending.drain(..) {
                ack.await?;
            }
        }
    }
    for ack in pending {
        ack.await?;
    }
    Ok(())
}
