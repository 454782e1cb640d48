//! What the server the connection is on can do, from the version in its INFO: read in one
//! place ([`Provisioner::server`]) and parsed once per server (a connection moved to another
//! server is read anew), then asked by each feature's check.

use std::fmt;
use std::sync::{Arc, Mutex};

use topology_core::origin::TRANSFORMS_SINCE;
use topology_core::priority::PRIORITY_SINCE;

use super::Provisioner;

/// Consumer pause (`pause_until`, `CONSUMER.PAUSE`), which a migration needs.
const PAUSE_SINCE: (u64, u64, u64) = (2, 11, 0);

/// The oldest server on which repeating an identical CREATE is safe (nats-server #8413).
pub(crate) const SAFE_CREATE_SINCE: (u64, u64, u64) = (2, 14, 5);

/// A server's version, as its INFO gives it and parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ServerVersion {
    text: String,
    parsed: Option<(u64, u64, u64)>,
}

impl ServerVersion {
    pub(crate) fn new(text: &str) -> Self {
        ServerVersion {
            text: text.to_owned(),
            parsed: parse_version(text),
        }
    }

    /// `(major, minor, patch)`; `None` for a version that does not parse (a development
    /// build): then the server's own answer tells what it can do.
    pub(crate) fn parsed(&self) -> Option<(u64, u64, u64)> {
        self.parsed
    }

    /// Whether the server is `since` or newer; `None` if its version does not parse.
    pub(crate) fn at_least(&self, since: (u64, u64, u64)) -> Option<bool> {
        self.parsed.map(|found| found >= since)
    }

    /// Priority groups (pinned client, overflow), 2.11.
    pub(crate) fn has_priority_groups(&self) -> Option<bool> {
        self.at_least(PRIORITY_SINCE)
    }

    /// Consumer pause, 2.11.
    pub(crate) fn has_pause(&self) -> Option<bool> {
        self.at_least(PAUSE_SINCE)
    }

    /// Subject transforms on a stream, its mirror and its sources, 2.10.
    pub(crate) fn has_transforms(&self) -> Option<bool> {
        self.at_least(TRANSFORMS_SINCE)
    }
}

impl fmt::Display for ServerVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// `"2.15.1"` (or `"2.15.1-beta"`) as a tuple.
pub(crate) fn parse_version(version: &str) -> Option<(u64, u64, u64)> {
    let mut parts = version
        .split(['.', '-', '+'])
        .map(|p| p.parse::<u64>().ok());
    Some((parts.next()??, parts.next()??, parts.next()??))
}

/// The last server version a provisioner read, shared by its clones.
#[derive(Clone, Default)]
pub(crate) struct KnownServer(Arc<Mutex<Option<Arc<ServerVersion>>>>);

impl Provisioner {
    /// The version of the server the connection is on now: the one reader of it.
    pub(crate) fn server(&self) -> Arc<ServerVersion> {
        let text = self.client.jetstream().client().server_info().version;
        let mut known = self.server.0.lock().unwrap_or_else(|e| e.into_inner());
        match &*known {
            Some(version) if version.text == text => version.clone(),
            _ => {
                let version = Arc::new(ServerVersion::new(&text));
                *known = Some(version.clone());
                version
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions() {
        assert_eq!(parse_version("2.15.1"), Some((2, 15, 1)));
        assert_eq!(parse_version("2.14.5-beta.1"), Some((2, 14, 5)));
        assert_eq!(parse_version(""), None);
        assert!(ServerVersion::new("2.9.25").at_least(SAFE_CREATE_SINCE) == Some(false));
        assert!(ServerVersion::new("2.14.10").at_least(SAFE_CREATE_SINCE) == Some(true));
    }

    #[test]
    fn features_by_version() {
        let v = ServerVersion::new;
        assert_eq!(v("2.10.26").has_priority_groups(), Some(false));
        assert_eq!(v("2.11.0").has_priority_groups(), Some(true));
        assert_eq!(v("2.12.0-RC.1").has_priority_groups(), Some(true));
        assert_eq!(v("dev").has_priority_groups(), None);
        assert_eq!(v("2.10.25").has_pause(), Some(false));
        assert_eq!(v("2.11.0-RC.1").has_pause(), Some(true));
        assert_eq!(v("3.0.0").has_pause(), Some(true));
        assert_eq!(v("unknown").has_pause(), None);
        assert_eq!(v("2.9.25").has_transforms(), Some(false));
        assert_eq!(v("2.10.0").has_transforms(), Some(true));
        assert_eq!(v("dev").has_transforms(), None);
    }
}
