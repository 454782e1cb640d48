//! What the runtime watches beside its consumers, each a supervised task of its own:
//!
//! - `reach`: whether JetStream answers through the connection; moving to another server.
//! - `violations`: the permission violations the server reports, mapped to the declarations
//!   that need each denied entry.
//! - `unread_streams`: the streams no consumer of this service reads, ensured again when they
//!   disappear.
//! - `writes`: whether each declared stream takes writes (a leader with a quorum).

mod reach;
mod unread_streams;
mod violations;
mod writes;

pub(super) use reach::{cut_off, watch_reach};
pub(super) use unread_streams::supervise_stream;
pub(super) use violations::{sweep_denials, watch_denials};
pub(super) use writes::watch_writes;
