//! Batch handlers: what a `#[queue_consumer(batch = N)]` handler receives ([`Batch`]) and
//! returns ([`BatchError`], built with [`Failures`]), and the gathering that turns the
//! instance's deliveries into batches.
//!
//! Each message of a batch is still dispatched on its own: it is running (kept alive with
//! progress acks, counted in health and metrics) while it waits for its batch and while the
//! batch runs, and it is settled alone with its own outcome: acked, naked with its own
//! backoff, or dead-lettered. A batch is gathered per consumer session, from its first
//! message until it is full or `wait` has passed; the first message's dispatch runs the
//! handler.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;
use tokio::sync::{Notify, oneshot};
use topology_core::model::BatchDecl;

use super::{Context, HandlerError, HandlerFuture, Incoming, SharedHandler, panic_message};

/// The messages one call of a batch handler gets, decoded, in delivery order. A message whose
/// payload does not decode is not in it: it is dead-lettered on its own, as a single
/// handler's would be.
///
/// ```
/// use nats_topology::{Batch, BatchError, Failures};
/// # #[derive(serde::Deserialize)] struct Order { id: u64 }
/// # async fn charge(_: &Order) -> Result<(), std::io::Error> { Ok(()) }
///
/// async fn bill(batch: Batch<Order>) -> Result<(), BatchError> {
///     let mut failures = Failures::new();
///     for item in &batch {
///         if let Err(e) = charge(item.value()).await {
///             // Only this order is delivered again.
///             failures.fail(item.index(), e);
///         }
///     }
///     failures.into_result()
/// }
/// ```
pub struct Batch<T> {
    items: Vec<Item<T>>,
}

/// One message of a [`Batch`]: its value, its context and its place in the batch.
pub struct Item<T> {
    value: T,
    context: Context,
    index: usize,
}

impl<T> Item<T> {
    /// The decoded payload.
    pub fn value(&self) -> &T {
        &self.value
    }

    /// The decoded payload, by value.
    pub fn into_value(self) -> T {
        self.value
    }

    /// The message's context (subject, headers, delivery count, publishing with message ids
    /// derived from this message).
    pub fn context(&self) -> &Context {
        &self.context
    }

    /// Its place in the batch as delivered, which [`Failures::fail`] takes.
    pub fn index(&self) -> usize {
        self.index
    }
}

impl<T> Batch<T> {
    /// How many messages it holds.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether it holds none (never, for a batch a handler receives).
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Its messages, in delivery order.
    pub fn iter(&self) -> std::slice::Iter<'_, Item<T>> {
        self.items.iter()
    }
}

impl<T> IntoIterator for Batch<T> {
    type Item = Item<T>;
    type IntoIter = std::vec::IntoIter<Item<T>>;

    fn into_iter(self) -> Self::IntoIter {
        self.items.into_iter()
    }
}

impl<'a, T> IntoIterator for &'a Batch<T> {
    type Item = &'a Item<T>;
    type IntoIter = std::slice::Iter<'a, Item<T>>;

    fn into_iter(self) -> Self::IntoIter {
        self.items.iter()
    }
}

/// Why a batch handler failed: the whole batch (any [`HandlerError`], or an error that
/// converts into one, so `?` works), or some of its messages ([`Failures`]). Every message not
/// named is acknowledged.
pub struct BatchError {
    failed: Failed,
}

enum Failed {
    Whole(HandlerError),
    Items(Vec<(usize, HandlerError)>),
}

impl<E: Into<HandlerError>> From<E> for BatchError {
    fn from(error: E) -> Self {
        BatchError {
            failed: Failed::Whole(error.into()),
        }
    }
}

impl From<Failures> for BatchError {
    fn from(failures: Failures) -> Self {
        BatchError {
            failed: Failed::Items(failures.items),
        }
    }
}

impl fmt::Display for BatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.failed {
            Failed::Whole(error) => write!(f, "the whole batch failed: {error}"),
            Failed::Items(items) => write!(f, "{} message(s) of the batch failed", items.len()),
        }
    }
}

impl fmt::Debug for BatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// The messages of a batch that failed, each with its own error: a failure naks that message
/// (redelivered after its backoff), a [`HandlerError::permanent`] one dead-letters it.
#[derive(Default)]
pub struct Failures {
    items: Vec<(usize, HandlerError)>,
}

impl Failures {
    /// No failure yet.
    pub fn new() -> Self {
        Failures::default()
    }

    /// The message at `index` ([`Item::index`]) failed with `error`.
    pub fn fail(&mut self, index: usize, error: impl Into<HandlerError>) {
        self.items.push((index, error.into()));
    }

