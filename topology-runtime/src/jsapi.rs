//! Which JetStream the runtime talks to: the connection's own (`$JS.API`), a JetStream domain
//! (`$JS.<domain>.API`, for example an edge site's across a leaf node connection), or any API
//! prefix an account import maps; set with
//! [`RuntimeBuilder::domain`](crate::RuntimeBuilder::domain) or
//! [`RuntimeBuilder::api_prefix`](crate::RuntimeBuilder::api_prefix).
//!
//! Every request the runtime makes goes through it: provisioning, reads (`plan`, `inspect`,
//! health), the pull requests of the feed. Acknowledgements need nothing: they are replies to
//! the subject each message came with, which already routes to the JetStream that sent it.

use std::time::Duration;

use async_nats::jetstream;

/// The default JetStream API prefix.
pub(crate) const DEFAULT_PREFIX: &str = "$JS.API";

/// Where JetStream API requests go.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) enum JetStreamApi {
    /// `$JS.API`: the JetStream of the connection's own domain.
    #[default]
    Local,
    /// `$JS.<domain>.API`.
    Domain(String),
    /// Any prefix (an account import's).
    Prefix(String),
}

impl JetStreamApi {
    /// The prefix requests are sent under, e.g. `$JS.edge.API`.
    pub(crate) fn prefix(&self) -> String {
        match self {
            JetStreamApi::Local => DEFAULT_PREFIX.to_owned(),
            JetStreamApi::Domain(domain) => format!("$JS.{domain}.API"),
            JetStreamApi::Prefix(prefix) => prefix.clone(),
        }
    }

    /// A JetStream context whose requests use this prefix and give up after `timeout`.
    pub(crate) fn context(
        &self,
        client: async_nats::Client,
        timeout: Duration,
    ) -> jetstream::Context {
        let builder = jetstream::ContextBuilder::new().timeout(timeout);
        match self {
            JetStreamApi::Local => builder.build(client),
            JetStreamApi::Domain(domain) => builder.domain(domain.as_str()).build(client),
            JetStreamApi::Prefix(prefix) => builder.api_prefix(prefix.as_str()).build(client),
        }
    }

    /// `" through JetStream domain `edge` (API prefix `$JS.edge.API`)"`, empty for the local
    /// JetStream: for error messages.
    pub(crate) fn through(&self) -> String {
        match self {
            JetStreamApi::Local => String::new(),
            JetStreamApi::Domain(domain) => {
                format!(
                    " through JetStream domain `{domain}` (API prefix `{}`)",
                    self.prefix()
                )
            }
            JetStreamApi::Prefix(prefix) => format!(" through JetStream API prefix `{prefix}`"),
        }
    }

    /// What to check when nothing answers under this prefix (no responders).
    pub(crate) fn unanswered_hint(&self) -> String {
        match self {
            JetStreamApi::Local => String::new(),
            JetStreamApi::Domain(domain) => format!(
                "; no server answered for JetStream domain `{domain}`: check the domain name \
                 (it is the `domain` of the `jetstream` block of the servers that hold the \
                 streams) and that this connection reaches them (a leaf node connection that \
                 is down looks the same)"
            ),
            JetStreamApi::Prefix(prefix) => format!(
                "; nothing answered under the API prefix `{prefix}`: check the prefix and the \
                 account import that maps it"
            ),
        }
    }

    /// Why this is not a usable domain or prefix, if it is not.
    pub(crate) fn problem(&self) -> Option<String> {
        let token_ok = |t: &str| {
            !t.is_empty() && !t.contains(|c: char| c.is_whitespace() || c == '*' || c == '>')
        };
        match self {
            JetStreamApi::Local => None,
            JetStreamApi::Domain(domain) => {
                (!token_ok(domain) || domain.contains('.')).then(|| {
                    format!(
                        "`{domain}` is not a JetStream domain name: it must be one non-empty \
                     subject token (no `.`, `*`, `>` or whitespace), as in the `domain` of the \
                     servers' `jetstream` block"
                    )
                })
            }
            JetStreamApi::Prefix(prefix) => (!prefix.split('.').all(token_ok)).then(|| {
                format!(
                    "`{prefix}` is not a JetStream API prefix: it must be a subject of \
                     non-empty tokens without wildcards or whitespace, such as `$JS.hub.API` \
                     or an account import's `JS.hub.API`"
                )
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::JetStreamApi;

    #[test]
    fn prefixes() {
        assert_eq!(JetStreamApi::Local.prefix(), "$JS.API");
        assert_eq!(JetStreamApi::Domain("edge".into()).prefix(), "$JS.edge.API");
        assert_eq!(
            JetStreamApi::Prefix("JS.hub.API".into()).prefix(),
            "JS.hub.API"
        );
        assert_eq!(JetStreamApi::Local.through(), "");
        assert!(
            JetStreamApi::Domain("edge".into())
                .through()
                .contains("`edge`")
        );
    }

    #[test]
    fn bad_domains_and_prefixes_are_named() {
        for bad in ["", "a.b", "a b", "*", ">"] {
            let problem = JetStreamApi::Domain(bad.into()).problem().expect(bad);
            assert!(problem.contains(&format!("`{bad}`")), "{problem}");
        }
        assert_eq!(JetStreamApi::Domain("edge-1".into()).problem(), None);
        for bad in ["", "$JS..API", "$JS.*.API", "JS.hub.API.", "JS hub"] {
            let problem = JetStreamApi::Prefix(bad.into()).problem().expect(bad);
            assert!(problem.contains(&format!("`{bad}`")), "{problem}");
        }
        assert_eq!(JetStreamApi::Prefix("JS.hub.API".into()).problem(), None);
        assert_eq!(JetStreamApi::Local.problem(), None);
    }
}
