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
    /// or `None` when no declaration of this service needs it (a handler's publish that its
    /// `publishes` does not list, or a publish from outside the handlers: declare it with the
    /// handler's `publishes`, or with `Role::publishes`).
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
                "; no declaration needs it (a handler's own publish?): declare it where it is \
                 published, in the handler's `publishes` (`#[queue_consumer(.., publishes = \
                 [..])]`, `#[broadcast(.., publishes = [..])]`), or with `Role::publishes` \
                 (`export --publishes`) when it is published from outside a handler, so that \
                 the generated permissions grant it; or grant it to the service's user by hand"
            ),
        }
    }
}

/// How many denied subjects that no entry of the generated permissions grants are kept one
/// by one (a handler's own publishes, say); past that they are counted on the last one.
const UNGRANTED_KEPT: usize = 64;

/// How often a denial that goes on is said again in the log.
pub(crate) const SAID_AGAIN_AFTER: std::time::Duration = std::time::Duration::from_secs(60);

/// The denials of one runtime, one per entry of the generated permissions that would grant
/// them (every ack of a consumer has its own subject, and one entry grants them all): as many
/// as there are distinct entries, however many subjects the server denies.
#[derive(Default)]
pub(crate) struct Denials {
    all: Mutex<Vec<(PermissionDenial, Instant)>>,
}

impl Denials {
    /// Records one report (`denial.subject` becomes the entry's latest example); true when it
    /// is to be said in the log: new, or not said for [`SAID_AGAIN_AFTER`].
    pub(crate) fn report(&self, mut denial: PermissionDenial) -> bool {
        let mut all = self.all.lock().unwrap_or_else(|e| e.into_inner());
        let same = |d: &PermissionDenial| {
            d.action == denial.action
                && match (&d.permission, &denial.permission) {
                    (Some(known), Some(new)) => known == new,
                    (None, None) => d.subject == denial.subject,
                    _ => false,
                }
        };
        let ungranted = all.iter().filter(|(d, _)| d.permission.is_none()).count();
        let known = match all.iter().position(|(d, _)| same(d)) {
            Some(at) => Some(at),
            None if denial.permission.is_none() && ungranted >= UNGRANTED_KEPT => {
                all.iter().rposition(|(d, _)| d.permission.is_none())
            }
            None => None,
        };
        match known {
            Some(at) => {
                let (known, said) = &mut all[at];
                known.count += 1;
                known.last = denial.last;
                known.subject = denial.subject;
                if said.elapsed() >= SAID_AGAIN_AFTER {
                    *said = Instant::now();
                    return true;
                }
                false
            }
            None => {
                denial.count = 1;
                all.push((denial, Instant::now()));
                true
            }
        }
    }

    /// The denials reported on the current connection.
    /// Whether the server refused `subject` to this connection.
    pub(crate) fn refuses(&self, subject: &str) -> bool {
        let all = self.all.lock().unwrap_or_else(|e| e.into_inner());
        all.iter().any(|(d, _)| d.subject == subject)
    }

    pub(crate) fn all(&self) -> Vec<PermissionDenial> {
        let all = self.all.lock().unwrap_or_else(|e| e.into_inner());
        all.iter().map(|(d, _)| d.clone()).collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    fn denial(subject: &str, permission: Option<&str>) -> PermissionDenial {
        PermissionDenial {
            action: Verb::Publish,
            subject: subject.to_owned(),
            permission: permission.map(str::to_owned),
            needed_by: Vec::new(),
            count: 1,
            last: Instant::now(),
        }
    }

    #[test]
    fn a_denial_says_what_to_grant_or_where_to_declare_it() {
        let mut granted = denial(
            "$JS.ACK.ORDERS.workers.1.2.3.4.5",
            Some("$JS.ACK.ORDERS.workers.>"),
        );
        granted.needed_by.push((
            Declaration::Consumer {
                stream: "ORDERS".into(),
                handler: "billing::on_order".into(),
            },
            "acknowledges its messages".into(),
        ));
        let text = granted.to_string();
        assert!(
            text.contains(
                "grant publish `$JS.ACK.ORDERS.workers.>`, needed by consumer \
                 `billing::on_order` of stream `ORDERS` (acknowledges its messages)"
            ),
            "{text}"
        );
        let text = denial("invoices.paid", None).to_string();
        let handler = text
            .find("`#[queue_consumer(.., publishes = [..])]`")
            .expect("names the handler's `publishes`");
        let role = text
            .find("`Role::publishes`")
            .expect("names `Role::publishes`");
        assert!(handler < role, "the handler's key first: {text}");
        assert!(text.contains("the server refused to publish `invoices.paid`"));
    }

    #[test]
    fn one_denial_per_entry_however_many_subjects() {
        let denials = Denials::default();
        let entry = Some("$JS.ACK.ORDERS.workers.>");
        let mut said = 0;
        for i in 0..5_000 {
            let subject = format!("$JS.ACK.ORDERS.workers.1.{i}.{i}.0.0");
            said += usize::from(denials.report(denial(&subject, entry)));
        }
        for i in 0..1_000 {
            said += usize::from(denials.report(denial(&format!("own.{i}"), None)));
        }
        let all = denials.all();
        assert_eq!(all.len(), 1 + UNGRANTED_KEPT, "bounded");
        assert_eq!(all[0].count, 5_000);
        assert!(
            all[0].subject.ends_with(".4999.4999.0.0"),
            "the latest example"
        );
        assert_eq!(
            all.iter().map(|d| d.count).sum::<u64>(),
            6_000,
            "every report counted"
        );
        assert_eq!(said, 1 + UNGRANTED_KEPT, "each said once");
    }
}
