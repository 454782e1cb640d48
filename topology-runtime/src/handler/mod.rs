//! What a handler sees and returns: the error it returns ([`HandlerError`]), the [`Context`] of
//! the message it handles, its publishes ([`Publish`], under message ids derived from that
//! message so that a redelivery does not publish twice), and the glue generated code calls.

mod batch;
mod context;
mod error;
#[doc(hidden)]
pub mod glue;
#[cfg(feature = "tower")]
pub mod layer;
mod msg_id;
mod publish;

use std::future::Future;
use std::pin::Pin;

pub(crate) use batch::gathered;
pub use batch::{
    Batch, BatchError, BatchFn, BatchFuture, BatchInput, BatchOutcomes, Failures, Item,
    SharedBatchHandler,
};
pub(crate) use context::{Common, Received, Scope, system_time};
pub use context::{Context, Incoming};
pub(crate) use error::panic_message;
pub use error::{DecodeError, HandlerError};
pub(crate) use msg_id::{msg_id, stream_epoch};
pub use publish::Publish;

/// The boxed future a registered handler returns.
pub type HandlerFuture = Pin<Box<dyn Future<Output = Result<(), HandlerError>> + Send + 'static>>;

/// A handler as the runtime holds it: a registered `fn` or any closure.
pub type SharedHandler = std::sync::Arc<dyn Fn(Incoming) -> HandlerFuture + Send + Sync + 'static>;

/// The type-erased entry point that generated code registers for each handler.
pub type HandlerFn = fn(Incoming) -> HandlerFuture;
