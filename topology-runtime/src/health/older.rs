//! Declarations found older than the version stamped on the server: provisioning records
//! them, health shows them.

use std::fmt;
use std::sync::{Arc, Mutex};

/// A stream or consumer whose declaration here is older than the version stamped on the
/// server: its editable differences were not applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OlderDeclaration {
    /// The stream.
    pub stream: String,
    /// The consumer, or `None` for the stream itself.
    pub consumer: Option<String>,
    /// This instance's version.
    pub declared: String,
    /// The version stamped on the server.
    pub server: String,
}

impl fmt::Display for OlderDeclaration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "stream `{}`", self.stream)?;
        if let Some(c) = &self.consumer {
            write!(f, ", consumer `{c}`")?;
        }
        write!(
            f,
            ": declared by an older version ({} here, {} on the server); its settings were \
             left as the newer version set them",
            self.declared, self.server
        )
    }
}

/// The older declarations one runtime met, shared by its provisioning and its health.
#[derive(Debug, Clone, Default)]
pub(crate) struct OlderDeclarations(Arc<Mutex<Vec<OlderDeclaration>>>);

impl OlderDeclarations {
    pub(crate) fn record(&self, found: OlderDeclaration) {
        let mut all = self.0.lock().unwrap_or_else(|e| e.into_inner());
        all.retain(|o| !(o.stream == found.stream && o.consumer == found.consumer));
        all.push(found);
    }

    /// Forgets `stream`/`consumer` (provisioned as declared since).
    pub(crate) fn clear(&self, stream: &str, consumer: Option<&str>) {
        let mut all = self.0.lock().unwrap_or_else(|e| e.into_inner());
        all.retain(|o| !(o.stream == stream && o.consumer.as_deref() == consumer));
    }

    pub(crate) fn all(&self) -> Vec<OlderDeclaration> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}