    /// Whether no message failed.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// `Ok(())` when no message failed, else the failures as a [`BatchError`].
    pub fn into_result(self) -> Result<(), BatchError> {
        match self.items.is_empty() {
            true => Ok(()),
            false => Err(self.into()),
        }
    }
}

/// The messages of one batch as the runtime hands them to a batch handler added with
/// [`Topology::batch_consumer`](crate::Topology::batch_consumer) (the macros generate this
/// part): [`BatchInput::decode_json`] gives the [`Batch`] of what decodes (the rest fail
/// permanently, as a single handler's undecodable message does), and [`BatchInput::finish`]
/// turns the handler's result into each message's outcome.
pub struct BatchInput {
    incoming: Vec<Incoming>,
    outcomes: Vec<Option<Result<(), HandlerError>>>,
}

/// One outcome per message of a batch, in order.
pub type BatchOutcomes = Vec<Result<(), HandlerError>>;

/// The boxed future a registered batch handler returns.
pub type BatchFuture = Pin<Box<dyn Future<Output = BatchOutcomes> + Send + 'static>>;

/// The type-erased entry point that generated code registers for a batch handler.
pub type BatchFn = fn(BatchInput) -> BatchFuture;

impl BatchInput {
    fn new(incoming: Vec<Incoming>) -> Self {
        let outcomes = incoming.iter().map(|_| None).collect();
        BatchInput { incoming, outcomes }
    }

    /// The messages, in delivery order.
    pub fn incoming(&self) -> &[Incoming] {
        &self.incoming
    }

    /// The batch of the messages whose payload is JSON of `T`.
    pub fn decode_json<T: serde::de::DeserializeOwned + 'static>(&mut self) -> Batch<T> {
        self.decode(super::glue::decode_json::<T>)
    }

    /// The batch of the messages that `decode` reads; the others fail with its error.
    pub fn decode<T>(&mut self, decode: impl Fn(&Incoming) -> Result<T, HandlerError>) -> Batch<T> {
        let mut items = Vec::with_capacity(self.incoming.len());
        for (index, incoming) in self.incoming.iter().enumerate() {
            match decode(incoming) {
                Ok(value) => items.push(Item {
                    value,
                    context: incoming.context.clone(),
                    index,
                }),
                Err(error) => self.outcomes[index] = Some(Err(error)),
            }
        }
        Batch { items }
    }

    /// Every message's outcome, given the handler's result (`Ok`: every message not failed
    /// already is handled).
    pub fn finish(mut self, result: Result<(), BatchError>) -> BatchOutcomes {
        match result {
            Ok(()) => {}
            Err(BatchError {
                failed: Failed::Items(items),
            }) => {
                for (index, error) in items {
                    match self.outcomes.get_mut(index) {
                        Some(slot @ None) => *slot = Some(Err(error)),
                        Some(Some(_)) => {}
                        None => tracing::warn!(
                            index,
                            len = self.incoming.len(),
                            "a batch handler failed a message index outside its batch; ignored"
                        ),
                    }
                }
            }
            Err(BatchError {
                failed: Failed::Whole(error),
            }) => {
                let text = error.to_string();
                let permanent = error.is_permanent();
                let mut first = Some(error);
                for slot in self.outcomes.iter_mut().filter(|slot| slot.is_none()) {
                    // The first message keeps the error itself; the others a copy of it.
                    let error = first.take().unwrap_or_else(|| {
                        let copy = format!("the batch failed: {text}");
                        match permanent {
                            true => HandlerError::permanent(copy),
                            false => HandlerError::new(copy),
                        }
                    });
                    *slot = Some(Err(error));
                }
            }
        }
        self.outcomes
            .into_iter()
            .map(|outcome| outcome.unwrap_or(Ok(())))
            .collect()
    }

    /// Every message not failed already fails with `error` (application state missing).
    pub fn fail_all(self, error: HandlerError) -> BatchOutcomes {
        self.finish(Err(error.into()))
    }

    /// Every message's outcome when no message decoded: the handler is not called.
    pub fn none_decoded(&self) -> bool {
        self.outcomes.iter().all(Option::is_some)
    }
}

/// A batch handler as the runtime holds it: a registered `fn` or any closure.
pub type SharedBatchHandler = Arc<dyn Fn(BatchInput) -> BatchFuture + Send + Sync + 'static>;

/// Turns a batch handler into the per-message handler a consumer session dispatches: each
/// message joins the open batch of its session (the first opens it and runs the handler once
/// the batch is full or `batch.wait` has passed), then waits for its own outcome.
pub(crate) fn gathered(handler: SharedBatchHandler, batch: BatchDecl) -> SharedHandler {
    let gather = Arc::new(Gather {
        handler,
        size: usize::try_from(batch.size).unwrap_or(usize::MAX).max(1),
        wait: batch.wait,
        open: Mutex::new(HashMap::new()),
    });
    Arc::new(move |incoming| -> HandlerFuture {
        let gather = gather.clone();
        Box::pin(async move { gather.join(incoming).await })
    })
}

