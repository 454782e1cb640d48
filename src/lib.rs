//! Facade.

pub use topology_runtime::handler::HandlerFuture;
pub use topology_runtime::{
    ConsumerState, ConsumerStatus, Context, HandlerError, Health, Incoming, Inspection, Plan,
    Problem, ProvisionError, ProvisionErrorKind, ProvisionReport, RetryPolicy, RunError, Runtime,
    RuntimeBuilder, Topology, ValidationError, model, report,
};

#[cfg(feature = "testkit")]
pub use topology_runtime::testkit;

pub use topology_macros::{broadcast, queue_consumer, stream};

/// What generated code reaches. Not public API: it may change in any release.
#[doc(hidden)]
pub mod __private {
    pub use ::core::time::Duration;
    pub use ::inventory;
    pub use ::std::boxed::Box;
    pub use topology_core::model::{
        BroadcastDecl, ConsumerDecl, ConsumerKind, DeliverPolicy, Delivery, Discard, QueueDecl,
        Retention, Storage, StreamDecl, StreamDef, StreamRef,
    };
    pub use topology_runtime::handler::glue::{
        RawPayload, assert_send, context, decode_json, decode_raw, into_result,
    };
    pub use topology_runtime::handler::{HandlerError, HandlerFuture, Incoming};
    pub use topology_runtime::registry::{ConsumerRegistration, StreamRegistration};
    // The rules that generated `const _` assertions call (the same functions the macros call
    // at expansion time and the runtime at start-up).
    pub use topology_core::rules::{allows_broadcast, dead_letter_loops};
    pub use topology_core::subject::covered_by;
}
