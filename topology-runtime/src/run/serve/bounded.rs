//! The dispatch loop an endpoint and a core subscription share: at most their concurrency of
//! handlers at once, run in the dispatching task (a `FuturesUnordered`, no task per message; a
//! handler that finishes without waiting never enters it). On stop it unsubscribes (as the
//! caller says), keeps handing out what was received until the stream ends, and waits for the
//! handlers at most the grace period; when that runs out, the handlers still running are
//! stopped (dropped) and the caller answers for them (an endpoint with a 503). A subscription
//! the server refused is replaced by one it accepted since (`refused.rs`).

use std::pin::pin;
use std::task::Poll;
use std::time::Duration;

use async_nats::{Message, Subscriber, UnsubscribeError};
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How many handlers at once, and how long a stop waits for them.
pub(super) struct Bounds {
    /// At least 1.
    pub(super) concurrency: usize,
    pub(super) grace: Duration,
}

/// Where a stopped dispatch is, for its caller.
pub(super) enum Stopping {
    /// About to unsubscribe (the grace period has started).
    Unsubscribing,
    /// Unsubscribed (what was received is still handed out, then the stream ends), or not.
    Unsubscribed(Result<(), UnsubscribeError>),
}

/// How a dispatch ended.
pub(super) enum Ended {
    /// The subscription ended unasked (the client closed), and every handler finished.
    Closed,
    /// Stopped, and every message received was handled within the grace period.
    Drained,
    /// Stopped, and the grace period ran out: `running` handlers were stopped; what was
    /// received and not started is still in the subscription (drained: its stream ends after
    /// them).
    OutOfTime { running: usize },
}

/// Dispatches `subscriber`'s messages to `start` until `stop`, then drains; or until the
/// subscription ends. `finished` gets each handler's output (to count it), `on_stop` hears of
/// the stop before and after unsubscribing. A subscription from `accepted` replaces
/// `subscriber`, which the server refused (nothing reaches it: dropping it loses nothing).
pub(super) async fn dispatch<H: Future>(
    subscriber: &mut Subscriber,
    accepted: &mut mpsc::UnboundedReceiver<Subscriber>,
    bounds: Bounds,
    stop: &CancellationToken,
    mut start: impl FnMut(Message) -> H,
    mut finished: impl FnMut(H::Output),
    mut on_stop: impl FnMut(Stopping),
) -> Ended {
    let mut in_flight = FuturesUnordered::new();
    let mut open = true;
    let mut stopping = false;
    // One future each, polled across iterations (no registration per request).
    let mut stopped = pin!(stop.cancelled());
    let mut grace_over = pin!(tokio::time::sleep(Duration::from_secs(86_400 * 365)));
    while open || !in_flight.is_empty() {
        tokio::select! {
            biased;
            Some(done) = in_flight.next() => finished(done),
            next = subscriber.next(), if open && in_flight.len() < bounds.concurrency => match next {
                Some(message) => {
                    // Polled once at once: a handler that answers without waiting is done
                    // here, without a trip through the set (as a plain loop would be).
                    let mut handling = Box::pin(start(message));
                    match futures::poll!(handling.as_mut()) {
                        Poll::Ready(done) => finished(done),
                        Poll::Pending => in_flight.push(handling),
                    }
                }
                // Drained, or the client closed.
                None => open = false,
            },
            Some(replacement) = accepted.recv(), if open && !stopping => {
                *subscriber = replacement;
            }
            _ = &mut stopped, if !stopping => {
                stopping = true;
                on_stop(Stopping::Unsubscribing);
                grace_over.as_mut().reset(Instant::now() + bounds.grace);
                let unsubscribed = subscriber.drain().await;
                on_stop(Stopping::Unsubscribed(unsubscribed));
            }
            // Returning drops the handlers still running: stopped here.
            _ = &mut grace_over, if stopping => {
                return Ended::OutOfTime { running: in_flight.len() };
            }
        }
    }
    if stopping {
        Ended::Drained
    } else {
        Ended::Closed
    }
}
