//! Which leader advisories a watch takes as its JetStream's.

/// Where the server publishes JetStream advisories, in every domain
/// (`$JS.<domain>.EVENT.ADVISORY` is not a thing: advisories keep this prefix and carry the
/// domain in their payload; an account import may map them elsewhere).
pub(crate) const ADVISORY_PREFIX: &str = "$JS.EVENT.ADVISORY";

/// Which leader advisories the watch listens to.
///
/// A JetStream domain's servers publish their advisories in their own account, on their own
/// servers. Across a leaf node connection they reach this connection only when the account's
/// interest crosses it (it does when both ends bind the same account, as the test kit's leaf
/// topology does; an edge whose leaf connection binds another account keeps them), and then
/// mixed with the local domain's own advisories under the same subjects. So in a domain the
/// watch keeps only advisories whose payload names that domain, and relies on the `INFO`
/// probe, which goes through the domain's prefix, for the rest. Behind an arbitrary API prefix
/// (an account import) nothing says which JetStream an advisory came from: the watch probes
/// only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Advisories {
    /// The connection's own JetStream: every advisory is ours.
    All,
    /// Only those whose payload's `domain` is this one.
    Domain(String),
    /// None: probe only.
    None,
}

impl Advisories {
    /// What a runtime talking to `api` listens to.
    pub(crate) fn of(api: &crate::jsapi::JetStreamApi) -> Self {
        use crate::jsapi::JetStreamApi;
        match api {
            JetStreamApi::Local => Advisories::All,
            JetStreamApi::Domain(domain) => Advisories::Domain(domain.clone()),
            JetStreamApi::Prefix(_) => Advisories::None,
        }
    }

    /// Whether an advisory with this payload concerns the watched JetStream.
    pub(crate) fn accepts(&self, payload: &[u8]) -> bool {
        match self {
            Advisories::All => true,
            Advisories::None => false,
            Advisories::Domain(domain) => serde_json::from_slice::<serde_json::Value>(payload)
                .ok()
                .and_then(|v| v.get("domain")?.as_str().map(|d| d == domain))
                .unwrap_or(false),
        }
    }
}