/// The open batches of one consumer, one per session (by its scope: a session's messages
/// share it), each gathering until it is full or its first message's dispatch takes it. A full
/// batch is closed at once, so that the session's next message opens another: no batch holds
/// more than the declared size, however many messages are handled at once.
struct Gather {
    handler: SharedBatchHandler,
    size: usize,
    wait: Duration,
    open: Mutex<HashMap<usize, Arc<Open>>>,
}

type Waiter = oneshot::Sender<Result<(), HandlerError>>;

/// One batch being gathered. Messages are pushed only while it is in `Gather::open`, under
/// that map's lock; whoever removes it from the map has it whole.
struct Open {
    messages: Mutex<Vec<(Incoming, Waiter)>>,
    full: Notify,
}

/// Held by the dispatch that runs a batch: dropped before it took the batch (its handler
/// stopped by a drain's grace period), it closes the batch, so that the messages in it fail
/// instead of waiting for a handler that will not run, and the session's next message opens
/// a new one.
struct Leading<'a> {
    gather: &'a Gather,
    key: usize,
    batch: Arc<Open>,
    taken: bool,
}

impl Drop for Leading<'_> {
    fn drop(&mut self) {
        if !self.taken {
            drop(self.gather.take(self.key, &self.batch));
        }
    }
}

impl Gather {
    /// Closes `batch` (if still open) and returns its messages.
    fn take(&self, key: usize, batch: &Arc<Open>) -> Vec<(Incoming, Waiter)> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if open.get(&key).is_some_and(|o| Arc::ptr_eq(o, batch)) {
            open.remove(&key);
        }
        drop(open);
        std::mem::take(&mut *batch.messages.lock().unwrap_or_else(|e| e.into_inner()))
    }

    async fn join(&self, incoming: Incoming) -> Result<(), HandlerError> {
        let key = Arc::as_ptr(&incoming.context.scope) as usize;
        let (tx, rx) = oneshot::channel();
        let leads = {
            let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
            let (batch, leads) = match open.get(&key) {
                Some(batch) => (batch.clone(), None),
                None => {
                    let batch = Arc::new(Open {
                        messages: Mutex::new(Vec::with_capacity(self.size)),
                        full: Notify::new(),
                    });
                    open.insert(key, batch.clone());
                    (batch.clone(), Some(batch))
                }
            };
            let mut messages = batch.messages.lock().unwrap_or_else(|e| e.into_inner());
            messages.push((incoming, tx));
            if messages.len() >= self.size {
                open.remove(&key);
                batch.full.notify_one();
            }
            leads
        };
        if let Some(batch) = leads {
            let mut leading = Leading {
                gather: self,
                key,
                batch,
                taken: false,
            };
            let _ = tokio::time::timeout(self.wait, leading.batch.full.notified()).await;
            leading.taken = true;
            let messages = self.take(key, &leading.batch);
            self.run(messages).await;
        }
        rx.await.unwrap_or_else(|_| {
            Err(HandlerError::new(
                "the batch this message was in was stopped before its handler finished (a drain's grace period ran out)",
            ))
        })
    }

    /// Runs the handler on one batch and gives each message its outcome; a panic fails them
    /// all.
    async fn run(&self, batch: Vec<(Incoming, Waiter)>) {
        let (incoming, waiters): (Vec<Incoming>, Vec<Waiter>) = batch.into_iter().unzip();
        let len = incoming.len();
        let input = BatchInput::new(incoming);
        let called = std::panic::catch_unwind(AssertUnwindSafe(|| (self.handler)(input)));
        let outcomes = match called {
            Ok(future) => AssertUnwindSafe(future).catch_unwind().await,
            Err(panic) => Err(panic),
        };
        let mut outcomes = match outcomes {
            Ok(outcomes) => outcomes,
            Err(panic) => {
                let message = panic_message(&panic);
                (0..len)
                    .map(|_| {
                        Err(HandlerError::new(format!(
                            "the batch handler panicked: {message}"
                        )))
                    })
                    .collect()
            }
        }
        .into_iter();
        for waiter in waiters {
            let outcome = outcomes.next().unwrap_or_else(|| {
                Err(HandlerError::new(
                    "the batch handler gave fewer outcomes than messages",
                ))
            });
            // A message whose dispatch is gone (stopped) has nothing to settle.
            let _ = waiter.send(outcome);
        }
    }
}
