//! Application state as a handler argument: [`State<T>`], and the requirements a handler's
//! `State` arguments place on the runtime, checked by [`RuntimeBuilder::build`].
//!
//! [`RuntimeBuilder::build`]: crate::RuntimeBuilder::build

use std::any::{Any, TypeId};
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

/// Application state given to [`RuntimeBuilder::state`](crate::RuntimeBuilder::state), taken
/// as a handler argument after the payload (and the optional [`Context`](crate::Context)):
///
/// ```
/// use nats_topology::{HandlerError, State, queue_consumer};
///
/// struct Db {
///     url: String,
/// }
///
/// #[queue_consumer(stream = "ORDERS", group = "billing", subject = "orders.created")]
/// async fn on_order(order: serde_json::Value, db: State<Db>) -> Result<(), HandlerError> {
///     println!("{order} -> {}", db.url);
///     Ok(())
/// }
/// ```
///
/// The requirement is checked when the runtime is built, not when a message arrives: a
/// handler taking `State<Db>` in a runtime given no `Db` makes
/// [`RuntimeBuilder::build`](crate::RuntimeBuilder::build) fail with a problem naming the type
/// and the handler. Several `State` arguments may follow the payload, one per type.
///
/// `State<T>` holds an `Arc<T>`: it dereferences to `T`, and [`State::arc`] gives the `Arc` to
/// keep beyond the handler call. A pattern reaches it too: `State(db): State<Db>`.
pub struct State<T: ?Sized>(pub Arc<T>);

impl<T: ?Sized> State<T> {
    /// The shared value, to keep or pass on.
    pub fn arc(&self) -> &Arc<T> {
        &self.0
    }
}

impl<T: ?Sized> Deref for State<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T: ?Sized> Clone for State<T> {
    fn clone(&self) -> Self {
        State(self.0.clone())
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for State<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("State").field(&self.0).finish()
    }
}

/// A type of application state a handler needs: what [`RuntimeBuilder::build`] checks.
///
/// [`RuntimeBuilder::build`]: crate::RuntimeBuilder::build
#[derive(Clone, Copy)]
pub struct StateKey {
    id: fn() -> TypeId,
    name: fn() -> &'static str,
}

impl StateKey {
    /// The requirement of a `State<T>` argument.
    pub const fn of<T: Any + Send + Sync>() -> StateKey {
        StateKey {
            id: TypeId::of::<T>,
            name: std::any::type_name::<T>,
        }
    }

    /// The type's id, as the builder's state map keys it.
    pub fn type_id(&self) -> TypeId {
        (self.id)()
    }

    /// The type's name, for messages.
    pub fn type_name(&self) -> &'static str {
        (self.name)()
    }
}

impl fmt::Debug for StateKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.type_name())
    }
}

impl PartialEq for StateKey {
    fn eq(&self, other: &Self) -> bool {
        self.type_id() == other.type_id()
    }
}

impl Eq for StateKey {}

/// Helpers for generated code. Not public API.
#[doc(hidden)]
pub mod glue {
    use super::{State, StateKey};
    use crate::handler::{HandlerError, Incoming};

    /// The handler arguments after the payload that are application state: `State<T>` alone.
    #[diagnostic::on_unimplemented(
        message = "a handler's arguments after the payload are its `Context` and `State<T>` values, not `{Self}`",
        label = "expected `nats_topology::State<T>` here",
        note = "a handler takes one payload argument, then optionally `cx: Context`, then any number of `State<T>` (state given to `Runtime::builder(..).state(..)`): to receive several values in the message, make the payload a struct that holds them"
    )]
    pub trait StateArg: Sized {
        /// What the runtime must have been given.
        const KEY: StateKey;

        /// The value, from the runtime's state.
        fn from_incoming(incoming: &Incoming) -> Result<Self, HandlerError>;
    }

    impl<T: std::any::Any + Send + Sync> StateArg for State<T> {
        const KEY: StateKey = StateKey::of::<T>();

        fn from_incoming(incoming: &Incoming) -> Result<Self, HandlerError> {
            // `RuntimeBuilder::build` refuses a runtime that lacks it, so this is found; the
            // error is for a handler registered behind the builder's back.
            match incoming.context().state_arc::<T>() {
                Some(value) => Ok(State(value)),
                None => Err(HandlerError::permanent(format!(
                    "the handler takes `State<{}>` but the runtime was given no such state: add `.state(..)` with a value of that type to `Runtime::builder`",
                    std::any::type_name::<T>()
                ))),
            }
        }
    }

    /// A handler's `State` argument.
    pub fn state<S: StateArg>(incoming: &Incoming) -> Result<S, HandlerError> {
        S::from_incoming(incoming)
    }
}
