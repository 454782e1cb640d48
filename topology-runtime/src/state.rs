//! Application state: the map the builder is given (`StateMap`, one value per type), the
//! handler argument that reads it ([`State<T>`]), and the requirement each such argument places
//! on the runtime ([`StateKey`], checked by [`RuntimeBuilder::build`]).
//!
//! [`RuntimeBuilder::build`]: crate::RuntimeBuilder::build

use std::any::{Any, TypeId};
use std::collections::HashMap;
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

/// Application state given to [`RuntimeBuilder::state`](crate::RuntimeBuilder::state), one value
/// per type.
#[derive(Clone, Default)]
pub(crate) struct StateMap(Arc<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>);

impl StateMap {
    pub(crate) fn insert<T: Any + Send + Sync>(&mut self, value: T) {
        Arc::make_mut(&mut self.0).insert(TypeId::of::<T>(), Arc::new(value));
    }

    pub(crate) fn get<T: Any + Send + Sync>(&self) -> Option<&T> {
        self.0.get(&TypeId::of::<T>())?.downcast_ref::<T>()
    }

    pub(crate) fn get_arc<T: Any + Send + Sync>(&self) -> Option<Arc<T>> {
        self.0.get(&TypeId::of::<T>())?.clone().downcast::<T>().ok()
    }

    pub(crate) fn contains(&self, id: TypeId) -> bool {
        self.0.contains_key(&id)
    }
}
