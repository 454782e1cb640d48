//! Permission violations the server reported on the runtime's connection, each with the
//! declarations that need the denied subject ([`PermissionDenial`]).

use std::fmt;
use std::sync::Mutex;
use tokio::time::Instant;

use crate::grant::{Declaration, Verb};

/// A subject the server refused to this connection's user, and who needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PermissionDenial {
    /// Publish (a JetStream API request is one) or subscribe.
    pub action: Verb,
    /// The subject the server denied.
    pub subject: String,
    /// The entry of the generated permissions that would allow it (`export --permissions`),
    /// or `None` when no declaration of this service needs it (a handler's own publish to a
    /// subject outside the streams it owns: grant it with `Role::publishes`).
    pub permission: Option<String>,
    /// The declarations that need it, with what for.
    pub needed_by: Vec<(Declaration, String)>,
    /// How many times the server reported it.
    pub count: u64,
    /// When it was last reported.
    pub last: Instant,
}

impl PermissionDenial {
    /// Whether it concerns the consumer of `stream` declared by `handler`: it needs the
    /// subject, or its stream does, or every replica does.
    pub fn concerns(&self, stream: &str, handler: &str) -> bool {
        self.needed_by.is_empty()
            || self.needed_by.iter().any(|(d, _)| match d {
                Declaration::Service => true,
                Declaration::Stream(s) => s == stream,
                Declaration::Consumer {
                    stream: s,
                    handler: h,
                } => s == stream && h == handler,
            })
    }
}

impl fmt::Display for PermissionDenial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "permission denied: the server refused to {} `{}` ({} times, last {:.0?} ago)",
            self.action.as_str(),
            self.subject,
            self.count,
            self.last.elapsed()
        )?;
        match &self.permission {
            Some(permission) => {
                write!(
                    f,
                    "; grant {} `{permission}`, needed by ",
                    self.action.as_str()
                )?;
                for (i, (declaration, why)) in self.needed_by.iter().enumerate() {
                    let sep = if i == 0 { "" } else { "; " };
                    write!(f, "{sep}{declaration} ({why})")?;
                }
                write!(f, " (`export --permissions` lists them all)")
            }
            None => write!(
                f,
                "; no declaration needs it (a handler's own publish?): grant it to the service's \
                 user, and declare it with `Role::publishes` so that the generated permissions \
                 include it"
            ),
        }
    }
}

/// The denials of one runtime.
#[derive(Default)]
pub(crate) struct Denials {
    all: Mutex<Vec<PermissionDenial>>,
}

impl Denials {
    /// Records one report; true when it is new.
    pub(crate) fn report(&self, mut denial: PermissionDenial) -> bool {
        let mut all = self.all.lock().unwrap_or_else(|e| e.into_inner());
        match all
            .iter_mut()
            .find(|d| d.action == denial.action && d.subject == denial.subject)
        {
            Some(known) => {
                known.count += 1;
                known.last = denial.last;
                false
            }
            None => {
                denial.count = 1;
                all.push(denial);
                true
            }
        }
    }

    /// The denials reported on the current connection.
    pub(crate) fn all(&self) -> Vec<PermissionDenial> {
        self.all.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Forgets them (the connection was established again: the server says again what it
    /// still denies); true if there were some.
    pub(crate) fn clear(&self) -> bool {
        let mut all = self.all.lock().unwrap_or_else(|e| e.into_inner());
        let had = !all.is_empty();
        all.clear();
        had
    }
}
